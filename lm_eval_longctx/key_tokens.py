"""Key tokens judged by an evaluator model, and their on-disk cache (no lm-eval import).

The evaluator scores the text (tokenized with its default special tokens, as the reference does)
under the long context and the reference truncated windows; key tokens become character spans
(``keyspans``). Spans are cached on disk keyed by everything they depend on, so evaluating a
second model reuses them and costs only that model's one long pass.

Cache entries are data: ``<key>.txt`` in the reference span format, and ``<key>.npz`` (plain
arrays, loaded with ``allow_pickle=False``) holding the evaluator's token offsets and
long-short differences, which LongPPL-soft needs.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import engine, keyspans, metrics

# Bump when the way spans are computed changes, so old cache entries are not reused.
SPAN_ALGORITHM_VERSION = 1


@dataclass
class EvaluatorJudgement:
    """What the evaluator says about one text."""

    spans: list[tuple[int, int]]
    offsets: np.ndarray | None = None  # evaluator token offsets [n, 2]
    lsd: np.ndarray | None = None  # long-short difference per target [n - 1], NaN before K

    def soft_weights_for(self, eval_offsets: np.ndarray, gamma: float) -> np.ndarray:
        """LongPPL-soft weight of each evaluated-model target (token i -> index i - 1).

        An evaluated token takes the weight min(exp(LSD), gamma) of the evaluator token that holds
        its last character; tokens before the evaluator's first truncated window weigh 1.
        """
        if self.offsets is None or self.lsd is None:
            raise ValueError("LongPPL-soft needs the evaluator's per-token LSD; key spans read from "
                             "files do not carry it (use an evaluator model or 'self')")
        w_eval = np.where(np.isnan(self.lsd), 1.0, np.minimum(np.exp(np.nan_to_num(self.lsd, nan=0.0)), gamma))
        starts = self.offsets[:, 0]
        last_char = np.maximum(eval_offsets[1:, 1] - 1, eval_offsets[1:, 0])
        j = np.clip(np.searchsorted(starts, last_char, side="right") - 1, 0, len(starts) - 1)
        # target j - 1 is the prediction of evaluator token j; token 0 (BOS) has none
        return np.where(j >= 1, w_eval[np.clip(j - 1, 0, None)], 1.0)


def judge_from_scores(scores: engine.SequenceScores, alpha: float, beta: float) -> EvaluatorJudgement:
    """Key spans from an evaluator's long and truncated passes over one text."""
    if scores.short is None or scores.offsets is None:
        raise ValueError("the evaluator pass needs truncated scores and token offsets")
    mask = metrics.key_token_mask(scores.long.logprob, scores.short.logprob, alpha, beta)
    spans = keyspans.key_spans_from_tokens(mask, scores.offsets)
    lsd = metrics.long_short_difference(scores.long.logprob, scores.short.logprob).astype(np.float32)
    return EvaluatorJudgement(spans, np.asarray(scores.offsets), lsd)


def score_text(model, tokenizer, text: str, trunc_len: int, stride: int, chunk_size: int = engine.DEFAULT_CHUNK_SIZE,
               batch_size: int = 4, add_special_tokens: bool = True) -> engine.SequenceScores:
    """Long and truncated passes over ``text`` as the evaluator tokenizes it."""
    ids, offsets = keyspans.token_offsets(tokenizer, text, add_special_tokens=add_special_tokens)
    long = engine.score_long(model, ids, chunk_size=chunk_size)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    short = engine.score_truncated(model, [ids], trunc_len, stride, batch_size=batch_size, pad_token_id=pad)[0]
    return engine.SequenceScores(np.asarray(ids, dtype=np.int64), offsets, long, short)


# ---------------------------------------------------------------- loading the evaluator


def default_evaluator_device() -> str:
    """This rank's CUDA device (LOCAL_RANK under ``accelerate launch`` / torchrun), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return "cpu"


def evaluator_dtype_name(device: str | None, dtype: str | None = None) -> str:
    """The dtype the evaluator runs in: ``dtype`` when given, else bfloat16 on GPUs, float32 on the CPU.

    ``device`` "auto" counts as GPUs when CUDA is available (that is where device_map="auto" puts it)."""
    if dtype:
        return str(dtype)
    import torch

    device = str(device or default_evaluator_device())
    on_gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "bfloat16" if on_gpu else "float32"


def parse_max_memory(value) -> dict | None:
    """An accelerate ``max_memory`` map from a dict or its JSON text: {"0": "70GiB", "cpu": "200GiB"}.

    Keys: a GPU index (0, "0" or "cuda:0") or "cpu" (CPU offload, used only when named here).
    Values: bytes (int) or a size string accelerate reads ("70GiB", "500MB"). None stays None."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"evaluator_max_memory must be a JSON object such as '{{\"0\": \"70GiB\", "
                             f"\"1\": \"70GiB\"}}', got {value!r} ({e})") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"evaluator_max_memory must be a non-empty map of device -> size, got {value!r}")
    from accelerate.utils import convert_file_size_to_int

    out: dict = {}
    for key, size in value.items():
        k = str(key).strip().lower()
        if k.startswith("cuda:"):
            k = k[len("cuda:"):]
        if k.isdigit():
            device = int(k)
        elif k == "cpu":
            device = "cpu"
        else:
            raise ValueError(f"evaluator_max_memory: unknown device {key!r} (use GPU indices such as \"0\" "
                             "and, for CPU offload, \"cpu\")")
        try:
            nbytes = int(size) if isinstance(size, int) else convert_file_size_to_int(str(size))
        except (ValueError, TypeError):
            raise ValueError(f"evaluator_max_memory[{key!r}]: {size!r} is not a size (bytes, or e.g. \"70GiB\")") from None
        if isinstance(size, bool) or nbytes <= 0:
            raise ValueError(f"evaluator_max_memory[{key!r}]: {size!r} is not a positive size")
        out[device] = nbytes
    return out


def auto_device_budget(max_memory: dict | None) -> dict:
    """The ``max_memory`` that device_map="auto" may fill.

    Given (parsed by :func:`parse_max_memory`): that map, once its GPU indices are checked against the
    visible GPUs. Not given: the visible GPUs only (no CPU offload unless asked), this rank's share of
    them when several processes run on one machine (GPU i goes to local rank i % local world size, as
    lm-eval's parallelize does); on a machine without GPUs, the CPU (which is then the device, not an
    offload)."""
    import torch
    from accelerate.utils import get_max_memory

    if max_memory is not None:
        missing = sorted(k for k in max_memory if isinstance(k, int) and k >= torch.cuda.device_count())
        if missing:
            raise ValueError(f"evaluator_max_memory names GPU(s) {missing}, but {torch.cuda.device_count()} "
                             "GPU(s) are visible")
        return max_memory
    available = get_max_memory()
    gpus = {k: v for k, v in available.items() if isinstance(k, int)}
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if local_world > 1:
        gpus = {k: v for k, v in gpus.items() if k % local_world == local_rank % local_world}
    return gpus or {"cpu": available["cpu"]}


def check_placement(name: str, model, budget: dict) -> None:
    """A model that did not fit is an error, never a silent offload to disk (or to the CPU when the
    budget does not name it)."""
    placed = set(getattr(model, "hf_device_map", {}).values())
    if "disk" in placed or ("cpu" in placed and "cpu" not in budget):
        raise ValueError(
            f"the evaluator {name} does not fit in {budget} (layers were sent to {sorted(map(str, placed))}); "
            "use more GPUs, larger evaluator_max_memory entries, or name \"cpu\" in evaluator_max_memory "
            "to offload layers to CPU memory")


def load_evaluator(name: str, *, revision: str | None = None, dtype: str | None = None, device: str | None = None,
                   max_memory=None, trust_remote_code: bool = False):
    """The key-token evaluator as (model, tokenizer), in eval mode.

    ``device``: None (this rank's GPU, else CPU), an explicit device ("cuda:1", "cpu"), or "auto":
    transformers' ``device_map="auto"`` splits the layers over the visible GPUs (for evaluators larger
    than one GPU, such as a 72B model), within ``max_memory`` when given (a map for
    :func:`parse_max_memory`; CPU offload only when it names "cpu"). ``dtype``: a torch dtype name,
    default :func:`evaluator_dtype_name`. The engine scores the result wherever its layers sit.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = str(device or default_evaluator_device())
    max_memory = parse_max_memory(max_memory)
    if max_memory is not None and device != "auto":
        raise ValueError(f"evaluator_max_memory applies to evaluator_device 'auto' only (got device {device!r})")
    dtype_name = evaluator_dtype_name(device, dtype)
    torch_dtype = getattr(torch, dtype_name, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown evaluator dtype {dtype_name!r} (use bfloat16, float16 or float32)")
    tokenizer = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    if device == "auto":
        budget = auto_device_budget(max_memory)
        model = AutoModelForCausalLM.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code,
                                                     dtype=torch_dtype, device_map="auto", max_memory=budget)
        check_placement(name, model, budget)
    else:
        model = AutoModelForCausalLM.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code,
                                                     dtype=torch_dtype).to(device)
    return model.eval(), tokenizer


def model_fingerprint(name_or_path: str, model=None) -> str:
    """Identifies the evaluator's weights: hub commit hash when known, else local file stamps."""
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    path = Path(name_or_path)
    if path.is_dir():
        stamps = sorted(
            (p.name, p.stat().st_size, int(p.stat().st_mtime))
            for p in path.iterdir()
            if p.suffix in {".safetensors", ".bin", ".json"}
        )
        return hashlib.sha256(json.dumps([str(path.resolve()), stamps]).encode()).hexdigest()[:16]
    return f"{name_or_path}@{commit or 'unknown'}"


def default_cache_dir() -> Path:
    root = os.environ.get("LM_EVAL_LONGCTX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lm_eval_longctx")
    return Path(root) / "key_spans"


class SpanCache:
    """Key spans on disk, one entry per (evaluator, settings, text)."""

    def __init__(self, directory: str | Path | None):
        self.directory = None if directory is None else Path(directory)

    @staticmethod
    def key(text: str, settings: dict) -> str:
        payload = json.dumps({"settings": settings, "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                              "algorithm": SPAN_ALGORITHM_VERSION}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def get(self, key: str) -> EvaluatorJudgement | None:
        if self.directory is None:
            return None
        txt, npz = self.directory / f"{key}.txt", self.directory / f"{key}.npz"
        if not (txt.is_file() and npz.is_file()):
            return None
        with np.load(npz, allow_pickle=False) as z:
            return EvaluatorJudgement(keyspans.read_span_file(txt), z["offsets"], z["lsd"])

    def put(self, key: str, judgement: EvaluatorJudgement, settings: dict) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"{key}.tmp.npz"
        np.savez(tmp, offsets=np.asarray(judgement.offsets, dtype=np.int64),
                 lsd=np.asarray(judgement.lsd, dtype=np.float32))
        tmp.replace(self.directory / f"{key}.npz")
        keyspans.write_span_file(self.directory / f"{key}.txt", judgement.spans)
        meta = self.directory / f"{key}.json"
        if not meta.exists():
            meta.write_text(json.dumps(settings, sort_keys=True), encoding="utf-8")
