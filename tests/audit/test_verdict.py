"""The audit's verdict from the effective length's interval, and the effective lengths and memory lengths of paired
stage data (made-up gains: what each rule must conclude)."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.audit import verdict

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
            "uses its claimed window: effective length 8192",
        ),
        ([1024, 2048, 4096, 8192, 16384], ci(16384, 8192, 16384), verdict.USES, "uses its claimed window"),
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


def measured(gains: np.ndarray, lengths, copy=None) -> verdict.Measured:
    copy = np.zeros((3, len(lengths), 2)) if copy is None else copy
    return verdict.Measured(
        np.asarray(lengths),
        list(range(gains.shape[0])),
        gains,
        np.asarray([(x - 3) // 2 for x in lengths]),
        list(range(copy.shape[0])),
        copy,
        {"fine": {"threshold": 0.99, "rule": "largest"}, "coarse": {"margin": 0.01, "rule": "contiguous"}},
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
