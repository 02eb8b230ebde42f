"""Benchmark the engine's long pass against the straightforward full-logits scorer.

What it measures
----------------
For one token sequence of each length, the per-token log-probs log p(ids[t] | ids[:t]) and greedy
hits are computed two ways:

* **straightforward**: what lm-eval's ``HFLM._loglikelihood_tokens`` does: one forward over the
  whole input (``ids[:-1]``), full ``[seq, vocab]`` logits, ``F.log_softmax(logits, dim=-1)`` in
  float32 over all of them, then a gather of the targets (and an argmax for the greedy hits);
* **engine**: ``lm_eval_longctx.engine.scoring.score_long`` with ``--long-pass`` (default ``chunked``): KV-cache
  chunks of ``--chunk-size`` tokens,
  only one chunk's logits alive at a time, float32 log-softmax in blocks of about ``LOGPROB_BLOCK_BYTES``.

For each (length, path) it reports the wall time (the best of ``--repeats`` timed runs, after one
untimed run: the least disturbed by other processes on a shared machine; the JSON also has the
median and the best process CPU time) and the peak memory the path adds on top of the loaded model:

* CUDA: ``torch.cuda.max_memory_allocated()`` minus the memory allocated before the run (the peak
  counter is reset before each run);
* CPU: the increase of the process's peak RSS (``ru_maxrss``) over its RSS after model load. The
  peak RSS never goes down, so every (length, path) runs in a FRESH subprocess (this script in its
  hidden ``--worker`` mode) whose first run is the measured one; otherwise the straightforward
  path's multi-GB peak would hide the engine's.

Both paths must agree: the max |difference| of the per-token log-probs is printed and, in float32,
must be <= 1e-4 (the script exits with status 1 otherwise).

The model is a tiny random ``LlamaForCausalLM`` built here (nothing is downloaded) with a
Llama-3-sized vocabulary (128256), so the logits dominate memory and time the way they do for a
real long-context model: at 8192 tokens the straightforward path holds two float32
[8192, 128256] tensors (logits and log-probs), about 8 GiB.

The target: at 8192 tokens the engine's peak memory is <= 25% of the
straightforward path's, and its time <= 1.1x.

Command (from the repository root; defaults: CPU, float32, lengths 1024 2048 4096 8192)::

    HF_HUB_OFFLINE=1 /work/venv/bin/python scripts/bench_scorer.py

On a small CPU machine shared with other work, ``--threads 1`` gives steadier times (idle
OpenMP threads spin while another process holds a core). On a GPU machine::

    HF_HUB_OFFLINE=1 python scripts/bench_scorer.py --device cuda --dtype bfloat16 --json out/bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built here; never touch the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit; puts the checkout on sys.path)
import numpy as np
import torch
import torch.nn.functional as F

from lm_eval_longctx.engine.scoring import score_long  # noqa: E402

PATHS = ("straightforward", "engine")
TARGET_LENGTH = 8192
TARGET_MEMORY_RATIO = 0.25
TARGET_TIME_RATIO = 1.1
FLOAT32_TOLERANCE = 1e-4
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --------------------------------------------------------------------------------------------
# Model and data
# --------------------------------------------------------------------------------------------


def build_model(args) -> torch.nn.Module:
    """A tiny random Llama with a large vocabulary; the seed makes every worker build the same one."""
    # peaked predictions: the agreement check is not between near-uniform log-probs
    model = benchkit.peaked_llama(
        args.vocab_size,
        args.hidden_size,
        args.layers,
        args.max_positions or max(args.lengths),
        args.seed,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return model.to(device=args.device, dtype=DTYPES[args.dtype]).eval()


def make_ids(length: int, vocab_size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + length)
    return torch.randint(3, vocab_size, (length,), generator=g)


# --------------------------------------------------------------------------------------------
# The two scoring paths; both return (float32 log-probs [n - 1], bool greedy [n - 1]) on CPU
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def straightforward(model, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """HFLM._loglikelihood_tokens for one sequence: full logits, full float32 log_softmax, gather."""
    device = next(model.parameters()).device
    inp = ids[:-1].to(device)[None]  # HFLM feeds (context + continuation)[:-1]
    targets = ids[1:].to(device)[None]
    multi_logits = F.log_softmax(model(inp).logits, dim=-1, dtype=torch.float32)  # [1, n-1, vocab]
    greedy = multi_logits.argmax(dim=-1) == targets
    logprob = torch.gather(multi_logits, 2, targets.unsqueeze(-1)).squeeze(-1)
    return logprob[0].cpu().numpy(), greedy[0].cpu().numpy()


LONG_PASS = "chunked"  # what docs/architecture.md's table measured; --long-pass changes it


def engine(model, ids: torch.Tensor, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    out = score_long(model, ids, chunk_size=chunk_size, long_pass=LONG_PASS)
    return out.logprob, out.greedy


def run_path(path: str, model, ids: torch.Tensor, chunk_size: int):
    if path == "straightforward":
        return straightforward(model, ids)
    return engine(model, ids, chunk_size)


# --------------------------------------------------------------------------------------------
# Worker: one (path, length) in a fresh process
# --------------------------------------------------------------------------------------------


def worker(args) -> dict:
    """Score one sequence with one path: a measured first run (memory), then timed repeats."""
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args)
    length = args.lengths[0]
    ids = make_ids(length, args.vocab_size, args.seed)

    # Memory: the first run of this path in this process, so the CPU peak RSS is its own.
    baseline = benchkit.memory_baseline(device)
    try:
        logprob, greedy = run_path(args.worker, model, ids, args.chunk_size)
    except torch.cuda.OutOfMemoryError:
        return {"error": "OOM"}
    benchkit.sync(device)
    peak_mib = max(benchkit.peak_memory_bytes(device) - baseline, 0) / 2**20

    # Time: the first run above doubles as warm-up (kernel selection, allocator growth).
    times, cpu_times = [], []
    for _ in range(args.repeats):
        benchkit.sync(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        run_path(args.worker, model, ids, args.chunk_size)
        benchkit.sync(device)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)

    np.savez(args.worker_out, logprob=logprob, greedy=greedy)
    return {"peak_mib": peak_mib, "times": times, "cpu_times": cpu_times}


def spawn_worker(args, path: str, length: int, out_file: Path) -> dict:
    """Run this script in --worker mode for one (path, length); returns its result dict."""
    cmd = benchkit.worker_command(
        __file__,
        path,
        out_file,
        length,
        "--chunk-size",
        str(args.chunk_size),
        "--long-pass",
        args.long_pass,
        "--repeats",
        str(args.repeats),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--vocab-size",
        str(args.vocab_size),
        "--hidden-size",
        str(args.hidden_size),
        "--layers",
        str(args.layers),
        "--seed",
        str(args.seed),
        # the same config in every worker, whatever length it scores
        "--max-positions",
        str(args.max_positions or max(args.lengths)),
        "--threads",
        str(args.threads),
    )
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        # A CPU run that outgrows RAM is killed by the OOM killer (returncode -9).
        reason = "OOM-killed" if proc.returncode == -9 else f"exit {proc.returncode}"
        sys.stderr.write(proc.stderr[-2000:])
        return {"error": reason}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def bench_length(args, length: int, tmp: Path) -> dict:
    row = {"length": length, "chunk_size": args.chunk_size, "device": args.device, "dtype": args.dtype}
    outputs = {}
    for path in PATHS:
        res = spawn_worker(args, path, length, tmp / f"{path}_{length}.npz")
        if "error" in res:
            row[f"{path}_error"] = res["error"]
            continue
        row[f"{path}_time_s"] = min(res["times"])
        row[f"{path}_time_median_s"] = statistics.median(res["times"])
        row[f"{path}_cpu_s"] = min(res["cpu_times"])
        row[f"{path}_peak_mib"] = res["peak_mib"]
        outputs[path] = np.load(tmp / f"{path}_{length}.npz")
    if len(outputs) == 2:
        a, b = outputs["straightforward"], outputs["engine"]
        row["max_abs_diff"] = float(np.max(np.abs(a["logprob"] - b["logprob"])))
        row["greedy_mismatches"] = int(np.sum(a["greedy"] != b["greedy"]))
        row["time_ratio"] = row["engine_time_s"] / row["straightforward_time_s"]
        row["memory_ratio"] = row["engine_peak_mib"] / max(row["straightforward_peak_mib"], 1e-9)
    return row


def format_number(row: dict, key: str, spec: str) -> str:
    value = row.get(key)
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'length':>7} {'straight s':>10} {'engine s':>9} {'time x':>7} "
        f"{'straight MiB':>12} {'engine MiB':>10} {'mem x':>6} {'max|diff|':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['length']:>7} {format_number(r, 'straightforward_time_s', '.3f'):>10} "
            f"{format_number(r, 'engine_time_s', '.3f'):>9} {format_number(r, 'time_ratio', '.2f'):>7} "
            f"{format_number(r, 'straightforward_peak_mib', '.0f'):>12} {format_number(r, 'engine_peak_mib', '.0f'):>10} "
            f"{format_number(r, 'memory_ratio', '.3f'):>6} {format_number(r, 'max_abs_diff', '.1e'):>9}"
        )
        for path in PATHS:
            if f"{path}_error" in r:
                print(f"        {path}: {r[f'{path}_error']}")


def target_verdict(rows: list[dict]) -> str:
    row = next((r for r in rows if r["length"] == TARGET_LENGTH), None)
    goal = (
        f"Target: at {TARGET_LENGTH} tokens, engine peak memory <= {TARGET_MEMORY_RATIO:.0%} of the "
        f"straightforward path and time <= {TARGET_TIME_RATIO}x"
    )
    if row is None or "time_ratio" not in row:
        return f"{goal}: not measured."
    mem_ok = row["memory_ratio"] <= TARGET_MEMORY_RATIO
    time_ok = row["time_ratio"] <= TARGET_TIME_RATIO
    return (
        f"{goal}: memory {row['memory_ratio']:.1%} ({'met' if mem_ok else 'MISSED'}), "
        f"time {row['time_ratio']:.2f}x ({'met' if time_ok else 'MISSED'}) -> "
        f"{'MET' if mem_ok and time_ok else 'NOT MET'}"
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument(
        "--long-pass",
        default="chunked",
        choices=("auto", "full", "chunked"),
        help="the engine's strategy (default chunked, as the recorded figures)",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per path (the best is reported)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--vocab-size", type=int, default=128256)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--max-positions", type=int, help="max_position_embeddings (default: largest length)")
    p.add_argument("--json", type=Path, help="write the rows as JSON to this path")
    # Internal: one (path, length) measurement in a fresh process.
    p.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    global LONG_PASS
    args = parse_args(argv)
    LONG_PASS = args.long_pass
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    print(
        f"tiny random Llama: vocab {args.vocab_size}, hidden {args.hidden_size}, {args.layers} layers; "
        f"{args.device} {args.dtype}, {args.threads or torch.get_num_threads()} threads; chunk "
        f"{args.chunk_size}; best of {args.repeats} runs"
    )
    sys.stdout.flush()  # before the progress lines on stderr
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            rows.append(bench_length(args, length, Path(tmp)))
            print(f"  done: {length} tokens", file=sys.stderr, flush=True)
    print_table(rows)
    print(target_verdict(rows))

    ok = True
    if args.dtype == "float32":
        worst = max((r["max_abs_diff"] for r in rows if "max_abs_diff" in r), default=None)
        ok = worst is not None and worst <= FLOAT32_TOLERANCE
        print(
            f"Agreement: max |diff| of log-probs {worst if worst is None else f'{worst:.1e}'} "
            f"(tolerance {FLOAT32_TOLERANCE:.0e}) -> {'ok' if ok else 'FAILED'}; greedy mismatches "
            f"{sum(r.get('greedy_mismatches', 0) for r in rows)}"
        )
    return benchkit.finish(args.json, rows, ok)


if __name__ == "__main__":
    sys.exit(main())
