"""retrieval_gain (``tasks/retrieval_gain.py``) sized from max_seq_lengths or the model's window: the whole
with-document sequence holds the length."""

from __future__ import annotations

import pytest

from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import base, retrieval_gain
from tests import tiny


def test_the_document_fills_the_longest_length_beside_bos_separator_query_and_answer(tmp_path):
    from transformers import AutoTokenizer

    s = retrieval_gain.resolve_settings({"max_seq_lengths": [512, 2048], "separator": "\n"})
    assert retrieval_gain.settings_for_lengths([512, 2048], 49) == {"doc_tokens": 1999}
    tokenizer = AutoTokenizer.from_pretrained(tiny.save_tiny_model(tmp_path, tiny.corpus_texts(2, 200)))
    extra = base.query_extra_tokens(tokenizer, s)
    s["doc_tokens"] = retrieval_gain.settings_for_lengths([2048], extra)["doc_tokens"]
    text = " ".join(["the report of committee found"] * 2000)
    case = retrieval_gain.case_for_text(tokenizer, text, s)
    assert case.max_with_length == 2048  # [BOS] document sep Q A: exactly the length
    assert base.query_extra_tokens(None, s) == 1 + 24 + 24  # no tokenizer known: one BOS, no separator
    with pytest.raises(SettingsError, match="a length of 40 tokens leaves no room for a document"):
        retrieval_gain.settings_for_lengths([40], 49)


def test_the_paper_preset_reads_8192_tokens_of_each_document():
    assert retrieval_gain.resolve_settings({"preset": "paper"})["doc_tokens"] == 8192
    assert retrieval_gain.resolve_settings({})["doc_tokens"] is None  # sized when the task is built
