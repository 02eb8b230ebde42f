"""Percentile bootstrap intervals over resampled units (documents, samples): ``interval``.

Pure numpy and scipy (``scipy.stats.bootstrap`` draws the resamples); no model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0


def interval(
    statistic: Callable[[np.ndarray], np.ndarray],
    n_units: int,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> dict:
    """A statistic of ``n_units`` units and its percentile bootstrap interval, resampling the units with replacement.

    The percentile method suits step statistics such as effective or memory lengths (BCa's jackknife is degenerate
    there). Fewer than 2 units have no interval (``low`` and ``high`` None).

    Args:
        statistic: maps an integer index array (its last axis one resample of unit indices, leading axes any) to the
            statistic of each resample.
        n_units: how many units there are (indices 0 .. n_units - 1).
        n_resamples: bootstrap resamples.
        confidence: the interval's level.
        seed: the resampling seed.

    Returns:
        ``{"value", "low", "high", "level", "n_units", "n_resamples", "seed"}``: the statistic on all units and the
        interval's bounds (floats).

    Raises:
        ValueError: ``n_units`` is below 1.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.bootstrap import interval
        >>> x = np.array([1.0, 2.0, 3.0, 4.0])
        >>> ci = interval(lambda i: x[i].mean(axis=-1), len(x), n_resamples=1000)
        >>> ci["value"], ci["low"] >= 1.0, ci["high"] <= 4.0
        (2.5, True, True)
    """
    if n_units < 1:
        raise ValueError("no units to resample")
    idx = np.arange(n_units)
    value = float(statistic(idx))
    out = {
        "value": value,
        "low": None,
        "high": None,
        "level": confidence,
        "n_units": int(n_units),
        "n_resamples": int(n_resamples),
        "seed": seed,
    }
    if n_units < 2:
        return out
    from scipy import stats

    def vectorized(i, axis=-1):
        return statistic(np.moveaxis(np.asarray(i), axis, -1))

    res = stats.bootstrap(
        (idx,),
        vectorized,
        n_resamples=n_resamples,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    out["low"], out["high"] = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return out
