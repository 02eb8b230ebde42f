"""Benchmark retrieval_gain_map's one-pass ladder against per-length prefixes and stock HFLM.

What it measures
----------------
The retrieval_gain_map requests of ``--docs`` documents (a ladder of ``--lengths`` context lengths x
``--depths`` depths, one anchor per cell, q = r = 24) are scored four ways on one tiny local model
(a random-weight ``LlamaForCausalLM``, nothing downloaded; the documents and the byte-level BPE
tokenizer come from CPython's reference topics, as in ``bench_retrieval_gain.py``):

* **ladder** (the task path, ``retrieval_gain_map.serve``): per document, [BOS] x[0:L_max] is fed
  ONCE in KV-cache chunks; at each length the cells of that length are read on top of the cache and
  cropped off (``engine.score_prefix_ladder``);
* **per-length** prefixes: one ``engine.score_continuations`` call per (document, length), each
  feeding [BOS] x[0:L] from scratch;
* **stock HFLM** ``loglikelihood`` (``HFLM._loglikelihood_tokens``, what ``--model hf`` runs for
  standard requests after tokenizing): one full forward per (document, cell), context [BOS] x[0:L] Q,
  continuation A, with full [sequence, vocab] logits; its requests are built outside the timed region;
* **reference**: what the target is stated against, one long pass of L_max plus the query
  tokens: ``score_continuations`` with the prefix [BOS] x[0:L_max] and every cell's Q A on top.

All four include the same batched without-context pass ([BOS] Q A). Every path must give the same
per-cell answer NLLs (with and without the context) within 1e-4 in float32, else exit status 1.

Each path runs in its own fresh process (``--path``): time is the best of ``--repeats`` runs; peak
memory is the rise of the process's peak resident set (``ru_maxrss``) during the FIRST run over
what loading the model and the documents took, so it counts everything a path allocates (logits,
KV cache, allocator growth) on CPU.

Target: ladder time <= 1.3x the reference.

Default sizes are small so that the whole script takes a few minutes on a shared 2-core CPU:
2 documents, lengths 256..4096 (5 rungs), 10 depths, a 2-layer, 128-wide model with a 32000-token
vocabulary. Command (from the repository root)::

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_retrieval_gain_map.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit)

TARGET_RATIO = 1.3
FLOAT32_TOLERANCE = 1e-4
PATHS = ("ladder", "per_length", "stock_hflm", "reference")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--docs", type=int, default=2)
    p.add_argument("--chars-per-doc", type=int, default=24_000)
    p.add_argument("--lengths", default="256,512,1024,2048,4096")
    p.add_argument("--depths", default="0,10,20,30,40,50,60,70,80,90")
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=8, help="without-context sequences per forward")
    p.add_argument("--repeats", type=int, default=2)
    benchkit.peaked_llama_options(p)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the rows as JSON to this path")
    p.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)  # child process: run one path
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def settings(args):
    from lm_eval_longctx.tasks import retrieval_gain_map as rgm

    s = rgm.resolve_settings({"context_lengths": args.lengths, "depths": args.depths, "chunk_size": args.chunk_size})
    return {**s, "kind": rgm.KIND, "lengths": list(s["context_lengths"]), "depths": list(s["depths"])}


def without_pass(lm, cases, batch):
    from lm_eval_longctx.engine import scoring as engine

    distinct = {}
    for c in cases:
        for rung in c.without:
            for w in rung:
                distinct.setdefault(tuple(w), len(distinct))
    scored = engine.score_sequence_ends(lm.model, list(distinct), cases[0].answer_tokens, batch_size=batch)
    return [
        np.array([[-scored[distinct[tuple(w)]].logprob.astype(np.float64).mean() for w in rung] for rung in c.without])
        for c in cases
    ]


def run_path(name, lm, texts, spec, args, stock_reqs):
    """Per-cell answer NLLs (with, without) of every document: arrays [docs, lengths, depths]."""
    from lm_eval_longctx.data import retrieval_cases
    from lm_eval_longctx.engine import scoring as engine
    from lm_eval_longctx.harness import request_type
    from lm_eval_longctx.tasks import retrieval_gain_map as rgm

    shape = (len(texts), len(spec["lengths"]), len(spec["depths"]))
    if name == "ladder":
        out = rgm.serve(
            request_type.ScoringContext(lm.model, lm.tokenizer, None, args.batch_size), [(t, spec) for t in texts]
        )
        w = np.stack([-s.with_logprob.astype(np.float64).mean(-1)[..., 0] for s in out])
        wo = np.stack([-s.without_logprob.astype(np.float64).mean(-1)[..., 0] for s in out])
        return w, wo
    if name == "stock_hflm":
        ll = np.array([r[0] for r in lm._loglikelihood_tokens(stock_reqs, disable_tqdm=True)], dtype=np.float64)
        nll = (-ll / spec["answer_tokens"]).reshape(*shape, 2)
        return nll[..., 0], nll[..., 1]
    cases = [retrieval_cases.map_case_for_text(lm.tokenizer, t, spec, spec["lengths"]) for t in texts]
    wo = np.stack(without_pass(lm, cases, args.batch_size))
    w = np.zeros(shape)
    for d, c in enumerate(cases):
        lead = len(c.lead)
        if name == "per_length":
            for i, L in enumerate(c.lengths):
                res = engine.score_continuations(
                    lm.model,
                    c.prefix[: lead + L],
                    c.continuations[i],
                    n_scored=c.answer_tokens,
                    chunk_size=args.chunk_size,
                )
                w[d, i] = [-r.logprob.astype(np.float64).mean() for r in res]
        else:  # reference: one prefix of L_max, every cell's continuation on top (numbers differ: not compared)
            flat = [x for rung in c.continuations for x in rung]
            res = engine.score_continuations(
                lm.model, c.prefix, flat, n_scored=c.answer_tokens, chunk_size=args.chunk_size
            )
            w[d] = np.array([-r.logprob.astype(np.float64).mean() for r in res]).reshape(shape[1:])
    return w, wo


def stock_requests(lm, texts, spec):
    from lm_eval_longctx.data import retrieval_cases

    reqs = []
    for t in texts:
        c = retrieval_cases.map_case_for_text(lm.tokenizer, t, spec, spec["lengths"])
        r = c.answer_tokens
        for i, L in enumerate(c.lengths):
            for cont, without in zip(c.continuations[i], c.without[i]):
                reqs.append((("", ""), c.prefix[: len(c.lead) + L] + cont[:-r], cont[-r:]))  # [BOS] x[0:L] Q | A
                reqs.append((("", ""), without[:-r], without[-r:]))  # [BOS] Q | A
    return reqs


def child(args) -> int:
    import torch
    from lm_eval.models.huggingface import HFLM

    from lm_eval_longctx.demo import offline

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = offline.python_reference_documents(args.docs, args.chars_per_doc)
    spec = settings(args)
    lm = HFLM(pretrained=str(args.workdir / "model"), dtype="float32", device="cpu", batch_size=1)
    reqs = stock_requests(lm, texts, spec) if args.path == "stock_hflm" else None
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for k in range(args.repeats):
        start = time.perf_counter()
        w, wo = run_path(args.path, lm, texts, spec, args, reqs)
        times.append(time.perf_counter() - start)
        if k == 0:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base  # KiB on Linux
    np.savez(
        args.workdir / f"{args.path}.npz", w=w, wo=wo, time=min(times), peak_kib=peak, threads=torch.get_num_threads()
    )
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.path:
        return child(args)

    from lm_eval_longctx.demo import offline

    texts = offline.python_reference_documents(args.docs, args.chars_per_doc)
    spec = settings(args)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizer = offline.train_tokenizer(texts, vocab_size=args.tokenizer_vocab)
        n_tokens = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        if min(n_tokens) < spec["lengths"][-1]:
            print(
                f"documents have {n_tokens} tokens, fewer than the longest length {spec['lengths'][-1]}: "
                "raise --chars-per-doc",
                file=sys.stderr,
            )
            return 2
        # peaked: the agreement check is not between near-uniform values
        benchkit.save_peaked_llama(tmp / "model", tokenizer, args.vocab_size, args.hidden_size, args.layers, args.seed)
        n_cells = len(spec["lengths"]) * len(spec["depths"])
        print(
            f"tiny random Llama: vocab {args.vocab_size} (tokenizer {len(tokenizer)}), hidden {args.hidden_size}, "
            f"{args.layers} layers; CPU float32; {args.docs} documents x {len(spec['lengths'])} lengths "
            f"{spec['lengths']} x {len(spec['depths'])} depths ({n_cells} cells per document), q = r = 24; "
            f"chunk {args.chunk_size}; best of {args.repeats} runs, each path in its own process"
        )
        sys.stdout.flush()
        out = {}
        for name in PATHS:
            cmd = [sys.executable, __file__, "--path", name, "--workdir", str(tmp)] + (
                argv if argv is not None else sys.argv[1:]
            )
            subprocess.run(cmd, check=True)
            with np.load(tmp / f"{name}.npz") as z:
                out[name] = {k: z[k] for k in z.files}

    ref = out["ladder"]
    diffs = {
        name: float(max(np.abs(out[name]["w"] - ref["w"]).max(), np.abs(out[name]["wo"] - ref["wo"]).max()))
        for name in ("per_length", "stock_hflm")
    }
    t_ref = float(out["reference"]["time"])
    rows = []
    header = f"{'path':<34} {'time s':>8} {'vs ladder':>10} {'vs reference':>13} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    labels = {
        "ladder": "ladder (task path, one pass)",
        "per_length": "(a) score_continuations per L",
        "stock_hflm": "(b) stock HFLM loglikelihood",
        "reference": "reference: one pass of L_max + Q A",
    }
    t_ladder = float(ref["time"])
    for name in PATHS:
        t, peak = float(out[name]["time"]), float(out[name]["peak_kib"]) / 1024
        rows.append(
            {
                "path": name,
                "time_s": t,
                "vs_ladder": t / t_ladder,
                "vs_reference": t / t_ref,
                "peak_rss_rise_mib": peak,
                "max_abs_diff_nll": diffs.get(name, 0.0 if name == "ladder" else None),
            }
        )
        print(f"{labels[name]:<34} {t:>8.3f} {t / t_ladder:>9.2f}x {t / t_ref:>12.2f}x {peak:>9.1f}")
    ratio = t_ladder / t_ref
    print(
        f"max |diff| of per-cell answer NLLs vs the ladder: per-length {diffs['per_length']:.1e}, "
        f"stock HFLM {diffs['stock_hflm']:.1e}; mean gain {float(np.mean(ref['wo'] - ref['w'])):+.4f}"
    )
    print(
        f"Target: ladder <= {TARGET_RATIO}x one pass of L_max plus the query tokens: {ratio:.2f}x -> "
        f"{'MET' if ratio <= TARGET_RATIO else 'NOT MET'}"
    )
    ok = max(diffs.values()) <= FLOAT32_TOLERANCE
    print(f"Agreement (tolerance {FLOAT32_TOLERANCE:.0e}): {'ok' if ok else 'FAILED'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"threads": int(out["ladder"]["threads"]), "rows": rows}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
