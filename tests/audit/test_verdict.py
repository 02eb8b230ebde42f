"""The audit's verdict from the effective length's interval, and the effective lengths and memory lengths of paired
stage data (made-up gains: what each rule must conclude)."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.audit import verdict
from lm_eval_longctx.metrics import gain_map

W = 8192


def ci(value, low, high):
    return {"value": value, "low": low, "high": high}


@pytest.mark.parametrize(
    ("tested", "interval", "expected", "words"),
    [
        (
            [1024, 2048, 4096, 8192],
            ci(8192, 8192, 8192),
            verdict.USES,
            "uses its claimed window: effective length ≥ 8192",  # nothing longer tested: a lower bound
        ),
        ([1024, 2048, 4096, 8192, 16384], ci(16384, 8192, 16384), verdict.USES, "uses its claimed window"),
        ([1024, 2048, 4096, 8192, 16384], ci(8192, 8192, 8192), verdict.USES, "effective length 8192 [8192"),
        ([4096, 8192, 16384], ci(8192, 8192, 8192), verdict.BELOW, "ends below 16384"),
        ([1024, 2048], ci(1024, 1024, 1024), verdict.BELOW, "effective 1024 of claimed 8192"),
        ([1024, 2048, 4096], ci(0, 0, 0), verdict.NONE, "no effective context at any tested length"),
        ([1024, 2048, 4096], ci(4096, 2048, 4096), verdict.SHORT, "not tested up to W"),
        ([1024, 2048, 4096, 8192], ci(8192, 4096, 8192), verdict.UNDECIDED, "undecided at W"),
    ],
)
def test_the_verdict_reads_the_interval_against_the_claim(tested, interval, expected, words):
    w = 32768 if tested == [4096, 8192, 16384] else W
    got, sentence = verdict.decide(w, tested, interval)
    assert got == expected and words in sentence


def test_a_refuted_claim_stops_the_ladder_only_under_the_contiguous_rule():
    assert verdict.refuted(W, [1024, 2048], ci(1024, 1024, 1024), "contiguous")
    assert not verdict.refuted(W, [1024, 2048], ci(1024, 1024, 1024), "largest")
    assert not verdict.refuted(W, [1024, 2048], ci(2048, 1024, 2048), "contiguous")


def measured(gains: np.ndarray, lengths, copy=None, depths=(50,)) -> verdict.Measured:
    """Stage data of ``gains`` [documents, lengths, depths] ([documents, lengths]: one depth) and forgetting-curve
    accuracies ``copy`` [samples, lengths, (copy, LM)] (default: copy well above LM at every length)."""
    gains = np.asarray(gains, dtype=np.float64)
    gains = gains[..., None] if gains.ndim == 2 else gains
    if copy is None:
        copy = np.zeros((3, len(lengths), 2))
        copy[:, :, 0] = 0.9
    return verdict.Measured(
        np.asarray(lengths),
        list(range(gains.shape[0])),
        gains,
        np.asarray([(x - 3) // 2 for x in lengths]),
        list(range(copy.shape[0])),
        copy,
        {"fine": {"threshold": 0.99, "rule": "largest"}, "coarse": {"margin": 0.01, "rule": "contiguous"}},
        list(depths),
    )


def test_judge_gives_both_rules_with_intervals_and_the_memory_lengths():
    lengths = [1024, 2048, 4096, 8192, 16384]
    gains = np.array([[3.0, 2.8, 2.5, 2.0, -3.0], [2.6, 2.5, 2.4, 1.9, -2.5], [2.9, 2.7, 2.6, 2.2, -3.5]])
    copy = np.zeros((2, 5, 2))
    copy[:, :, 0] = [1.0, 1.0, 0.995, 0.9, 0.1]
    copy[:, :, 1] = 0.3
    judged = verdict.judge(measured(gains, lengths, copy), W, verdict.RuleSet())
    assert judged["verdict"] == verdict.USES and judged["effective_length"] == 8192
    assert judged["effective"]["absolute"]["value"] == 8192
    assert judged["memory"]["fine"]["value"] == 2046 and judged["memory"]["coarse"]["value"] == 4094
    row = judged["per_length"][-1]
    assert row["length"] == 16384 and row["gain"] == pytest.approx(-3.0) and row["gain_ci"][1] < 0
    assert "| 16384 | 2 | -3 |" in verdict.length_table(judged)


def test_a_rule_on_noise_around_zero_finds_no_effective_context():
    rng = np.random.default_rng(0)
    judged = verdict.judge(measured(rng.normal(0, 0.05, (3, 3)), [1024, 2048, 4096]), W, verdict.RuleSet())
    assert judged["verdict"] == verdict.NONE and judged["effective_length"] == 0


DEPTHS = (10, 50, 90)


def reach_bounded(rng, lengths) -> np.ndarray:
    """A model that reaches only a few hundred tokens back, as a 512-token sliding window: at every length the near
    depth (90) keeps its gain, the far ones (10, 50) are near zero; [3 documents, lengths, depths]."""
    near = rng.normal(2.8, 0.1, (3, len(lengths)))
    far = rng.normal(0.0, 0.1, (3, len(lengths), 2))
    return np.concatenate([far, near[..., None]], axis=-1)


def test_one_near_depth_does_not_carry_a_length_the_model_does_not_reach_across():
    """The mean over depths (about 0.93 nats at every length) clears both rules: read alone it said "uses its claimed
    window"; with every depth read the claim is refuted at the shortest length."""
    lengths = [2048, 4096, 8192, 16384]
    gains = reach_bounded(np.random.default_rng(0), lengths)
    mean = gains.mean(axis=(0, 2))
    assert gain_map.effective_length(lengths, mean, fraction=0.5, base_minimum=0.5) == 16384
    assert gain_map.effective_length(lengths, mean, threshold=0.5) == 16384
    for decides in ("relative", "absolute"):
        judged = verdict.judge(measured(gains, lengths, depths=DEPTHS), 16384, verdict.RuleSet(decides=decides))
        assert judged["verdict"] == verdict.NONE and judged["effective"][decides]["high"] == 0, judged["sentence"]
    row = judged["per_length"][0]
    assert set(row["gain_by_depth"]) == set(DEPTHS) and row["weakest_depth"] in (10, 50)
    assert row["weakest_gain"] < 0.3 < row["gain"] and row["gain_by_depth"][90] > 2.5
    table = verdict.length_table(judged)
    assert "gain at depths 10/50/90" in table and "(depth " in table


def test_a_model_that_reaches_across_every_length_still_uses_its_window():
    """Every depth keeps a gain at every length, the farthest one at W less than half its gain at the shortest length
    (as SmolLM2-135M-Instruct's depth 10 at 8k: docs/real-models.md): it reaches across W."""
    lengths = [2048, 4096, 8192, 16384]
    rng = np.random.default_rng(1)
    gains = rng.normal(2.0, 0.1, (3, len(lengths), len(DEPTHS))) + np.array([0.0, 0.4, 0.8])  # far depths a bit lower
    gains[:, -1, 0] = rng.normal(0.9, 0.1, 3)
    for decides in ("relative", "absolute"):
        judged = verdict.judge(measured(gains, lengths, depths=DEPTHS), 16384, verdict.RuleSet(decides=decides))
        assert judged["verdict"] == verdict.USES and judged["effective_length"] == 16384, judged["sentence"]


def test_a_length_whose_copy_accuracy_is_at_the_lm_accuracy_does_not_count():
    """Every depth keeps its gain, but the forgetting curve copies no better than the LM predicts from 4096 on."""
    lengths = [2048, 4096, 8192]
    gains = np.full((3, len(lengths), len(DEPTHS)), 2.0)
    copy = np.zeros((2, len(lengths), 2))
    copy[:, :, 0] = [0.9, 0.43, 0.9]
    copy[:, :, 1] = 0.43
    judged = verdict.judge(measured(gains, lengths, copy, DEPTHS), 8192, verdict.RuleSet())
    assert judged["verdict"] == verdict.BELOW and judged["effective_length"] == 2048, judged["sentence"]
    assert [r["copy_above_lm"] for r in judged["per_length"]] == [True, False, True]
    # without curve samples the map decides alone
    alone = measured(gains, lengths, np.zeros((0, 0, 2)), DEPTHS)
    alone.sample_ids = []
    assert verdict.judge(alone, 8192, verdict.RuleSet())["verdict"] == verdict.USES


def test_the_summary_marks_a_length_at_the_longest_tested_as_a_bound():
    judged = {
        "window": 8192,
        "rules": {"fraction": 0.5, "threshold": 0.5},
        "effective": {"relative": ci(8192, 8192, 8192), "absolute": ci(4096, 2048, 8192)},
        "memory": {"fine": ci(0, 0, 0), "coarse": ci(4094, 4094, 4094)},
        "tested_lengths": [1024, 2048, 4096, 8192],
        "per_length": [{"copy_length": c} for c in (510, 1022, 2046, 4094)],
    }
    table = verdict.summary_table(judged)
    rows = {line.split(" | ")[0]: line.split(" | ")[1] for line in table.splitlines() if line.startswith("| ")}
    assert (
        rows[
            "| effective length, relative rule (mean gain > 0.5 x the shortest length's; every depth's > 0.5 nats; copy above LM accuracy)"
        ]
        == "≥ 8192"
    )  # noqa: E501
    assert [v for k, v in rows.items() if "absolute rule" in k] == ["4096"]
    assert [v for k, v in rows.items() if "coarse" in k] == ["≥ 4094"] and [
        v for k, v in rows.items() if "fine" in k
    ] == ["0"]
    assert table.endswith("(the model may hold more)")
    judged["tested_lengths"] = [1024, 2048, 4096, 8192, 16384]
    judged["memory"]["coarse"] = ci(2046, 2046, 2046)
    assert "≥" not in verdict.summary_table(judged)
