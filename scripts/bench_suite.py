"""Benchmark the whole suite: every task through lm-eval (``simple_evaluate``, the stock ``hf`` backend) on a
random-weight model of a given body, per task the wall time, the peak memory, the tokens the engine forwarded and
their floor: those tokens at the decoder's own throughput, measured in the same run.

* ``--body tiny``: a 2-layer Llama (hidden 64) for a CPU; ``--body llama8b``: the Llama-3.1-8B body (hidden 4096,
  32 layers, 32 heads, 8 KV heads, intermediate 14336) for a GPU. The vocabulary is the packaged demo tokenizer's
  (the tasks need a real tokenizer; a 128k-row head would cost more per token than this one).
* ``--size tiny``: one or two documents and cases per task, seconds on a CPU (what the tests run);
  ``--size paper``: the papers' sizes (LongPPL: 50 documents of 16k-32k tokens with the model itself as evaluator;
  forgetting curve to 16,000 tokens; retrieval gain 50 x 8,192 tokens; the map's default ladder; LongEval's 650
  cases of 5k-33k tokens). Documents are cut from the embedded corpus, repeated where it is shorter than the size
  asks: the timings depend on lengths, not on the text.
* LongEval generation is also timed case by case against its own floor: the prompt's prefill (one forward filling
  the cache) plus one decode step per generated token, both measured on the same case.

lm-eval's task index (a ``TaskManager`` reading every task config lm-eval ships) is built once, as ``lm_eval`` does
for all the tasks of one run, and timed apart from the rows.

Peak memory: CUDA ``max_memory_allocated`` (reset per task), CPU the resident set sampled every 5 ms, both above
what was held before the task (the model's weights). The floor is ``tokens forwarded / (decoder tokens per
second)``, the decoder (``model.model``, no head) timed on ``--floor-length`` tokens.

    python scripts/bench_suite.py --body tiny --size tiny --json out/bench_suite_cpu.json
    python scripts/bench_suite.py --body llama8b --device cuda --dtype bfloat16 --size paper --json out/gpu_bf16.json
    python scripts/bench_suite.py --body llama8b --device cuda --dtype float32 --size paper --json out/gpu_fp32.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BODIES = {
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128
    ),
    "llama8b": dict(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336
    ),
}
TASKS = (
    "longppl_govreport",
    "forgetting_curve",
    "retrieval_gain",
    "retrieval_gain_map",
    "longeval_lines_ppl",
    "longeval_lines_acc",
)
# per size: the --metadata every task gets, the characters per document cut from the corpus, and --limit
SIZES = {
    "tiny": {
        "chars_per_doc": 6_000,
        "n_docs": 2,
        "limit": 2,
        "metadata": {
            "evaluator": "self",
            "trunc_len": 256,
            "sliding_window": 128,
            "num_docs": 1,
            "lengths": [16, 64],
            "samples_per_length": 1,
            "doc_tokens": 512,
            "n_queries": 2,
            "context_lengths": [128, 512],
            "depths": [0, 50],
            "num_lines": [5],
            "num_cases": 1,
            "seed": 0,
        },
    },
    "paper": {
        "chars_per_doc": 90_000,
        "n_docs": 50,
        "limit": None,
        "metadata": {"preset": "paper", "evaluator": "self", "num_docs": 50, "max_len": 16000, "seed": 0},
    },
}


# --------------------------------------------------------------------------- the model and the data


def build_model(body: str, dtype: str, device: str, max_positions: int):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from lm_eval_longctx.demo.run import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=500000.0,
        **BODIES[body],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(getattr(torch, dtype)).eval(), tokenizer


def write_corpus(path: Path, chars_per_doc: int, n_docs: int) -> Path:
    """``n_docs`` documents of ``chars_per_doc`` characters from the embedded corpus's text, repeated as needed."""
    from lm_eval_longctx.data import embedded_corpus

    stream = embedded_corpus.topics_stream()
    stream = stream * (1 + (chars_per_doc * n_docs) // len(stream))
    step = max(1, (len(stream) - chars_per_doc) // max(1, n_docs))
    texts = [stream[i * step : i * step + chars_per_doc] for i in range(n_docs)]
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return path


# --------------------------------------------------------------------------- measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """Peak memory above the level at entry: CUDA's allocator peak, or the resident set sampled on the CPU."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            self.base = _rss()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss() - self.base)
            time.sleep(0.005)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.base
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, _rss() - self.base)


@torch.no_grad()
def decoder_throughput(model, n_tokens: int, device: torch.device, repeats: int = 2) -> float:
    """Tokens per second of the decoder alone (no output head) on one sequence of ``n_tokens``."""
    ids = torch.randint(3, model.config.vocab_size, (1, n_tokens), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)
    model.model(input_ids=ids, use_cache=False)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        model.model(input_ids=ids, use_cache=False)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return n_tokens / best


@torch.no_grad()
def generation_against_floor(model, tokenizer, device, num_lines: list[int], cases: int, max_new: int) -> list[dict]:
    """Per LongEval prompt: the engine's greedy generation, against its floor on the same prompt: one prefill
    forward filling the cache plus one single-token decode step per generated token."""
    from lm_eval_longctx.data import longeval_cases
    from lm_eval_longctx.engine import generation
    from lm_eval_longctx.engine.forward import KVCache

    settings = generation.GenerationSettings(
        max_new_tokens=max_new, stop_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id or 0
    )
    rows = []
    for case in longeval_cases.generate_cases(tuple(num_lines), cases, 0):
        ids = torch.tensor(tokenizer(case.prompt)["input_ids"])
        _sync(device)
        start = time.perf_counter()
        out = generation.generate(model, [ids], settings)[0]
        _sync(device)
        seconds = time.perf_counter() - start
        cache = KVCache(model)
        _sync(device)
        start = time.perf_counter()
        cache.feed(ids[None].to(device), 1)
        _sync(device)
        prefill = time.perf_counter() - start
        steps = []
        for token in (list(out) or [0])[:8]:
            _sync(device)
            start = time.perf_counter()
            cache.feed(torch.tensor([[int(token)]], device=device), 1)
            _sync(device)
            steps.append(time.perf_counter() - start)
        step = sorted(steps)[len(steps) // 2]
        floor = prefill + len(out) * step
        rows.append(
            {
                "num_lines": case.num_lines,
                "prompt_tokens": int(ids.numel()),
                "generated": int(len(out)),
                "seconds": seconds,
                "prefill_seconds": prefill,
                "decode_step_seconds": step,
                "over_floor": seconds / floor,
            }
        )
    return rows


def run_task(lm, task: str, metadata: dict, limit, device: torch.device, task_manager) -> dict:
    import lm_eval

    with PeakMemory(device) as peak:
        start = time.perf_counter()
        out = lm_eval.simple_evaluate(
            model=lm, tasks=[task], metadata=metadata, limit=limit, log_samples=False, task_manager=task_manager
        )
        _sync(device)
        seconds = time.perf_counter() - start
    config = out["configs"][task]
    scoring = (config.get("metadata") or {}).get("longctx_settings", {}).get("runtime", {}).get("scoring", {})
    return {
        "seconds": seconds,
        "peak_mib": peak.peak / 2**20,
        "tokens_forwarded": int(scoring.get("tokens_forwarded", 0)) if isinstance(scoring, dict) else 0,
        "plans": scoring.get("plans", []) if isinstance(scoring, dict) else [],
        "retries": scoring.get("retries", []) if isinstance(scoring, dict) else [],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--body", default="tiny", choices=sorted(BODIES))
    p.add_argument("--size", default="tiny", choices=sorted(SIZES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=int, default=None, help="lm-eval's --limit (default: the size's)")
    p.add_argument("--floor-length", type=int, default=None, help="tokens of the decoder throughput measurement")
    p.add_argument("--generation-cases", type=int, default=None, help="LongEval prompts timed against their floor")
    p.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's default)")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from lm_eval.models.huggingface import HFLM

    size = SIZES[args.size]
    device = torch.device(args.device)
    floor_length = args.floor_length or (512 if args.size == "tiny" else 32768)
    model, tokenizer = build_model(args.body, args.dtype, args.device, 131072)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=args.batch_size, max_length=131072, device=args.device)
    throughput = decoder_throughput(model, floor_length, device)
    print(
        f"random Llama '{args.body}' ({BODIES[args.body]}, vocabulary {model.config.vocab_size}); {device} "
        f"{args.dtype}; size {args.size}; decoder {throughput:,.0f} tokens/s at {floor_length} tokens",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(Path(tmp) / "corpus.jsonl", size["chars_per_doc"], size["n_docs"])
        metadata = {**size["metadata"], "data_files": str(corpus)}
        limit = args.limit if args.limit is not None else size["limit"]
        # lm-eval indexes every task config it ships when a TaskManager is built: once per run, as `lm_eval` does
        # for all its --tasks, so it is timed apart from the tasks
        from lm_eval.tasks import TaskManager

        start = time.perf_counter()
        task_manager = TaskManager(metadata=metadata)
        index_seconds = time.perf_counter() - start
        print(f"lm-eval's task index (once per run, not in the rows): {index_seconds:.2f} s", flush=True)
        for task in args.tasks:
            row = {"task": task, **run_task(lm, task, metadata, limit, device, task_manager)}
            row["floor_seconds"] = row["tokens_forwarded"] / throughput
            row["over_floor"] = row["seconds"] / row["floor_seconds"] if row["floor_seconds"] else None
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("plans",)}), flush=True)
    n_gen = args.generation_cases if args.generation_cases is not None else (2 if args.size == "tiny" else 13)
    from lm_eval_longctx.data import longeval_cases

    num_lines = list(metadata.get("num_lines", longeval_cases.DEFAULT_NUM_LINES))
    cases = max(1, n_gen // len(num_lines))
    generation = generation_against_floor(model, tokenizer, device, num_lines, cases, 100) if n_gen else []

    print("\n| task | wall s | peak MiB | tokens forwarded | floor s | wall / floor |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['over_floor']:.2f}" if r["over_floor"] else ""
        print(
            f"| {r['task']} | {r['seconds']:.2f} | {r['peak_mib']:,.0f} | {r['tokens_forwarded']:,} | "
            f"{r['floor_seconds']:.2f} | {ratio} |"
        )
    if generation:
        print(
            "\n| LongEval lines | prompt tokens | generated | seconds | prefill s | decode step s | / floor |\n"
            "|---:|---:|---:|---:|---:|---:|---:|"
        )
        for g in generation:
            print(
                f"| {g['num_lines']} | {g['prompt_tokens']:,} | {g['generated']} | {g['seconds']:.3f} | "
                f"{g['prefill_seconds']:.3f} | {g['decode_step_seconds']:.4f} | {g['over_floor']:.2f} |"
            )
    result = {
        "args": vars(args),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "decoder_tokens_per_second": throughput,
        "task_index_seconds": index_seconds,
        "rows": rows,
        "generation": generation,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
