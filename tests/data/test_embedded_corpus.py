"""The demo's corpus file on a nearly full disk: whole or not there."""

from __future__ import annotations

import pytest

from lm_eval_longctx.data import embedded_corpus
from tests.tiny import writes_cut_at


def test_a_corpus_that_does_not_fit_leaves_nothing(tmp_path):
    with pytest.raises(OSError), writes_cut_at(500):
        embedded_corpus.write_corpus(tmp_path / "corpus.jsonl", ["a document " * 100, "another " * 100])
    assert list(tmp_path.iterdir()) == []
