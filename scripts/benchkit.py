"""The benchmarks' shared kit: model shapes, random models, worker command lines, device sync, memory peaks, and the
forward ledger: the time a run spent inside its model's decoder and output head, call by call, which is the floor its
wall time is held against.

Used by the ``bench_*.py`` and ``check_*.py`` scripts beside it (Python puts this folder on ``sys.path`` when one
runs as a script); importing it puts the checkout first on ``sys.path``, so a script measures the package beside it,
installed or not.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Llama bodies: a tiny one for a CPU and the Llama-3.1-8B body for a GPU (the vocabulary is each script's choice)
SHAPES = {
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128
    ),
    "llama8b": dict(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336
    ),
}


def random_llama(shape: str, vocab_size: int, max_positions: int, dtype: str, device: str, seed: int = 0, **config):
    """A random-weight Llama of ``SHAPES[shape]``, built on ``device`` in ``dtype`` (no float32 copy of 8B weights).

    Example:
        >>> model = random_llama("tiny", vocab_size=100, max_positions=64, dtype="float32", device="cpu")
        >>> model.config.num_hidden_layers
        2
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(rope_theta=500000.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    settings.update(config)
    llama_config = LlamaConfig(
        vocab_size=vocab_size, max_position_embeddings=max_positions, **SHAPES[shape], **settings
    )
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPES[dtype])
    try:
        with torch.device(device):
            model = LlamaForCausalLM(llama_config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


# Default init predicts near-uniformly (every log-prob about -log(vocab)), so two scoring paths would agree trivially;
# an output head scaled this much makes the predictions peaked.
PEAKED_HEAD_SCALE = 20.0


def peaked_llama(vocab_size: int, hidden_size: int, layers: int, max_positions: int, seed: int = 0, **config):
    """A small random-weight Llama (4 heads, 2 KV heads, MLP 2 x hidden; float32 on the CPU, eval mode) whose output
    head is scaled by ``PEAKED_HEAD_SCALE``; ``config`` goes to its ``LlamaConfig``."""
    from lm_eval_longctx.demo import offline

    return offline.random_llama(
        vocab_size,
        seed=seed,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        max_position_embeddings=max_positions,
        head_scale=PEAKED_HEAD_SCALE,
        **config,
    )


def peaked_llama_options(parser) -> None:
    """The options of the ``save_peaked_llama`` model and its tokenizer a benchmark builds."""
    parser.add_argument("--vocab-size", type=int, default=32000, help="the model's vocabulary")
    parser.add_argument("--tokenizer-vocab", type=int, default=4096, help="the BPE tokenizer's vocabulary")
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)


def save_peaked_llama(folder, tokenizer, vocab_size: int, hidden_size: int, layers: int, seed: int) -> None:
    """A ``peaked_llama`` of 16384 positions with ``tokenizer``'s special tokens, saved with it to ``folder``."""
    model = peaked_llama(
        vocab_size,
        hidden_size,
        layers,
        16384,
        seed,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def worker_command(script: str, worker: str, worker_out, length: int, *options: str) -> list[str]:
    """The command line running ``script`` (a bench_*.py) in its hidden worker mode: path ``worker`` at ``length``
    tokens, its output written to ``worker_out``, then the script's own ``options``."""
    return [
        sys.executable,
        os.path.abspath(script),
        "--worker",
        worker,
        "--worker-out",
        str(worker_out),
        "--lengths",
        str(length),
        *options,
    ]


def passed_on(args, *names: str) -> list[str]:
    """The options ``--name value`` that give a worker the driver's own ``args.name`` for each of ``names``."""
    return [x for name in names for x in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]


def finish(json_path, data, ok: bool) -> int:
    """Write ``data`` to ``json_path`` (when given) and return the script's exit status."""
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if ok else 1


def sync(device) -> None:
    """Wait for the device's queued work, so that a wall-clock reading covers it."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rss_bytes() -> int:
    """The process's resident set now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The process's peak resident set so far (Linux reports KiB, macOS bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory_baseline(device) -> int:
    """The memory in use before a measured run, after the device's queued work: CUDA's allocated bytes (its cache
    emptied and its peak counter reset), or the resident set on the CPU."""
    device = torch.device(device)
    sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    return rss_bytes()


def peak_memory_bytes(device) -> int:
    """The peak memory so far (call ``sync`` first): CUDA's allocator peak since ``memory_baseline``, or the process's
    peak resident set, which never goes down (so a CPU run measured against a baseline has a process of its own)."""
    device = torch.device(device)
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak_rss_bytes()


class PeakMemory:
    """Peak memory above the level at entry: CUDA's allocator peak, or the resident set sampled every 5 ms on the
    CPU (a sampled peak can miss a spike shorter than that)."""

    def __init__(self, device):
        self.device, self.peak = torch.device(device), 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            self.base = rss_bytes()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes() - self.base)
            time.sleep(0.005)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.base
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, rss_bytes() - self.base)


# ------------------------------------------------------------------ the forward ledger and its floor


@dataclass
class ForwardLedger:
    """Every forward of a model's decoder and output head while it is attached: the shape of each decoder call
    (rows, new tokens, tokens already in its cache) with its measured seconds, and the head's rows and seconds."""

    decoder_calls: list = field(default_factory=list)  # (rows, new tokens, cached tokens, seconds)
    head_rows: int = 0
    head_seconds: float = 0.0

    @property
    def decoder_seconds(self) -> float:
        return float(sum(call[3] for call in self.decoder_calls))

    def clear(self) -> None:
        self.decoder_calls.clear()
        self.head_rows, self.head_seconds = 0, 0.0


def _cached_tokens(kwargs) -> int:
    cache = kwargs.get("past_key_values", kwargs.get("cache"))
    get_length = getattr(cache, "get_seq_length", None)
    return int(get_length()) if callable(get_length) else 0


def attach_ledger(model, device) -> tuple[ForwardLedger, callable]:
    """Hooks on ``model``'s decoder and output head that fill a ledger; returns it and the function removing them."""
    from lm_eval_longctx.engine.forward import decoder_module

    ledger, handles, started = ForwardLedger(), [], {}
    decoder, head = decoder_module(model), model.get_output_embeddings()

    def replaying(module) -> bool:
        # the engine replays the output head on kept hidden states through the model with the decoder's forward
        # swapped for a stand-in (engine.forward._forward_returning): no decoder work, so not a decoder call
        return "_forward_returning" in getattr(module.__dict__.get("forward"), "__qualname__", "")

    def decoder_before(module, args, kwargs):
        started["decoder"] = None
        if replaying(module):
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        started["decoder"] = (int(ids.shape[0]), int(ids.shape[-1]), _cached_tokens(kwargs))
        sync(device)
        started["decoder_at"] = time.perf_counter()

    def decoder_after(module, args, kwargs, output):
        if started["decoder"] is None:
            return
        sync(device)
        ledger.decoder_calls.append((*started["decoder"], time.perf_counter() - started["decoder_at"]))

    def head_before(module, args):
        sync(device)
        started["head_at"] = time.perf_counter()

    def head_after(module, args, output):
        sync(device)
        ledger.head_seconds += time.perf_counter() - started["head_at"]
        ledger.head_rows += int(np.prod(args[0].shape[:-1]))

    handles.append(decoder.register_forward_pre_hook(decoder_before, with_kwargs=True))
    handles.append(decoder.register_forward_hook(decoder_after, with_kwargs=True))
    handles.append(head.register_forward_pre_hook(head_before))
    handles.append(head.register_forward_hook(head_after))
    return ledger, lambda: [h.remove() for h in handles]
