"""scripts/validation_panel.py builds its table from the audits' records: a row per checkpoint with both answers and
their costs, the rank correlation across the panel, and every expectation that does not hold named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def panel():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import validation_panel

        yield validation_panel
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def record(window: int, verdict: str, effective: int, ruler_scores: dict, claim: str, holds: bool = True) -> dict:
    from lm_eval_longctx.audit import ruler

    rules = ruler.effective_lengths(ruler_scores)
    for rule in rules.values():
        rule.update(tokens_forwarded=0, tokens_generated=0, wall_seconds=0.0)
    cross = {
        "lengths": [{"length": k, "score": v, "tokens_forwarded": k, "tokens_generated": 48, "wall_seconds": 2.0}
                    for k, v in ruler_scores.items()],
        "left_out": [],
        "effective_length": rules,
    }  # fmt: skip
    lengths = sorted(ruler_scores)
    return {
        "verdict": {
            "window": window,
            "verdict": verdict,
            "effective_length": effective,
            "tested_lengths": lengths,
            "effective": {
                "relative": {"value": effective, "low": effective, "high": effective},
                "absolute": {"value": effective, "low": None, "high": None},
            },
        },  # fmt: skip
        "stages": [{"length": k, "tokens_estimated": 10 * k, "cpu_seconds": 1.5, "wall_seconds": 1.0} for k in lengths],
        "cross_check": cross,
        "agreement": ruler.agreement(window, lengths, effective, cross),
        "expectations": [{"expectation": f"the claim {claim}", "found": claim, "holds": holds}],
    }


def test_the_table_puts_both_answers_and_their_costs_side_by_side(panel):
    rows = [
        panel.row("uses", record(8192, "uses its claimed window", 8192, {4096: 90.0, 8192: 88.0}, "used")),
        panel.row("twin", record(32768, "effective below the claim", 8192, {8192: 88.0, 16384: 0.0}, "refuted")),
        panel.row("none", record(8192, "no effective context", 0, {1024: 10.0}, "refuted", holds=False)),
    ]
    assert rows[0]["agree_ruler"] and rows[1]["agree_ruler"] and rows[1]["ruler_effective"] == 8192
    assert rows[0]["audit_tokens"] == 10 * (4096 + 8192) and rows[0]["ruler_tokens"] == 4096 + 8192
    text = panel.table(rows)
    assert "| twin | 32,768 | effective below the claim | 8,192 [8192, 8192] |" in text
    assert "8,192: 88, 16,384: 0" in text
    assert "Rank correlation (Spearman)" in text and "Expectations that do not hold: none: the claim refuted" in text
    # an audit judged without the cross-check: RULER's columns say it did not run, not "none"
    unchecked = record(8192, "uses its claimed window", 8192, {4096: 90.0}, "used")
    del unchecked["cross_check"], unchecked["agreement"]
    line = next(x for x in panel.table([panel.row("unchecked", unchecked)]).splitlines() if x.startswith("| unchecked"))
    assert "| not run | n/a | n/a | n/a / n/a |" in line


def test_the_rank_correlation_needs_three_checkpoints_that_vary(panel):
    same = {"audit_effective": 1024, "ruler_effective": 1024, "ruler_scores": {1024: 90.0}}
    assert panel.rank_correlation([same, same]) is None
    rows = [{"audit_effective": a, "ruler_effective": r, "nolima_effective": r, "ruler_scores": {1024: 90.0}}
            for a, r in ((0, 0), (1024, 2048), (8192, 8192))]  # fmt: skip
    assert panel.rank_correlation(rows) == pytest.approx(1.0)
    assert panel.rank_correlation(rows, "nolima_effective") == pytest.approx(1.0)
    # a checkpoint RULER did not run on is left out, not read as "none"
    not_run = {"audit_effective": 8192, "ruler_effective": None, "nolima_effective": None, "ruler_scores": {}}
    assert panel.rank_correlation([*rows, not_run]) == pytest.approx(1.0)
    assert panel.rank_correlation(rows[1:] + [not_run]) is None
