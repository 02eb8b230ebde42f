"""The report tools' text outputs (--summary, --csv, --markdown, --out) on a nearly full disk: the old file or the
new one, never a part, and one message naming the file and the cause."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report import results
from tests.tiny import writes_cut_at


def test_an_append_that_does_not_fit_leaves_the_file_as_it_was(tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("## an earlier step\n" + "x" * 1000 + "\n")
    before = summary.read_text()
    with pytest.raises(results.UnusableInput) as caught, writes_cut_at(len(before) + 50):
        results.write_text(summary, "| task | metric |\n" * 200, append=True, what="--summary file")
    assert str(caught.value) == f"{summary}: cannot write the --summary file: File too large"
    assert summary.read_text() == before and [p.name for p in tmp_path.iterdir()] == [summary.name]
    results.write_text(summary, "| a | b |\n", append=True)
    assert summary.read_text() == before + "| a | b |\n"


def test_a_table_that_does_not_fit_is_not_left(tmp_path):
    with pytest.raises(results.UnusableInput, match="board.csv: cannot write the --csv file: File too large"):
        with writes_cut_at(100):
            results.write_text(tmp_path / "board.csv", "a,b\n" * 500, what="--csv file")
    assert list(tmp_path.iterdir()) == []
