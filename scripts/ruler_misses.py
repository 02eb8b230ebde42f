#!/usr/bin/env python
"""Read RULER's single-needle answers of a cross-check run again: where each needle lay, what the model generated,
and what a plain full forward predicts for each answer token given the right tokens before it.

A needle answer missed at its first token but predicted right at every later token (given the first) is a failed
lookup: the model copies the needle once cued but does not find it from the question. One missed throughout is
not read at all.

    python scripts/ruler_misses.py --model DIR --run AUDIT_OUT/ruler/L0008192

``--run`` is one length's folder of ``lm-eval-longctx audit ... --cross-check ruler`` (the samples file of
``niah_single_1`` below it). One full forward per sample, in float32, through the engine's ``FullForward``: the
model's own output head, run on the answer's positions only.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint folder (the one the cross-check ran)")
    p.add_argument("--run", required=True, type=Path, help="one length's folder of the cross-check")
    p.add_argument("--task", default="niah_single_1", help="RULER task whose samples to read")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_longctx.engine.forward import FullForward
    from lm_eval_longctx.engine.support import describe

    files = sorted(args.run.rglob(f"samples_{args.task}_*.jsonl"))
    if not files:
        p.error(f"{args.run}: no samples_{args.task}_*.jsonl below it")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    support = describe(model)
    print(
        "| sample | prompt tokens | needle: tokens back | RULER score | generated | full forward, teacher-forced | answer |"
    )
    print("|---:|---:|---:|---:|---|---|---|")
    for line in files[-1].read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        prompt = sample["arguments"]["gen_args_0"]["arg_0"]
        target = sample["target"]
        answer = (ast.literal_eval(target) if isinstance(target, str) else target)[0]
        prompt_ids = tokenizer(prompt, return_tensors="pt").input_ids
        whole = tokenizer(prompt + ": " + answer, return_tensors="pt").input_ids
        if answer not in prompt:
            p.error(f"{files[-1]}: sample {sample['doc_id']}: its answer {answer!r} is not in its prompt")
        needle_at = tokenizer(prompt[: prompt.index(answer)], return_tensors="pt").input_ids.shape[1]
        with torch.no_grad():
            full = FullForward(model, whole, support)
            predicted = tokenizer.decode(full.logits(prompt_ids.shape[1] - 1, whole.shape[1] - 1)[0].argmax(-1))
        generated = (sample["resps"][0][0].strip().splitlines() or [""])[0][:24]
        score = sample[str(sample["doc"]["max_length"])]  # RULER logs the score under its length
        print(f"| {sample['doc_id']} | {prompt_ids.shape[1]} | {prompt_ids.shape[1] - needle_at} | {score:g} | "
              f"`{generated}` | `{predicted.strip()}` | `{answer}` |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
