"""retrieval_gain_map (``tasks/retrieval_gain_map.py``) sized from max_seq_lengths: one rung per length, the whole
with-context sequence holding it."""

from __future__ import annotations

import pytest

from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import retrieval_gain_map


def test_each_length_is_a_rung_whose_whole_sequence_holds_it():
    s = retrieval_gain_map.resolve_settings({"max_seq_lengths": [256, 1024]})
    assert retrieval_gain_map.settings_for_lengths([256, 512, 1024], 49, s) == {"context_lengths": [207, 463, 975]}
    with pytest.raises(SettingsError, match=r"context lengths \[11\] are too short.*max_seq_lengths \[60, 256\]"):
        retrieval_gain_map.settings_for_lengths([60, 256], 49, s)


def test_the_ci_preset_tests_three_depths_on_ten_documents_of_the_embedded_corpus():
    s = retrieval_gain_map.resolve_settings({"preset": "ci"})
    assert s["depths"] == [10, 50, 90] and s["num_docs"] == 10 and s["embedded_corpus"]
    assert s["max_seq_lengths"] == [256, 512, 1024] and s["context_lengths"] is None  # sized when built
