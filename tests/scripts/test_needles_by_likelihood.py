"""scripts/needles_by_likelihood.py: each sequence is L tokens with a needle at each depth and the questions after,
and what the script reports is a plain full forward's first-token verdict, on a tiny random model."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from tests import tiny
from tests.scripts import script

# loads a model through transformers: seconds, so not in the fast subset
pytestmark = pytest.mark.integration


def test_a_sequence_holds_its_needles_and_questions(corpus_texts, tmp_path):
    from transformers import AutoTokenizer

    needles = script("needles_by_likelihood")
    tokenizer = AutoTokenizer.from_pretrained(tiny.save_tiny_model(tmp_path / "m", corpus_texts, seed=5))

    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    haystack = encode(needles.NOISE * 200)
    ids, answers = needles.needle_sequence(
        haystack, 1500, [tokenizer.bos_token_id], encode, random.Random(1), needles.DEPTHS
    )
    assert len(ids) == 1500 and ids[0] == tokenizer.bos_token_id
    assert [depth for _, _, depth in answers] == list(needles.DEPTHS)
    text = tokenizer.decode(ids[1:])
    for position, token, _ in answers:
        asked = tokenizer.decode(ids[:position]).rsplit("magic number for ", 1)[1].split(" ")[0]
        needle = text.index(f"magic numbers for {asked} is:")
        number = text[needle:].split("is: ", 1)[1][:7]
        assert ids[position] == token and text.index(asked) == needle + len("magic numbers for ")
        # the scored token is the number's first, never the space before it
        assert tokenizer.decode([token]).strip()[:1] == number[0]
        assert tokenizer.decode(ids[position:]).lstrip().startswith(number)
    with pytest.raises(ValueError, match="haystack"):
        needles.needle_sequence(haystack[:50], 1500, [], encode, random.Random(1))


def test_reports_the_full_forward_verdict(corpus_texts, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    needles = script("needles_by_likelihood")
    model_dir = tiny.save_tiny_model(tmp_path / "m", corpus_texts, seed=6)
    out = tmp_path / "rows.json"
    argv = ["--model", model_dir, "--lengths", "1500,2000", "--docs", "2", "--haystack", "repeat", "--json", str(out)]
    assert needles.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    from lm_eval_longctx.data.retrieval_cases import lead_token_ids

    rng = random.Random(0)
    haystack = encode(needles.NOISE * (2000 // 8))
    lead = lead_token_ids(tokenizer, "auto")
    for row, length in zip(rows, (1500, 2000)):
        logprobs: dict[int, list[float]] = {d: [] for d in needles.DEPTHS}
        for _ in range(2):
            for depth in needles.DEPTHS:  # one needle a sequence
                ids, answers = needles.needle_sequence(haystack, length, lead, encode, rng, (depth,))
                with torch.no_grad():
                    logits = model(torch.tensor([ids])).logits[0].double()
                ((position, token, _),) = answers
                logprobs[depth].append(float(torch.log_softmax(logits[position - 1], -1)[token]))
        for depth in needles.DEPTHS:
            assert np.isclose(row["by_depth"][str(depth)]["logprob"], np.mean(logprobs[depth]), atol=1e-4)
    # the three needles in one sequence: the same report, each depth's needle among the others
    assert needles.main([*argv, "--together"]) == 0
    assert json.loads(out.read_text())["together"] is True
