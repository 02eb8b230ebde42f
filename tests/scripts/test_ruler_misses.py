"""scripts/ruler_misses.py on a samples file written as RULER's: where the needle lay, what was generated, and the
teacher-forced prediction of a plain full forward, on a tiny random model."""

from __future__ import annotations

import json

import pytest
import torch

from tests import tiny
from tests.scripts import script

# loads a model through transformers: seconds, so not in the fast subset
pytestmark = pytest.mark.integration


def test_reads_each_needle_and_its_answers(tmp_path, corpus_texts, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ruler_misses = script("ruler_misses")
    model_dir = tiny.save_tiny_model(tmp_path / "model", corpus_texts, vocab_size=300, seed=4)
    haystack = " ".join(corpus_texts)[:600]
    prompt = f"One of the magic numbers is: 4817. {haystack} The magic number is"
    run = tmp_path / "ruler" / "L0000512" / "model"
    run.mkdir(parents=True)
    # RULER logs a score under every length's key, -1 where the sample is not of that length
    sample = {"doc_id": 0, "doc": {"max_length": 512}, "target": "['4817']", "arguments": {"gen_args_0": {"arg_0": prompt}},
              "resps": [[": 1000\nmore"]], "256": -1, "512": 0.0}  # fmt: skip
    (run / "samples_niah_single_1_2026-01-01T00-00-00.jsonl").write_text(json.dumps(sample) + "\n")

    assert ruler_misses.main(["--model", model_dir, "--run", str(run.parent)]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].split(" | ")

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt_ids = tokenizer(prompt).input_ids
    whole = tokenizer(prompt + ": 4817").input_ids
    with torch.no_grad():
        predicted = model(torch.tensor([whole])).logits[0, len(prompt_ids) - 1 : -1].argmax(-1)
    before = len(tokenizer(prompt[: prompt.index("4817")]).input_ids)
    assert row[1:4] == [str(len(prompt_ids)), str(len(prompt_ids) - before), "0"]
    assert row[4] == "`: 1000`"
    assert row[5] == f"`{tokenizer.decode(predicted).strip()}`" and row[6] == "`4817` |"
