"""scripts/lookup_vs_copy.py: the first answer token's gain of every cell equals a plain full forward's, on a tiny
random model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests import tiny
from tests.scripts import script

# loads a model through transformers and scores a ladder: seconds, so not in the fast subset
pytestmark = pytest.mark.integration


def _first_token_logprob(model, ids: list[int], position: int) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, position - 1].double()
    return float(torch.log_softmax(logits, -1)[ids[position]])


def test_first_token_gain_is_the_full_forward_one(tmp_path, corpus_texts):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_longctx.data import retrieval_cases
    from lm_eval_longctx.training.context_use import MapSettings, held_out_documents

    model_dir = tiny.save_tiny_model(tmp_path / "model", corpus_texts, vocab_size=300, seed=3)
    out = tmp_path / "rows.json"
    argv = [
        "--model",
        model_dir,
        "--lengths",
        "64,128",
        "--depths",
        "10,90",
        "--queries",
        "4,6",
        "--answer-tokens",
        "3",
    ]
    assert script("lookup_vs_copy").main([*argv, "--docs", "2", "--anchors", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 * 2 * 2  # queries x lengths x depths

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for q in (4, 6):
        settings = MapSettings((64, 128), (10, 90), q, 3)
        texts = held_out_documents(tokenizer, settings, 2)
        for doc, text in enumerate(texts):
            case = retrieval_cases.map_case_for_text(tokenizer, text, settings.case_settings(), [64, 128])
            lead = len(case.lead)
            for i, length in enumerate(case.lengths):
                for j, depth in enumerate(case.depths):
                    with_ids = case.prefix[: lead + length] + case.continuations[i][j]
                    with_lp = _first_token_logprob(model, with_ids, len(with_ids) - 3)
                    without_ids = case.without[i][j]
                    without_lp = _first_token_logprob(model, without_ids, len(without_ids) - 3)
                    row = next(r for r in rows if (r["query_tokens"], r["length"], r["depth"]) == (q, length, depth))
                    assert np.isclose(row["first_token_per_document"][doc], with_lp - without_lp, atol=1e-4)
