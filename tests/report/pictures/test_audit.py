"""The audit's picture: the gain panel, the forgetting curve and RULER's panel drawn from an audit record, including
intervals stored to fewer digits than their point (a score rounded just above its interval's low end)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from lm_eval_longctx.report.pictures.audit import audit_figure, draw_audit  # noqa: E402

RULES = {"threshold": 0.5, "fraction": 0.5, "decides": "relative"}


def judged() -> dict:
    rows = []
    for length, gain in ((1024, 2.45), (2048, 2.39), (4096, 1.61)):
        rows.append({
            "length": length, "gain": gain, "gain_ci": [gain - 0.4, gain + 0.4], "weakest_gain": gain - 0.3,
            "copy_length": length // 2 - 2, "copy_acc": 0.9, "lm_acc": 0.4,
        })  # fmt: skip
    # a point stored with more digits than its interval, a rounding outside it
    rows[1]["gain_ci"] = [2.3900001, 2.5]
    return {
        "window": 4096,
        "verdict": "uses its claimed window",
        "per_length": rows,
        "rules": RULES,
        "effective": {"relative": {"value": 4096, "low": 4096, "high": 4096}},
    }


def cross_check() -> dict:
    third = 100 / 3
    # the score rounded to 4 digits, its interval not: 33.3333 < 33.33333...
    tasks = {"niah_single_1": {"score": 100.0}, "niah_multikey_2": {"score": 0.0}, "niah_multikey_3": {"score": 0.0}}
    lengths = [{"length": n, "score": 33.3333, "low": third, "high": third, "tasks": tasks} for n in (1024, 2048, 4096)]
    return {"lengths": lengths, "effective_length": {"ruler": {"length": None, "threshold": 85.6}}}


def test_the_audit_picture_has_a_panel_per_measurement_and_draws_rounded_intervals(tmp_path):
    fig = audit_figure(judged(), None, cross_check())
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == [
        "Retrieval gain by length", "Forgetting curve at the same lengths", "RULER's needle tasks at the same lengths",
    ]  # fmt: skip
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert "claimed window W = 4096" in labels and "effective (relative rule) = 4096" in labels
    ruler_labels = [t.get_text() for t in axes[2].get_legend().get_texts()]
    assert "RULER's bar: 85.6" in ruler_labels and "niah_single_1 alone" in ruler_labels
    assert sum(label.endswith(" alone") for label in ruler_labels) == 3
    path = draw_audit(judged(), tmp_path / "audit.png", cross_check=cross_check())
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_cross_check_the_picture_has_two_panels():
    assert len(audit_figure(judged()).get_axes()) == 2
