#!/usr/bin/env python
"""Precompute LongPPL key-token spans with an evaluator model, once, for every later evaluation.

Writes ``slice_{i}.txt`` per document (the reference format: ``[start, end]`` pairs joined by ``;``)
and ``key_spans.json`` (how they were made: evaluator identity, K, d, alpha, beta; the texts' and
files' SHA-256, so a changed or foreign file is detected). Use the folder with

    lm_eval --tasks longppl_govreport --model hf --model_args pretrained=MODEL \\
        --metadata '{"key_spans_dir": "DIR"}'

Example (the paper's evaluator, on a GPU):

    python scripts/precompute_key_spans.py --evaluator meta-llama/Llama-3.1-8B --out spans/llama31-8b

The folder appears whole or not at all: everything is written into a fresh folder beside OUT, which
is renamed into place at the end. A non-empty OUT is refused unless it is a span folder written by
this script and --overwrite is given; the old folder is then replaced only after the new one is done.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from lm_eval_longctx import data, key_tokens, keyspans
from lm_eval_longctx.settings import add_arguments
from lm_eval_longctx.task_settings import LONGPPL

SETTING_OPTIONS = ["evaluator", "evaluator_revision", "trunc_len", "sliding_window", "alpha", "beta",
                   "evaluator_dtype", "chunk_size", "evaluator_trust_remote_code", "dataset_path", "dataset_revision",
                   "decode_tokenizer", "data_files", "num_docs", "min_tokens", "max_tokens", "evaluator_max_memory"]


def check_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise SystemExit(f"error: {out} is not empty; pass --overwrite to replace a span folder written by this "
                             "script, or choose a new folder")
        try:
            keyspans.read_manifest(out)
        except keyspans.KeySpanFormatError:
            ours = False
        else:
            ours = (out / keyspans.MANIFEST).is_file()
        if not ours:
            raise SystemExit(f"error: {out} holds no {keyspans.MANIFEST} of this script: it is not replaced, even "
                             "with --overwrite (nothing there was changed)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder")
    add_arguments(p, LONGPPL, SETTING_OPTIONS)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu, cuda:N, or auto (device_map over the visible GPUs)")
    p.add_argument("--batch-size", type=int, default=4, help="truncated windows per forward")
    p.add_argument("--overwrite", action="store_true", help="replace an existing span folder of this script")
    args = p.parse_args(argv)
    out = Path(args.out)
    check_output(out, args.overwrite)

    docs = data.load_govreport(dataset_path=args.dataset_path, revision=args.dataset_revision,
                               decode_tokenizer=args.decode_tokenizer, num_docs=args.num_docs,
                               min_tokens=args.min_tokens, max_tokens=args.max_tokens, data_files=args.data_files)
    dtype = args.evaluator_dtype or ("bfloat16" if str(args.device).startswith(("cuda", "auto"))
                                     and torch.cuda.is_available() else "float32")
    identity = key_tokens.evaluator_identity(args.evaluator, args.evaluator_revision)
    max_length = key_tokens.evaluator_max_length(identity)
    model, tok = key_tokens.load_evaluator(identity, dtype=dtype, device=args.device,
                                           max_memory=args.evaluator_max_memory,
                                           trust_remote_code=args.evaluator_trust_remote_code)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        new = Path(tmp) / "spans"
        all_spans = []
        for i, text in enumerate(docs.texts):
            scores = key_tokens.score_text(model, tok, text, args.trunc_len, args.sliding_window,
                                           chunk_size=args.chunk_size, batch_size=args.batch_size,
                                           max_length=max_length, identity=identity)
            all_spans.append(key_tokens.judge_from_scores(scores, args.alpha, args.beta).spans)
            print(f"document {i}: {len(scores.token_ids)} evaluator tokens, {len(all_spans[-1])} key spans",
                  file=sys.stderr)
        manifest = {"evaluator": args.evaluator, "evaluator_identity": identity, "evaluator_dtype": dtype,
                    "trunc_len": args.trunc_len, "sliding_window": args.sliding_window, "alpha": args.alpha,
                    "beta": args.beta, "span_algorithm_version": key_tokens.SPAN_ALGORITHM_VERSION,
                    **docs.provenance}
        keyspans.write_span_dir(new, all_spans, docs.texts, manifest)
        if out.exists():  # a span folder of ours (checked above): swap, then drop the old one with tmp
            out.rename(Path(tmp) / "previous")
        new.rename(out)
    n_empty = sum(not s for s in all_spans)
    print(f"wrote {len(docs.texts)} span files to {out} ({n_empty} without key tokens)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
