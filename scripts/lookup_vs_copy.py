#!/usr/bin/env python
"""Split the retrieval-gain map's gain into the lookup and the copy that follows it, on one checkpoint.

The map scores an answer A of r tokens after a query Q of q tokens that repeats a passage of the document. Its
gain (with the document minus without, mean log-prob over A) mixes two things: finding the passage from Q (the
first answer token: nothing of A has been seen yet) and continuing a copy once it has started (tokens 2..r, each
cued by the answer tokens before it). This script prints, per length and depth, the gain of the first answer token
and of the rest, for each query length given: with a short query the first token is a lookup by a short key, as a
needle task asks for.

    python scripts/lookup_vs_copy.py --model DIR --lengths 2048,8192 --queries 24,4 --docs 6

The documents are the embedded corpus (``training.context_use.held_out_documents``), scored as the
``retrieval_gain_map`` task scores them (``training.context_use.score_map_cases``), in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint folder")
    p.add_argument("--lengths", default="2048,8192", help="context lengths L, comma-separated")
    p.add_argument("--depths", default="10,50,90", help="depths in percent, comma-separated")
    p.add_argument("--queries", default="24,4", help="query lengths q to compare, comma-separated")
    p.add_argument("--answer-tokens", type=int, default=24, help="r: answer tokens scored")
    p.add_argument("--anchors", type=int, default=4, help="anchors per cell (each a query and its answer)")
    p.add_argument("--docs", type=int, default=6, help="documents of the embedded corpus")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_longctx.data import retrieval_cases
    from lm_eval_longctx.training.context_use import MapSettings, held_out_documents, score_map_cases

    lengths = [int(x) for x in args.lengths.split(",")]
    depths = tuple(int(x) for x in args.depths.split(","))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    r = args.answer_tokens
    # the documents depend on the longest length only: the same for every query length
    texts = held_out_documents(tokenizer, MapSettings(tuple(lengths)), args.docs)
    rows = []
    print(f"{args.model}: {args.docs} documents x {args.anchors} anchors per cell, r = {r}; gain in nats (with the")
    print("document - without), mean over documents and anchors")
    print("| q | L | depth | first answer token | tokens 2..r | all r tokens | first token per document |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for q in [int(x) for x in args.queries.split(",")]:
        settings = MapSettings(tuple(lengths), depths, q, r, anchors_per_cell=args.anchors)
        cases = [retrieval_cases.map_case_for_text(tokenizer, t, settings.case_settings(), lengths) for t in texts]
        started = time.perf_counter()
        with torch.no_grad():
            scored = score_map_cases(model, cases)
        # [documents, lengths, depths, answer tokens], the cell's anchors averaged
        gains = np.stack([(np.float64(w) - np.float64(wo)).mean(axis=-2) for w, wo in scored])
        for i, length in enumerate(lengths):
            for j, depth in enumerate(depths):
                cell = gains[:, i, j]
                row = {
                    "query_tokens": q,
                    "length": length,
                    "depth": depth,
                    "first_token": float(cell[:, 0].mean()),
                    "rest": float(cell[:, 1:].mean()) if r > 1 else None,
                    "all": float(cell.mean()),
                    "first_token_per_document": [float(x) for x in cell[:, 0]],
                }
                rows.append(row)
                rest = "-" if row["rest"] is None else f"{row['rest']:.2f}"
                print(f"| {q} | {length} | {depth} | {row['first_token']:.2f} | {rest} | {row['all']:.2f} | "
                      + " ".join(f"{x:.2f}" for x in row["first_token_per_document"]) + " |", flush=True)  # fmt: skip
        print(f"(q = {q}: {time.perf_counter() - started:.0f} s)", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"model": args.model, "docs": args.docs, "anchors": args.anchors, "answer_tokens": r, "rows": rows},
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
