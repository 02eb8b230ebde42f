"""Span files on a nearly full disk: whole or not there."""

from __future__ import annotations

import pytest

from lm_eval_longctx.keytokens import span_files
from tests.tiny import writes_cut_at


def test_a_span_file_that_does_not_fit_leaves_nothing(tmp_path):
    spans = [(k * 10, k * 10 + 3) for k in range(500)]
    with pytest.raises(OSError), writes_cut_at(200):
        span_files.write_span_file(tmp_path / "spans" / "slice_0.txt", spans)
    assert list((tmp_path / "spans").iterdir()) == []
    span_files.write_span_file(tmp_path / "spans" / "slice_0.txt", spans)
    assert span_files.read_span_file(tmp_path / "spans" / "slice_0.txt") == spans
