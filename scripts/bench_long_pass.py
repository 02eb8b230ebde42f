"""Benchmark the long pass's strategies against one forward of the model's decoder alone, and the retrieval-gain
map against one long pass. Runs unchanged on the CPU (a tiny random model) and on CUDA (the Llama-3.1-8B shape).

Paths, each (length, path) in a fresh process (so a CPU peak RSS is that path's own):

* ``decoder``: ``model.model(ids, use_cache=False)``: the decoder alone, no output head: the floor;
* ``full``: ``engine.score_long(..., long_pass="full")``: one forward, the head replayed in row blocks;
* ``chunked``: ``engine.score_long(..., long_pass="chunked")``: KV-cache chunks of ``--chunk-size``;
* ``map``: ``engine.score_prefix_ladder`` as ``retrieval_gain_map`` runs it: a ladder of context lengths
  (n/8, n/4, n/2, n), 10 depths, Q A of 24 + 24 tokens, every cell read on the one cache of the prefix.

Printed: seconds (best of ``--repeats`` after one untimed run), peak memory above the loaded model (CUDA:
``max_memory_allocated``; CPU: the peak RSS increase, with glibc's mmap threshold fixed so that it is live memory)
and with it, the memory the engine's plan counts, and the
ratios the targets are stated in: full / decoder (target <= 1.15 on a GPU at 32k and 128k tokens), map / full in
time (target <= 1.15) and in peak memory (target <= 1.25), and the plan's count / the measured peak (target
within 1.3). full and chunked must give the same log-probs (max |diff| printed).

    python scripts/bench_long_pass.py --threads 2                                   # CPU, tiny model
    python scripts/bench_long_pass.py --device cuda --dtype bfloat16 --shape llama8b \\
        --lengths 32768 131072 --map-length 8192 --json out/bench_long_pass.json    # GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit)

from lm_eval_longctx.engine import forward, memory, plans, scoring  # noqa: E402

VOCAB = {"tiny": 32000, "llama8b": 128256}
PATHS = ("decoder", "full", "chunked", "map")
DEPTHS = tuple(range(0, 100, 10))
QA = 48  # query + answer tokens


def build_model(args):
    max_positions = max(args.lengths + [args.map_length]) + QA + 8
    return benchkit.random_llama(args.shape, VOCAB[args.shape], max_positions, args.dtype, args.device)


def ladder(n: int, ids: torch.Tensor):
    """retrieval_gain_map's cells for a document of n tokens: (prefix length, Q A continuations) per rung."""
    rungs = []
    for L in (n // 8, n // 4, n // 2, n):
        anchors = [round(p / 100 * (L - QA)) for p in DEPTHS]
        rungs.append((L, [ids[a : a + QA] for a in anchors]))
    return rungs


def run_path(path: str, model, ids: torch.Tensor, args):
    if path == "decoder":
        model.model(input_ids=ids[None].to(args.device), use_cache=False)
        return None
    if path == "map":
        out = scoring.score_prefix_ladder(
            model, ids, ladder(len(ids), ids), n_scored=QA // 2, batch_size=args.map_batch
        )
        return np.concatenate([r.logprob for rung in out for r in rung])
    return scoring.score_long(model, ids, chunk_size=args.chunk_size, long_pass=path).logprob


def worker(args) -> dict:
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args)
    n = args.map_length if args.worker == "map" else args.lengths[0]
    ids = torch.randint(3, VOCAB[args.shape], (n,), generator=torch.Generator().manual_seed(1))
    scoring.check_model(model)  # the one-off probe is not part of any timing
    base = benchkit.memory_baseline(device)
    with torch.no_grad():
        try:
            out = run_path(args.worker, model, ids, args)
        except torch.cuda.OutOfMemoryError:
            return {"error": "out of memory"}
    benchkit.sync(device)
    peak = benchkit.peak_memory_bytes(device)
    times = []
    with torch.no_grad():
        for _ in range(args.repeats):
            benchkit.sync(device)
            start = time.perf_counter()
            run_path(args.worker, model, ids, args)
            benchkit.sync(device)
            times.append(time.perf_counter() - start)
    estimate = None
    if args.worker in ("full", "chunked"):
        estimate = plans.choose(
            plans.long_pass_plans(model, n, 1, args.worker, args.chunk_size), args.worker
        ).need_bytes
    elif args.worker == "map":
        # the prefix fill, or the longest rung's cells packed into one forward on its cache, whichever is larger
        plan = plans.choose(plans.long_pass_plans(model, n + QA, 1, "auto", args.chunk_size, keep_cache=True))
        packed = plan.packed_tokens(n - 1, [QA + 1] * len(DEPTHS))
        kernel = forward.capabilities(model).attention.with_cache
        estimate = max(
            plan.need_bytes,
            memory.packed_read_bytes(model, n - 1, packed, device.type, kernel, QA + 1) if packed else 0,
        )
    if out is not None:
        np.save(args.worker_out, out)
    return {
        "seconds": min(times),
        "peak_mib": max(peak - base, 0) / 2**20,
        "peak_with_model_mib": peak / 2**20,
        "estimate_mib": None if estimate is None else estimate / 2**20,
    }


def spawn(args, path: str, n: int, out_file: Path) -> dict:
    cmd = benchkit.worker_command(
        __file__,
        path,
        out_file,
        n,
        "--map-length",
        str(args.map_length if path == "map" else n),
        *benchkit.passed_on(args, "device", "dtype", "shape", "chunk_size", "repeats", "threads", "map_batch"),
    )
    env = dict(os.environ)
    if args.device == "cpu":
        # glibc raises its mmap threshold as large blocks are freed, then keeps later ones on the heap: the peak RSS
        # would count that retained heap. A fixed threshold returns each freed block, so the peak is live memory.
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        return {"error": "killed (out of memory)" if proc.returncode == -9 else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--shape", default="tiny", choices=sorted(benchkit.SHAPES))
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--map-length", type=int, default=8192, help="longest context of the map's ladder")
    p.add_argument("--map-batch", type=int, default=10, help="cells per forward where no KV cache is exact")
    p.add_argument("--chunk-size", type=int, default=scoring.DEFAULT_CHUNK_SIZE)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's default)")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    import tempfile

    rows, ok = [], True
    print(
        f"random Llama '{args.shape}' ({benchkit.SHAPES[args.shape]}, vocabulary {VOCAB[args.shape]}); {args.device} {args.dtype}; chunk {args.chunk_size}; "
        f"best of {args.repeats}; each path in its own process"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lengths + [None]:
            paths = ("decoder", "full", "chunked") if n is not None else ("full", "map")
            n = n if n is not None else args.map_length
            row = {"tokens": n, **{path: spawn(args, path, n, Path(tmp) / f"{path}_{n}.npy") for path in paths}}
            if "seconds" in row.get("decoder", {}) and "seconds" in row["full"]:
                row["full_over_decoder"] = row["full"]["seconds"] / row["decoder"]["seconds"]
            if "map" in row and "seconds" in row["map"] and "seconds" in row["full"]:
                row["map_over_full"] = row["map"]["seconds"] / row["full"]["seconds"]
                row["map_over_full_peak"] = row["map"]["peak_mib"] / max(row["full"]["peak_mib"], 1e-9)
                row["map_over_full_peak_with_model"] = (
                    row["map"]["peak_with_model_mib"] / row["full"]["peak_with_model_mib"]
                )
            if "chunked" in row and all((Path(tmp) / f"{x}_{n}.npy").exists() for x in ("full", "chunked")):
                a, b = (np.load(Path(tmp) / f"{x}_{n}.npy") for x in ("full", "chunked"))
                row["max_abs_diff_full_chunked"] = float(np.max(np.abs(a - b)))
                ok &= args.dtype != "float32" or row["max_abs_diff_full_chunked"] <= 1e-4
            rows.append(row)
            print(json.dumps(row))
    print("\n| tokens | path | seconds | peak MiB | estimate MiB | ratio |\n|---:|---|---:|---:|---:|---|")
    for row in rows:
        for path in PATHS:
            r = row.get(path)
            if r is None:
                continue
            ratio = {
                "full": f"full / decoder {row['full_over_decoder']:.2f}" if "full_over_decoder" in row else "",
                "map": (
                    f"map / full {row['map_over_full']:.2f} in time, {row['map_over_full_peak']:.2f} in peak memory "
                    f"({row['map_over_full_peak_with_model']:.2f} with the model)"
                )
                if "map_over_full" in row
                else "",
            }.get(path, "")
            if "error" in r:
                print(f"| {row['tokens']:,} | {path} | {r['error']} | | | |")
                continue
            est = "" if r["estimate_mib"] is None else f"{r['estimate_mib']:,.0f}"
            print(f"| {row['tokens']:,} | {path} | {r['seconds']:.3f} | {r['peak_mib']:,.0f} | {est} | {ratio} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
