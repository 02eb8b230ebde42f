"""Benchmark retrieval_gain's scoring path against the same requests sent through stock HFLM.

What it measures
----------------
The retrieval_gain requests of ``--docs`` documents (each truncated to ``--doc-tokens`` tokens,
``--n-queries`` anchors, query 24 and answer 24 tokens) are scored two ways on one HFLM instance
(``lm_eval.models.huggingface.HFLM``, the ``--model hf`` backend) built on a tiny local model:

* **task path**: ``lm_eval_longctx.tasks.retrieval_gain.serve``, what ``--model hf`` runs for this
  task: tokenize, build both conditions, feed each document's prefix ONCE in KV-cache chunks and
  read its Q A continuations on top of it; the without-document sequences batched;
* **stock HFLM**: the same token sequences as standard loglikelihood requests, through
  ``HFLM._loglikelihood_tokens`` (what ``loglikelihood`` calls after tokenizing): per anchor
  (context = [BOS] document Q, continuation = A) and (context = [BOS] Q, continuation = A). HFLM
  runs one full forward per request, so each anchor re-reads the whole document, and it builds
  full [sequence, vocab] logits and a log-softmax over them. Its requests are built outside the
  timed region (its tokenization is not timed; the task path's is).

Both must give the same answer NLLs: max |difference| of the per-pair mean NLLs (with and without
the document) must be <= 1e-4 in float32 (the script exits with status 1 otherwise).
Times are the best of ``--repeats`` runs after one untimed warm-up run.

The model is a random-weight ``LlamaForCausalLM`` (nothing is downloaded) with a byte-level BPE
tokenizer of ``--tokenizer-vocab`` tokens trained on the Python reference topics that ship with
CPython; the documents are those topics, cut into ``--chars-per-doc``-character pieces (longer than
``--doc-tokens`` tokens). The model's vocabulary (``--vocab-size``, default 32000: Llama-2's, the
tokenizer the GovReport documents were made with) is larger than the tokenizer's, as in models
with a padded embedding matrix: the extra ids never occur in the input but take part in every
softmax, so the logits cost what they cost in a real model of that vocabulary.

Where the speed-up comes from: the task path reads each document once instead of once per query,
and never builds logits for the document's positions (stock HFLM builds [sequence, vocab] logits
and a float32 log-softmax over them for every request). Against it: on CPU with a model this
narrow, attention dominates, and a chunked prefill (an explicit mask per chunk) costs about 1.3x
one causal forward; ``--chunk-size 8192`` (one chunk) removes that.

Target: with 2 queries per document at 8192 tokens, the task path is >= 1.8x
faster than stock HFLM.

Command (from the repository root)::

    HF_HUB_OFFLINE=1 /work/venv/bin/python scripts/bench_retrieval_gain.py
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built here; never touch the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit)

from lm_eval_longctx.data import retrieval_cases  # noqa: E402
from lm_eval_longctx.demo import offline  # noqa: E402
from lm_eval_longctx.harness import request_type
from lm_eval_longctx.tasks import retrieval_gain  # noqa: E402

TARGET_SPEEDUP = 1.8
FLOAT32_TOLERANCE = 1e-4


def build_lm(args, texts, tmp: Path):
    """A tiny random Llama + BPE tokenizer saved to ``tmp``, loaded by stock HFLM."""
    from lm_eval.models.huggingface import HFLM

    tokenizer = offline.train_tokenizer(texts, vocab_size=args.tokenizer_vocab)
    if args.vocab_size < len(tokenizer):
        raise SystemExit(f"--vocab-size {args.vocab_size} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    # peaked: the agreement check is not between near-uniform values
    benchkit.save_peaked_llama(tmp / "model", tokenizer, args.vocab_size, args.hidden_size, args.layers, args.seed)
    return HFLM(pretrained=str(tmp / "model"), dtype=args.dtype, device=args.device, batch_size=args.hf_batch_size)


def task_path(lm, texts, spec, batch_size):
    ctx = request_type.ScoringContext(lm.model, lm.tokenizer, lm.max_length, batch_size)
    scores = retrieval_gain.serve(ctx, [(t, spec) for t in texts])
    return (
        np.concatenate([-s.with_logprob.astype(np.float64).mean(1) for s in scores]),
        np.concatenate([-s.without_logprob.astype(np.float64).mean(1) for s in scores]),
    )


def stock_requests(lm, texts, spec):
    """Token-level loglikelihood requests ((context, continuation) strings are only labels here)."""
    reqs = []
    for text in texts:
        case = retrieval_cases.retrieval_case_for_text(lm.tokenizer, text, spec)
        [(prefix, _)] = case.groups
        for cont, without in zip(case.continuations, case.without):
            q, a = cont[: -case.answer_tokens], cont[-case.answer_tokens :]
            reqs.append((("", ""), prefix + q, a))  # [BOS] document Q | A
            reqs.append((("", ""), without[: -case.answer_tokens], a))  # [BOS] Q | A
    return reqs


def stock_path(lm, reqs, answer_tokens):
    ll = np.array([r[0] for r in lm._loglikelihood_tokens(reqs, disable_tqdm=True)], dtype=np.float64)
    nll = -ll / answer_tokens
    return nll[0::2], nll[1::2]


def best_time(fn, repeats):
    fn()  # warm-up: allocator growth, kernel selection
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--chars-per-doc", type=int, default=40_000)
    p.add_argument("--doc-tokens", type=int, default=8192)
    p.add_argument("--n-queries", type=int, default=2)
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=8, help="without-document sequences per forward (task path)")
    p.add_argument("--hf-batch-size", type=int, default=1, help="HFLM batch size (stock path)")
    p.add_argument("--repeats", type=int, default=3)
    benchkit.peaked_llama_options(p)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the row as JSON to this path")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.getLogger("lm-eval").setLevel(logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = offline.python_reference_documents(args.docs, args.chars_per_doc)
    spec = {
        **retrieval_gain.resolve_settings(
            {"doc_tokens": args.doc_tokens, "n_queries": args.n_queries, "chunk_size": args.chunk_size}
        ),
        "kind": retrieval_gain.KIND,
    }
    with tempfile.TemporaryDirectory() as tmp:
        lm = build_lm(args, texts, Path(tmp))
        n_tokens = [len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        if min(n_tokens) < args.doc_tokens:
            print(
                f"documents have {n_tokens} tokens, fewer than --doc-tokens {args.doc_tokens}: raise --chars-per-doc",
                file=sys.stderr,
            )
            return 2
        reqs = stock_requests(lm, texts, spec)
        print(
            f"tiny random Llama: vocab {args.vocab_size} (tokenizer {len(lm.tokenizer)}), hidden {args.hidden_size}, "
            f"{args.layers} layers; "
            f"{args.device} {args.dtype}, {torch.get_num_threads()} threads; {args.docs} documents x "
            f"{args.n_queries} queries, document {args.doc_tokens} tokens, q = r = 24; chunk {args.chunk_size}; "
            f"HFLM batch {args.hf_batch_size}; best of {args.repeats} runs"
        )
        sys.stdout.flush()
        t_task, (w_task, wo_task) = best_time(lambda: task_path(lm, texts, spec, args.batch_size), args.repeats)
        t_stock, (w_stock, wo_stock) = best_time(lambda: stock_path(lm, reqs, spec["answer_tokens"]), args.repeats)

    diff = float(max(np.abs(w_task - w_stock).max(), np.abs(wo_task - wo_stock).max()))
    speedup = t_stock / t_task
    row = {
        "docs": args.docs,
        "n_queries": args.n_queries,
        "doc_tokens": args.doc_tokens,
        "vocab_size": args.vocab_size,
        "hidden_size": args.hidden_size,
        "layers": args.layers,
        "chunk_size": args.chunk_size,
        "device": args.device,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "stock_hflm_s": t_stock,
        "task_path_s": t_task,
        "speedup": speedup,
        "max_abs_diff_nll": diff,
        "retrieval_gain": float(np.mean(wo_task - w_task)),
    }
    header = f"{'path':<28} {'time s':>8} {'s / doc':>8} {'speed-up':>9}"
    print(header)
    print("-" * len(header))
    print(f"{'stock HFLM loglikelihood':<28} {t_stock:>8.3f} {t_stock / args.docs:>8.3f} {1.0:>8.2f}x")
    print(f"{'retrieval_gain task path':<28} {t_task:>8.3f} {t_task / args.docs:>8.3f} {speedup:>8.2f}x")
    print(f"max |diff| of per-pair answer NLLs (with, without): {diff:.1e}; mean gain {row['retrieval_gain']:+.4f}")
    met = speedup >= TARGET_SPEEDUP
    print(
        f"Target: >= {TARGET_SPEEDUP}x faster than stock HFLM with {args.n_queries} queries per document: "
        f"{speedup:.2f}x -> {'MET' if met else 'NOT MET'}"
    )
    ok = diff <= FLOAT32_TOLERANCE or args.dtype != "float32"
    print(f"Agreement (tolerance {FLOAT32_TOLERANCE:.0e}): {'ok' if ok else 'FAILED'}")
    return benchkit.finish(args.json, row, ok)


if __name__ == "__main__":
    sys.exit(main())
