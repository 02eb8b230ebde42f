"""metrics/bootstrap.py: the one bootstrap module (intervals, resampled indices, the tasks' stderr)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_longctx.metrics import bootstrap, per_token


def test_stderr_skips_undefined_resamples():
    items = [(2.0, 1), (0.0, 0), (3.0, 2), (1.0, 1)]
    se = bootstrap.stderr(per_token.token_weighted_perplexity, items, n_resamples=300)
    assert math.isfinite(se) and se > 0
    assert math.isnan(bootstrap.stderr(per_token.token_weighted_perplexity, [(0.0, 0)] * 3, 50))


def test_indices_within_strata_keep_each_units_stratum_and_match_a_plain_draw_without():
    strata = np.array([0, 0, 0, 1, 1, 2])
    idx = bootstrap.indices(np.random.default_rng(3), 6, 400, strata)
    assert np.array_equal(strata[idx], np.broadcast_to(strata, idx.shape))
    plain = bootstrap.indices(np.random.default_rng(3), 6, 400)
    assert np.array_equal(plain, np.random.default_rng(3).integers(0, 6, size=(400, 6)))


def test_interval_of_a_paired_difference_and_its_spread():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    ci = bootstrap.interval(lambda i: x[i].mean(axis=-1) - 1.0, len(x), n_resamples=500, seed=1)
    assert ci["value"] == pytest.approx(2.5) and ci["low"] < 2.5 < ci["high"]
    assert 0.3 < ci["bootstrap_se"] < 1.2 and ci["method"] == "percentile"
    assert bootstrap.interval(lambda i: x[i].mean(axis=-1), 1)["low"] is None
