#!/usr/bin/env python
"""Benchmark the engine on long documents (16k-128k tokens): time and peak memory per token.

What it measures
----------------
For one random token sequence of each length, three ways to score it:

* **long**: ``engine.score_long``, the long pass: KV-cache chunks of ``--chunk-size`` tokens, one
  chunk's logits alive at a time;
* **truncated**: ``engine.score_truncated``, the LongPPL reference windows (K = ``--trunc-len``,
  d = ``--stride``), ``--window-batch`` windows per forward, logits of the scored columns only;
* **full** (the straightforward comparison, only up to ``--full-max-tokens``): one forward over the
  whole sequence with its full ``[n, vocab]`` logits and a float32 log-softmax over all of them (what
  ``HFLM._loglikelihood_tokens`` does).

For each it reports seconds, tokens/s, the peak memory the pass adds on top of the loaded model and
that peak per token; long vs full agreement (max |diff| of the log-probs) is printed where both ran.

* CPU: every (path, length) runs in a FRESH subprocess (this script in ``--worker`` mode) whose first
  run is the measured one: the peak RSS never goes down, so one process would hide smaller peaks.
* CUDA: one worker process runs all measurements after a short warm-up (kernel selection), resetting
  ``torch.cuda`` peak statistics before each: peak = ``max_memory_allocated`` minus the memory
  allocated before the run.

Models (random weights built here; nothing is downloaded):

* ``--shape tiny`` (default): 1 layer, hidden 16, vocab 32000: the KV cache is small, so the logits
  and attention of a chunk show; all of 16k-128k runs on 2 shared CPU cores in about 5 minutes.
* ``--shape llama8b``: the Llama-3.1-8B shape (hidden 4096, 32 layers, 32 heads, 8 KV heads,
  intermediate 14336, vocab 128256), built directly on the GPU in ``--dtype`` (bfloat16).

Commands (repository root)::

    HF_HUB_OFFLINE=1 python scripts/bench_long_documents.py --threads 2 --json out/long_cpu.json
    HF_HUB_OFFLINE=1 python scripts/bench_long_documents.py --device cuda --dtype bfloat16 \\
        --shape llama8b --json out/long_gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit; puts the checkout on sys.path)
import numpy as np
import torch
import torch.nn.functional as F

from lm_eval_longctx.engine import scoring  # noqa: E402

PATHS = ("long", "truncated", "full")
DTYPES = benchkit.DTYPES
# this benchmark's own smallest body (its published CPU table used it); the 8B body is the kit's
SHAPES = {
    "tiny": dict(
        vocab_size=32000,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
    ),
    "llama8b": dict(vocab_size=128256, **benchkit.SHAPES["llama8b"]),
}


def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        **SHAPES[args.shape],
        max_position_embeddings=max(args.lengths),
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    config._attn_implementation = "sdpa"
    with torch.device(args.device):  # built where it runs, in its dtype: no float32 copy of 8B weights
        prev = torch.get_default_dtype()
        torch.set_default_dtype(DTYPES[args.dtype])
        try:
            model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(prev)
    if args.shape == "tiny":
        with torch.no_grad():  # peaked predictions, so the agreement check is not trivial
            model.lm_head.weight.mul_(20.0)
    return model.eval()


def make_ids(length: int, vocab_size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + length)
    return torch.randint(3, vocab_size, (length,), generator=g)


@torch.no_grad()
def full_forward(model, ids: torch.Tensor) -> np.ndarray:
    inp = ids[:-1].to(scoring.input_device(model))[None]
    logprobs = F.log_softmax(model(inp, use_cache=False).logits, dim=-1, dtype=torch.float32)
    return logprobs[0].gather(1, ids[1:, None].to(logprobs.device))[:, 0].cpu().numpy()


def run_path(path: str, model, ids: torch.Tensor, args) -> np.ndarray:
    if path == "long":
        return scoring.score_long(model, ids, chunk_size=args.chunk_size, long_pass=args.long_pass).logprob
    if path == "truncated":
        return scoring.score_truncated(model, [ids], args.trunc_len, args.stride, batch_size=args.window_batch)[
            0
        ].logprob
    return full_forward(model, ids)


# ------------------------------------------------------------------ worker


def measure(path: str, length: int, model, args, out_dir: Path) -> dict:
    device = torch.device(args.device)
    ids = make_ids(length, SHAPES[args.shape]["vocab_size"], args.seed)
    baseline = benchkit.memory_baseline(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        logprob = run_path(path, model, ids, args)
    except torch.cuda.OutOfMemoryError:
        return {"path": path, "length": length, "error": "OOM"}
    benchkit.sync(device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = benchkit.peak_memory_bytes(device) - baseline
    np.save(out_dir / f"{path}_{length}.npy", logprob)
    scored = int(np.sum(~np.isnan(logprob)))
    # cpu_seconds: the process's CPU time (all threads), less disturbed than wall time on a shared machine
    return {
        "path": path,
        "length": length,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "tokens_per_s": length / seconds,
        "scored_tokens": scored,
        "peak_mib": max(peak, 0) / 2**20,
        "peak_bytes_per_token": max(peak, 0) / length,
    }


def worker(args) -> list[dict]:
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args)
    out_dir = Path(args.worker_out)
    jobs = [tuple(j.split(":")) for j in args.worker]
    if torch.device(args.device).type == "cuda":  # kernel selection and allocator growth before timing
        warm = make_ids(2 * args.trunc_len, SHAPES[args.shape]["vocab_size"], args.seed)
        scoring.score_long(model, warm, chunk_size=args.chunk_size, long_pass=args.long_pass)
        scoring.score_truncated(model, [warm], args.trunc_len, args.stride, batch_size=args.window_batch)
    results = []
    for path, length in jobs:
        results.append(measure(path, int(length), model, args, out_dir))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def spawn(args, jobs: list[str], out_dir: Path) -> list[dict]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        *jobs,
        "--worker-out",
        str(out_dir),
        *benchkit.passed_on(args, "device", "dtype", "shape", "seed", "chunk_size", "long_pass", "trunc_len"),
        *benchkit.passed_on(args, "stride", "window_batch", "threads"),
        "--lengths",
        *map(str, args.lengths),
    ]  # the same config (max positions) in every worker
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        why = "OOM-killed" if proc.returncode == -9 else f"exit {proc.returncode}"
        return [{"path": j.split(":")[0], "length": int(j.split(":")[1]), "error": why} for j in jobs]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ driver


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'path':>9} {'tokens':>7} {'seconds':>8} {'CPU s':>7} {'tokens/s':>9} {'peak MiB':>9} {'bytes/token':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if "error" in r:
            print(f"{r['path']:>9} {r['length']:>7} {r['error']:>8}")
            continue
        print(
            f"{r['path']:>9} {r['length']:>7} {r['seconds']:>8.2f} {r['cpu_seconds']:>7.1f} {r['tokens_per_s']:>9.0f} "
            f"{r['peak_mib']:>9.0f} {r['peak_bytes_per_token']:>11.0f}"
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lengths", type=int, nargs="+", default=[16384, 32768, 65536, 131072])
    p.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    p.add_argument("--chunk-size", type=int, default=scoring.DEFAULT_CHUNK_SIZE)
    p.add_argument(
        "--long-pass",
        default="chunked",
        choices=scoring.LONG_PASS_CHOICES,
        help="strategy of the long pass (default chunked: what docs/scaling.md's tables measured; "
        "scripts/bench_long_pass.py compares the strategies)",
    )
    p.add_argument("--trunc-len", type=int, default=4096, help="K of the truncated pass")
    p.add_argument("--stride", type=int, default=1024, help="d of the truncated pass")
    p.add_argument("--window-batch", type=int, default=8, help="truncated windows per forward")
    p.add_argument(
        "--full-max-tokens",
        type=int,
        default=None,
        help="longest sequence for the full forward (default: 16384 on CPU, 32768 on CUDA)",
    )
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    on_gpu = args.device.startswith("cuda")
    full_max = args.full_max_tokens if args.full_max_tokens is not None else (32768 if on_gpu else 16384)
    jobs = [f"{path}:{n}" for n in args.lengths for path in args.paths if path != "full" or n <= full_max]
    shape = SHAPES[args.shape]
    print(
        f"random Llama '{args.shape}' ({shape}); {args.device} {args.dtype}; chunk {args.chunk_size}; "
        f"truncated K={args.trunc_len} d={args.stride}, {args.window_batch} windows per forward",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        if on_gpu:
            rows = spawn(args, jobs, Path(tmp))
        else:
            rows = [r for job in jobs for r in spawn(args, [job], Path(tmp))]
        for n in args.lengths:
            a, b = Path(tmp) / f"long_{n}.npy", Path(tmp) / f"full_{n}.npy"
            if a.exists() and b.exists():
                x, y = np.load(a), np.load(b)
                for r in rows:
                    if r["path"] == "full" and r["length"] == n:
                        r["long_vs_full_max_abs_diff"] = float(np.max(np.abs(x - y)))
                        r["long_vs_full_mean_nll"] = [float(-x.mean()), float(-y.mean())]
    print_table(rows)
    for r in rows:
        if "long_vs_full_max_abs_diff" in r:
            long_row = next(q for q in rows if q["path"] == "long" and q["length"] == r["length"] and "error" not in q)
            print(
                f"{r['length']} tokens: long vs full max |diff| of log-probs {r['long_vs_full_max_abs_diff']:.2e} "
                f"(mean NLL {r['long_vs_full_mean_nll'][0]:.4f} vs {r['long_vs_full_mean_nll'][1]:.4f}); long pass "
                f"time {long_row['seconds'] / r['seconds']:.2f}x, peak memory {long_row['peak_mib'] / max(r['peak_mib'], 1e-9):.3f}x "
                "of the full forward"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: v for k, v in vars(args).items() if k not in ("json", "worker", "worker_out")},
                    "rows": rows,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
