"""engine/token_scores.py: what the passes return: per-target log-probs and greedy hits (NaN where not scored),
their summaries (what --log_samples shows) and their --use_cache state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lm_eval_longctx.engine.token_scores import SequenceScores, TokenLogprobs, unscored
from lm_eval_longctx.records import StaleStateError


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_unscored_has_one_nan_target_per_token_after_the_first(n):
    scores = unscored(n)
    assert len(scores) == max(n - 1, 0) and len(scores.greedy) == len(scores)
    assert np.isnan(scores.logprob).all() and not scores.greedy.any()
    assert scores.logprob.dtype == np.float32 and scores.greedy.dtype == bool
    summary = scores.summary()
    assert summary == {"scored": 0, "nll_sum": 0.0, "greedy_hits": 0}
    assert math.copysign(1.0, summary["nll_sum"]) == 1.0  # 0.0, not -0.0


def test_the_summary_counts_only_the_scored_targets():
    # targets 1 and 2 are scored (log-probs -1.0 and -0.5); the hits at the NaN targets 0 and 3 do not count
    scores = TokenLogprobs(np.array([np.nan, -1.0, -0.5, np.nan], np.float32), np.array([True, True, False, True]))
    assert scores.summary() == {"scored": 2, "nll_sum": 1.5, "greedy_hits": 1}


def test_the_nll_sum_is_added_in_float64():
    # 10**5 targets of log-prob -0.1 (float32): summed in float32 they are off by about 8e-4
    lp = np.full(100_000, -0.1, np.float32)
    expected = 100_000 * float(np.float32(0.1))
    assert TokenLogprobs(lp, np.zeros(len(lp), bool)).summary()["nll_sum"] == pytest.approx(expected, abs=1e-6)


def test_a_sequence_summary_has_each_pass_it_holds():
    long = TokenLogprobs(np.array([-1.0, -2.0], np.float32), np.array([True, False]))
    short = TokenLogprobs(np.array([np.nan, -3.0], np.float32), np.array([False, True]))
    one = SequenceScores(np.arange(3), None, long)
    assert one.summary() == {"n_tokens": 3, "long_scored": 2, "long_nll_sum": 3.0, "long_greedy_hits": 1}
    both = SequenceScores(np.arange(3), None, long, short)
    assert both.summary() == {
        **one.summary(),
        "short_scored": 1,
        "short_nll_sum": 3.0,
        "short_greedy_hits": 1,
    }
    assert json.loads(str(both)) == both.summary()  # what --log_samples writes for the response


def test_sequence_scores_round_trip_through_the_cache_state():
    offsets = np.array([[0, 2], [2, 5], [5, 6]], np.int64)
    long = TokenLogprobs(np.array([np.nan, -0.25], np.float32), np.array([False, True]))
    record = SequenceScores(np.array([5, 6, 7], np.int64), offsets, long)
    back = SequenceScores.from_state(record.to_state())
    assert isinstance(back.long, TokenLogprobs) and back.short is None
    np.testing.assert_array_equal(back.token_ids, record.token_ids)
    np.testing.assert_array_equal(back.offsets, offsets)
    np.testing.assert_array_equal(back.long.logprob, long.logprob)  # NaN where not scored, kept
    np.testing.assert_array_equal(back.long.greedy, long.greedy)
    without_offsets = SequenceScores.from_state(SequenceScores(record.token_ids, None, long).to_state())
    assert without_offsets.offsets is None


def test_a_state_without_the_long_pass_is_stale():
    with pytest.raises(StaleStateError, match="SequenceScores: the stored state has no 'long'"):
        SequenceScores.from_state({"token_ids": [1, 2], "offsets": None})
