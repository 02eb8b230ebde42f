"""The per-token metrics (``metrics/per_token.py``): memory lengths on synthetic curves, the answer / non-answer
split of LongEval's response, the key-token mask's definition and the soft weights, against the LongPPL reference
functions and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_longctx.data import longeval_cases
from lm_eval_longctx.metrics import per_token


def test_memory_lengths_on_synthetic_curves():
    L = np.array([8, 100, 200, 300, 400])
    fine, coarse = per_token.fine_memory_length, per_token.coarse_memory_length
    # monotonic forgetting: the reference Llama-3-8B points
    ref_l = np.array([523, 4134, 4650, 5166, 9293])
    assert fine(ref_l, [0.999, 0.999, 0.845, 0.50, 0.069]) == 4134
    assert coarse(ref_l, [0.999, 0.999, 0.845, 0.50, 0.069], [0.51, 0.53, 0.44, 0.28, 0.05]) == 9293
    # never above the threshold / always above
    assert fine(L, [0.5] * 5) == 0 and coarse(L, [0.5] * 5, [0.5] * 5) == 0
    assert fine(L, [1.0] * 5) == 400 and coarse(L, [1.0] * 5, [0.2] * 5) == 400
    # thresholds are strict: exactly 99% / exactly 1 point do not count
    assert fine(L[:1], [0.99]) == 0 and coarse(L[:1], [0.75], [0.74]) == 0
    assert fine(L[:1], [np.mean([0.99] * 10)]) == 0 and fine(L[:1], [0.9901]) == 8
    # non-monotonic: a dip at 200 and a recovery at 300
    copy = [1.0, 1.0, 0.9, 1.0, 0.3]
    assert fine(L, copy) == 300 and fine(L, copy, rule="contiguous") == 100
    # a noisy first point (l = 8 scores 4 tokens: one miss in 40 is 97.5%)
    copy = [0.975, 1.0, 1.0, 0.6, 0.3]
    assert fine(L, copy) == 200 and fine(L, copy, rule="contiguous") == 0
    # failed (NaN) lengths never qualify; they end a contiguous run
    copy = [1.0, np.nan, 1.0, 0.2, 0.2]
    lm = [0.1, np.nan, 0.1, 0.2, 0.2]
    assert fine(L, copy) == 200 and fine(L, copy, rule="contiguous") == 8
    assert coarse(L, copy, lm) == 200 and coarse(L, copy, lm, rule="contiguous") == 8
    with pytest.raises(ValueError, match="rule"):
        fine(L, copy, rule="median")
    # from samples: per-length means, a length with a failed sample is failed
    items = [(8, 1.0, 0.1), (8, 1.0, 0.2), (50, 0.995, 0.5), (50, 0.99, 0.5), (90, 1.0, 0.1), (90, np.nan, np.nan)]
    assert per_token.fine_memory_length_from_samples(items) == 50.0  # mean 0.9925 > 0.99
    assert per_token.coarse_memory_length_from_samples(items) == 50.0
    assert (
        per_token.failed_lengths_from_samples(items) == [90] and per_token.n_failed_lengths_from_samples(items) == 1.0
    )
    curve = per_token.forgetting_curve_by_length(*zip(*items))
    assert curve["n"].tolist() == [2, 2, 2] and curve["failed"].tolist() == [False, False, True]
    assert curve["copy_std"][1] == pytest.approx(np.std([0.995, 0.99]))


def test_a_memory_length_never_measured_is_a_reason_not_a_number():
    nan = np.nan
    every_length_failed = [(126, nan, nan), (126, nan, nan), (254, nan, nan), (254, nan, nan)]
    for fn in (per_token.fine_memory_length_from_samples, per_token.coarse_memory_length_from_samples):
        value = fn(every_length_failed)
        assert value == per_token.NOT_MEASURED and not isinstance(value, float)
    assert per_token.n_failed_lengths_from_samples(every_length_failed) == 2.0
    # one length measured: a number again (0: no length qualifies)
    one_measured = [*every_length_failed[:2], (254, 0.2, 0.2), (254, 0.2, 0.2)]
    assert per_token.fine_memory_length_from_samples(one_measured) == 0.0


def test_key_token_mask_definition():
    rng = np.random.default_rng(0)
    long_lp = rng.normal(-2, 2, 1000)
    short_lp = long_lp - rng.normal(1, 2, 1000)
    short_lp[:100] = np.nan
    got = per_token.key_token_mask(long_lp, short_lp, alpha=2, beta=-2)
    # the reference's own form: loss_short - loss_full > alpha and loss_full < -beta
    loss_full, loss_short = -long_lp, -short_lp
    ref = np.array(
        [(ls - lf > 2) and (lf < 2) if not math.isnan(ls) else False for lf, ls in zip(loss_full, loss_short)]
    )
    assert np.array_equal(got, ref) and 0 < got.sum() < 900
    assert not got[:100].any()


def test_soft_weights_and_perplexities():
    long_lp = np.array([-1.0, -2.0, -0.5])
    short_lp = np.array([np.nan, -5.0, -0.6])
    w = per_token.soft_weights(long_lp, short_lp, gamma=5)
    assert w[0] == 1 and w[1] == 5 and abs(w[2] - math.exp(0.1)) < 1e-12
    items = [(10.0, 4), (0.0, 0), (6.0, 2)]
    assert abs(per_token.token_weighted_perplexity(items) - math.exp(16 / 6)) < 1e-12
    assert math.isnan(per_token.token_weighted_perplexity([(0.0, 0)]))
    assert per_token.corpus_ratio([(1, 4), (3, 4)]) == 0.5


def test_answer_mask_counts_tokens_that_merge_brackets_with_digits():
    response, a, b = longeval_cases.reference_response("tender-clause", 45129)
    assert response[a:b] == "45129" and response[a - 1] == "<" and response[b] == ">"
    # "... is", " <4", "51", "29>", "."  plus a zero-width special token
    offsets = np.array([[0, a - 2], [a - 2, a + 1], [a + 1, a + 3], [a + 3, b + 1], [b + 1, b + 2], [b + 2, b + 2]])
    mask = per_token.overlapping_token_mask(offsets, (a, b))
    assert mask.tolist() == [False, True, True, True, False, False]
    lp = np.log(np.array([0.5, 0.25, 0.5, 0.125, 0.5, 0.9]))
    (ans, n_ans), (other, n_other) = per_token.answer_nll_split(lp, offsets, (a, b))
    assert (n_ans, n_other) == (3, 2)
    assert ans == pytest.approx(-np.log(0.25 * 0.5 * 0.125)) and other == pytest.approx(-np.log(0.25))
    with pytest.raises(ValueError, match="no token overlaps"):
        per_token.answer_nll_split(lp[:1], offsets[:1], (a, b))
