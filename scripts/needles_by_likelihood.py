#!/usr/bin/env python
"""RULER's single needle read by likelihood, in a haystack of natural text or of RULER's repeated sentences.

A sequence of L tokens holds RULER's needle, the sentence "One of the special magic numbers for KEY is: NUMBER."
(a two-word key, a 7-digit number), at depth 10, 50 or 90% of the haystack, then RULER's question for the key
followed by its answer; with ``--together``, the three needles in one sequence and the three questions after. A needle is found when a plain full forward's most likely token after
the question (and after the space, where the tokenizer writes it apart) is the number's first token: no generation.
The script prints that accuracy and the first token's log-prob per length and depth.

    python scripts/needles_by_likelihood.py --model DIR --lengths 1024,2048,4096,8192 --docs 4 --haystack text
    python scripts/needles_by_likelihood.py --model DIR --lengths 4096,8192 --docs 4 --haystack repeat

``text``: the embedded corpus (``training.context_use.held_out_documents``); ``repeat``: RULER's ``niah_single_1``
noise ("The grass is green. The sky is blue. ...") repeated. Keys and numbers are drawn from ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

DEPTHS = (10, 50, 90)
KEY_WORDS = (
    "hypnotic boyhood scarce posterior wholesale leisure idiotic supreme ruddy divider amber falcon quiet harbor "
    "brisk lantern velvet canyon mellow thistle crimson orchard"
).split()
# RULER's niah_single_1 haystack and templates (lm_eval/tasks/ruler)
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = " One of the special magic numbers for {key} is: {value}."
QUESTION = (
    "\nWhat is the special magic number for {key} mentioned in the provided text? "
    "The special magic number for {key} mentioned in the provided text is:"
)


def needle_sequence(
    haystack: list[int], length: int, lead: list[int], encode, rng, depths=DEPTHS
) -> tuple[list[int], list]:  # fmt: skip
    """``lead`` + the haystack cut to fit ``length`` with a needle at each of ``depths``, then a question and its
    answer for each; the answers' ``(position of the number's first token, its token id, depth)``."""
    keys: list[str] = []
    while len(keys) < len(depths):
        key = f"{rng.choice(KEY_WORDS)}-{rng.choice(KEY_WORDS)}"
        keys += [] if key in keys else [key]
    values = [str(rng.randint(1_000_000, 9_999_999)) for _ in depths]
    needles = [encode(NEEDLE.format(key=k, value=v)) for k, v in zip(keys, values)]
    tail: list[int] = []
    answers = []
    for key, value, depth in zip(keys, values, depths):
        tail += encode(QUESTION.format(key=key))
        answer, space = encode(f" {value}"), encode(" ")
        # the number's first token: a tokenizer that writes the space as a token of its own predicts it from anywhere
        skip = len(space) if answer[: len(space)] == space and len(answer) > len(space) else 0
        answers.append((len(tail) + skip, answer[skip], depth))
        tail += answer
    room = length - len(lead) - sum(map(len, needles)) - len(tail)
    if room < 0 or len(haystack) < room:
        raise ValueError(
            f"length {length}: the needles and questions leave {room} tokens of haystack; {len(haystack)} given"
        )
    ids, previous = list(lead), 0
    for depth, needle in zip(depths, needles):
        cut = room * depth // 100
        ids += haystack[previous:cut] + needle
        previous = cut
    ids += haystack[previous:room]
    start = len(ids)
    return ids + tail, [(start + at, token, depth) for at, token, depth in answers]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint folder")
    p.add_argument("--lengths", default="1024,2048,4096,8192", help="sequence lengths L, comma-separated")
    p.add_argument("--docs", type=int, default=4, help="sequences per length (documents, for --haystack text)")
    p.add_argument("--haystack", choices=("text", "repeat"), default="text")
    p.add_argument("--together", action="store_true",
                   help="the three needles in one sequence, their keys apart (as RULER's multi-key tasks), not one "
                   "sequence per needle (as niah_single_1)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_longctx.data.retrieval_cases import lead_token_ids
    from lm_eval_longctx.engine.forward import FullForward
    from lm_eval_longctx.engine.support import describe
    from lm_eval_longctx.training.context_use import MapSettings, held_out_documents

    lengths = [int(x) for x in args.lengths.split(",")]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    support = describe(model)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    lead = lead_token_ids(tokenizer, "auto")
    if args.haystack == "text":
        haystacks = [encode(t) for t in held_out_documents(tokenizer, MapSettings(tuple(lengths)), args.docs)]
    else:
        haystacks = [encode(NOISE * (max(lengths) // 8))] * args.docs
    rng = random.Random(args.seed)
    rows = []
    placements = [DEPTHS] if args.together else [(depth,) for depth in DEPTHS]
    per_sequence = "three needles in each sequence" if args.together else "one needle in each sequence"
    print(f"{args.model}: haystack {args.haystack}, {args.docs} haystacks per length, {per_sequence}")
    print("| L | found: all depths | " + " | ".join(f"depth {d}: found, log-prob" for d in DEPTHS) + " | seconds |")
    print("|---:|---:|" + "---|" * len(DEPTHS) + "---:|")
    for length in lengths:
        started = time.perf_counter()
        found: dict[int, list[tuple[bool, float]]] = {d: [] for d in DEPTHS}
        for haystack in haystacks:
            for depths in placements:
                ids, answers = needle_sequence(haystack, length, lead, encode, rng, depths)
                with torch.no_grad():
                    # the model's own output head, on the answers' positions only
                    full = FullForward(model, torch.tensor([ids]), support)
                    for position, token, depth in answers:
                        logprobs = torch.log_softmax(full.logits(position - 1, position)[0, 0].double(), -1)
                        found[depth].append((int(logprobs.argmax()) == token, float(logprobs[token])))
        row = {
            "length": length,
            "found": float(np.mean([hit for d in DEPTHS for hit, _ in found[d]])),
            "by_depth": {d: {"found": float(np.mean([h for h, _ in found[d]])),
                             "logprob": float(np.mean([lp for _, lp in found[d]]))} for d in DEPTHS},
        }  # fmt: skip
        rows.append(row)
        cells = " | ".join(f"{row['by_depth'][d]['found']:.2f}, {row['by_depth'][d]['logprob']:.2f}" for d in DEPTHS)
        print(f"| {length} | {row['found']:.2f} | {cells} | {time.perf_counter() - started:.0f} |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            record = {"model": args.model, "haystack": args.haystack, "docs": args.docs, "together": args.together}
            json.dump({**record, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
