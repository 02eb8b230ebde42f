#!/usr/bin/env python
"""Precompute LongPPL key-token spans with an evaluator model, once, for every later evaluation.

Writes ``slice_{i}.txt`` per document (the reference format: ``[start, end]`` pairs joined by ``;``)
and ``key_spans.json`` (the settings and the data hash they were computed for). Use the folder with

    lm_eval --tasks longppl_govreport --model hf --model_args pretrained=MODEL \\
        --metadata '{"key_spans_dir": "DIR"}'

Example (the paper's evaluator, on a GPU):

    python scripts/precompute_key_spans.py --evaluator meta-llama/Llama-3.1-8B --out spans/llama31-8b
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from lm_eval_longctx import data, key_tokens, keyspans
from lm_eval_longctx.tasks.longppl import DEFAULTS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--evaluator", default=DEFAULTS["evaluator"], help="HF model id or local path")
    p.add_argument("--evaluator-revision", default=None)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--trunc-len", type=int, default=DEFAULTS["trunc_len"], help="K")
    p.add_argument("--sliding-window", type=int, default=DEFAULTS["sliding_window"], help="d")
    p.add_argument("--alpha", type=float, default=DEFAULTS["alpha"])
    p.add_argument("--beta", type=float, default=DEFAULTS["beta"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--chunk-size", type=int, default=DEFAULTS["chunk_size"])
    p.add_argument("--batch-size", type=int, default=4, help="truncated windows per forward")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dataset-path", default=data.GOVREPORT_DATASET)
    p.add_argument("--dataset-revision", default=None)
    p.add_argument("--decode-tokenizer", default=data.GOVREPORT_DECODE_TOKENIZER)
    p.add_argument("--data-files", default=None, help="local json/jsonl/parquet instead of the hub dataset")
    p.add_argument("--num-docs", type=int, default=DEFAULTS["num_docs"])
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    docs = data.load_govreport(dataset_path=args.dataset_path, revision=args.dataset_revision,
                               decode_tokenizer=args.decode_tokenizer, num_docs=args.num_docs,
                               data_files=args.data_files)
    dtype = args.dtype or ("bfloat16" if str(args.device).startswith("cuda") else "float32")
    tok = AutoTokenizer.from_pretrained(args.evaluator, revision=args.evaluator_revision,
                                        trust_remote_code=args.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(args.evaluator, revision=args.evaluator_revision, dtype=getattr(torch, dtype),
                                                 trust_remote_code=args.trust_remote_code).to(args.device).eval()
    out = Path(args.out)
    n_empty = 0
    for i, text in enumerate(docs.texts):
        scores = key_tokens.score_text(model, tok, text, args.trunc_len, args.sliding_window,
                                       chunk_size=args.chunk_size, batch_size=args.batch_size)
        spans = key_tokens.judge_from_scores(scores, args.alpha, args.beta).spans
        keyspans.write_span_file(out / f"slice_{i}.txt", spans)
        n_empty += not spans
        print(f"document {i}: {len(scores.token_ids)} evaluator tokens, {len(spans)} key spans", file=sys.stderr)
    manifest = {
        "format": keyspans.MANIFEST_FORMAT,
        "evaluator": args.evaluator,
        "evaluator_fingerprint": key_tokens.model_fingerprint(args.evaluator, model),
        "evaluator_dtype": dtype,
        "trunc_len": args.trunc_len, "sliding_window": args.sliding_window, "alpha": args.alpha, "beta": args.beta,
        "span_algorithm_version": key_tokens.SPAN_ALGORITHM_VERSION,
        **docs.provenance,
    }
    (out / keyspans.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    print(f"wrote {len(docs.texts)} span files to {out} ({n_empty} without key tokens)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
