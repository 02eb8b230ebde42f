"""Benchmark the whole suite: every task through lm-eval (``simple_evaluate``, the stock ``hf`` backend), per task
the wall time, the peak memory, the tokens the engine forwarded, where the time went (inside the decoder's
forwards, inside the output head, outside both) and the floor: the decoder's own time on the forwards the task
made, measured in the same run.

* ``--model DIR``: a checkpoint, loaded as ``--model hf`` loads it, with its own tokenizer; default size ``ci``
  (the ``ci`` preset: the embedded corpus, lengths from the model's window, the model judging its key tokens).
* ``--body tiny`` (a 2-layer Llama, hidden 64, for a CPU) or ``--body llama8b`` (the Llama-3.1-8B body, for a
  GPU): random weights with the packaged demo tokenizer's vocabulary. ``--size tiny``: one or two documents and
  cases per task (seconds on a CPU; what the tests run); ``--size paper``: the papers' sizes (LongPPL: 50
  documents of 16k-32k tokens, the model as evaluator; forgetting curve to 16,000 tokens; retrieval gain 50 x
  8,192 tokens; the map's default ladder; LongEval's 650 cases), documents cut from the embedded corpus.
* LongEval generation is also timed case by case against its own floor: the prompt's prefill (one forward filling
  the cache) plus one decode step per generated token, both measured on the same case.

The floor: hooks on the model's decoder and output head time every call the task makes (with a device sync), so
the floor is the decoder's own time on exactly the forwards the task ran, in the same run; the head's time and the
time outside both are columns, and ``decoder tokens`` (every call of the model's decoder, the engine's probes
included; the head's replays on kept hidden states are not decoder calls) stands beside the engine's own count. A task far above 1 spends its time outside the model.
lm-eval's task index (a ``TaskManager`` reading every task config lm-eval ships) is built once, as ``lm_eval``
does for all the tasks of one run, and timed apart from the rows. Peak memory: CUDA ``max_memory_allocated``
(reset per task), CPU the resident set sampled every 5 ms, both above what was held before the task.

    python scripts/bench_suite.py --model DIR --threads 2 --json out/bench_suite_smollm2.json
    python scripts/bench_suite.py --body tiny --size tiny --json out/bench_suite_cpu.json
    python scripts/bench_suite.py --body llama8b --device cuda --dtype bfloat16 --size paper --json out/gpu_bf16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit; puts the checkout on sys.path)
import torch

from lm_eval_longctx.tasks.base import suite_task_names  # noqa: E402

# every task of the suite, one row each (a group's tasks apart), in the demo's order: read from the task registry
TASKS = suite_task_names()
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
    # a real checkpoint's own sizes: the `ci` preset on the embedded corpus, the model judging its key tokens
    "ci": {"chars_per_doc": None, "n_docs": 0, "limit": None, "metadata": {"preset": "ci"}},
    "paper": {
        "chars_per_doc": 90_000,
        "n_docs": 50,
        "limit": None,
        "metadata": {"preset": "paper", "evaluator": "self", "num_docs": 50, "max_len": 16000, "seed": 0},
    },
}


# --------------------------------------------------------------------------- the model and the data


def build_model(body: str, dtype: str, device: str, max_positions: int):
    """A random-weight Llama of ``body`` with the packaged demo tokenizer's vocabulary."""
    from transformers import AutoTokenizer

    from lm_eval_longctx.demo.run import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    model = benchkit.random_llama(
        body,
        vocab_size=len(tokenizer),
        max_positions=max_positions,
        dtype=dtype,
        device=device,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model, tokenizer


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
        benchkit.sync(device)
        start = time.perf_counter()
        out = generation.generate(model, [ids], settings)[0]
        benchkit.sync(device)
        seconds = time.perf_counter() - start
        cache = KVCache(model)
        benchkit.sync(device)
        start = time.perf_counter()
        cache.feed(ids[None].to(device), 1)
        benchkit.sync(device)
        prefill = time.perf_counter() - start
        steps = []
        for token in (list(out) or [0])[:8]:
            benchkit.sync(device)
            start = time.perf_counter()
            cache.feed(torch.tensor([[int(token)]], device=device), 1)
            benchkit.sync(device)
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
    """One task through ``simple_evaluate``: wall time, peak memory, the engine's record of its forwards, and the
    ledger of every decoder and head forward; the floor is the decoder's own time on those forwards."""
    import lm_eval

    ledger, detach = benchkit.attach_ledger(lm.model, device)
    try:
        with benchkit.PeakMemory(device) as peak:
            start = time.perf_counter()
            out = lm_eval.simple_evaluate(
                model=lm, tasks=[task], metadata=metadata, limit=limit, log_samples=False, task_manager=task_manager
            )
            benchkit.sync(device)
            seconds = time.perf_counter() - start
    finally:
        detach()
    settings = (out["configs"][task].get("metadata") or {}).get("longctx_settings", {})
    scoring = settings.get("runtime", {}).get("scoring", {})
    scoring = scoring if isinstance(scoring, dict) else {}
    floor = ledger.decoder_seconds
    return {
        "seconds": seconds,
        "peak_mib": peak.peak / 2**20,
        "tokens_forwarded": int(scoring.get("tokens_forwarded", 0)),
        "decoder_calls": len(ledger.decoder_calls),
        "decoder_tokens": int(sum(rows * new for rows, new, _, _ in ledger.decoder_calls)),
        "head_rows": ledger.head_rows,
        "head_seconds": ledger.head_seconds,
        "outside_forwards_seconds": seconds - ledger.decoder_seconds - ledger.head_seconds,
        "floor_seconds": floor,
        "over_floor": seconds / floor if floor else None,
        "plans": scoring.get("plans", []),
        "retries": scoring.get("retries", []),
        "num_lines": settings.get("num_lines"),  # LongEval's sizes as the task took them
    }


def load_lm(args):
    """lm-eval's ``hf`` model: the checkpoint in ``--model`` loaded as ``--model hf`` loads it, or a random body."""
    from lm_eval.models.huggingface import HFLM

    if args.model:
        lm = HFLM(pretrained=args.model, dtype=args.dtype, device=args.device, batch_size=args.batch_size)
        label = f"checkpoint {args.model}"
    else:
        model, tokenizer = build_model(args.body, args.dtype, args.device, 131072)
        lm = HFLM(
            pretrained=model, tokenizer=tokenizer, batch_size=args.batch_size, max_length=131072, device=args.device
        )
        label = f"random Llama '{args.body}' ({benchkit.SHAPES[args.body]})"
    return lm, f"{label}, vocabulary {lm.model.config.get_text_config().vocab_size}"


def print_tables(rows: list[dict], generation: list[dict]) -> None:
    print(
        "\n| task | wall s | peak MiB | tokens forwarded (engine) | decoder tokens | floor: in decoder s | in head s "
        "| outside forwards s | wall / floor |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        ratio = f"{r['over_floor']:.2f}" if r["over_floor"] else ""
        print(
            f"| {r['task']} | {r['seconds']:.1f} | {r['peak_mib']:,.0f} | {r['tokens_forwarded']:,} | "
            f"{r['decoder_tokens']:,} | {r['floor_seconds']:.1f} | {r['head_seconds']:.1f} | "
            f"{r['outside_forwards_seconds']:.1f} | {ratio} |"
        )
    wall, floor = sum(r["seconds"] for r in rows), sum(r["floor_seconds"] for r in rows)
    if floor:
        total = {k: sum(r[k] for r in rows) for k in ("tokens_forwarded", "decoder_tokens", "head_seconds")}
        print(
            f"| **suite** | {wall:.1f} | | {total['tokens_forwarded']:,} | {total['decoder_tokens']:,} | {floor:.1f} | "
            f"{total['head_seconds']:.1f} | {wall - floor - total['head_seconds']:.1f} | {wall / floor:.2f} |"
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a checkpoint folder (its own tokenizer); default: a random --body")
    p.add_argument("--body", default="tiny", choices=sorted(benchkit.SHAPES))
    p.add_argument("--size", default=None, choices=sorted(SIZES), help="default: ci with --model, else tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(benchkit.DTYPES))
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=int, default=None, help="lm-eval's --limit (default: the size's)")
    p.add_argument("--generation-cases", type=int, default=None, help="LongEval prompts timed against their floor")
    p.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's default)")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    args.size = args.size or ("ci" if args.model else "tiny")
    if args.threads:
        torch.set_num_threads(args.threads)

    size = SIZES[args.size]
    device = torch.device(args.device)
    lm, label = load_lm(args)
    model, tokenizer = lm.model, lm.tokenizer
    print(f"{label}; {device} {args.dtype}; size {args.size}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        metadata = dict(size["metadata"])
        if size["chars_per_doc"]:
            corpus = write_corpus(Path(tmp) / "corpus.jsonl", size["chars_per_doc"], size["n_docs"])
            metadata["data_files"] = str(corpus)
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
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("plans",)}), flush=True)
    n_gen = args.generation_cases if args.generation_cases is not None else (2 if args.size == "tiny" else 13)
    from lm_eval_longctx.data import longeval_cases

    taken = [r["num_lines"] for r in rows if r["num_lines"]]
    num_lines = list(taken[0] if taken else metadata.get("num_lines", longeval_cases.DEFAULT_NUM_LINES))
    cases = max(1, n_gen // len(num_lines))
    generation = generation_against_floor(model, tokenizer, device, num_lines, cases, 100) if n_gen else []
    print_tables(rows, generation)
    result = {
        "args": vars(args),
        "model": label,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
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
