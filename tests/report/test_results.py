"""report/results.py: the report tools' text outputs (--summary, --csv, --markdown, --out) on a nearly full disk (the
old file or the new one, never a part, and one message naming the file and the cause), and the metrics read from a
results file, a length that reaches the longest length tested marked as a lower bound."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report import results
from tests.report_fixtures import suite_results_json
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


def test_metrics_of_marks_the_lengths_that_reach_the_longest_tested():
    data = suite_results_json("org/m", tasks=["retrieval_gain_map", "forgetting_curve"])
    data["results"]["forgetting_curve"]["fine_memory_length,none"] = 64.0  # below the longest copy length, 256
    metrics = results.metrics_of(data)
    assert metrics["retrieval_gain_map/effective_length"].lower_bound  # 2048, the longest context length
    assert metrics["forgetting_curve/coarse_memory_length"].lower_bound  # 256
    assert not metrics["forgetting_curve/fine_memory_length"].lower_bound
    assert not metrics["retrieval_gain_map/gain"].lower_bound
