"""The bootstrap over resampled units (documents, samples, models), one module for every user:

* ``interval``: a statistic's percentile interval (``scipy.stats.bootstrap``), also of a paired difference;
* ``indices``: resamples of unit indices, within strata if given (the gate's paired test, the correlation check);
* ``stderr``: the standard error of an aggregate over resampled items, undefined resamples skipped (the tasks'
  stderr in lm-eval's results).

Pure numpy and scipy; no model.
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
    method: str = "percentile",
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
        method: scipy's interval method (``percentile`` suits step statistics; ``BCa``, ``basic``).

    Returns:
        ``{"value", "low", "high", "level", "n_units", "n_resamples", "seed", "method", "bootstrap_se"}``: the
        statistic on all units, the interval's bounds and the resamples' standard deviation (floats).

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
        "method": method,
        "bootstrap_se": None,
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
        method=method,
        rng=np.random.default_rng(seed),
    )
    out["low"], out["high"] = float(res.confidence_interval.low), float(res.confidence_interval.high)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    out["bootstrap_se"] = float(np.nanstd(dist, ddof=1)) if len(dist) > 1 else 0.0
    return out


def indices(rng: np.random.Generator, n_units: int, n_resamples: int, strata=None) -> np.ndarray:
    """Resamples of unit indices with replacement; within each stratum (its units' positions kept) if given.

    Args:
        rng: the generator that draws them (its stream is the reproducibility).
        n_units: how many units there are.
        n_resamples: how many resamples.
        strata: one label per unit, or None.

    Returns:
        int [n_resamples, n_units]: one resample per row.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.bootstrap import indices
        >>> idx = indices(np.random.default_rng(0), 4, 3, strata=np.array([0, 0, 1, 1]))
        >>> idx.shape, bool(np.all(idx[:, :2] < 2)), bool(np.all(idx[:, 2:] >= 2))
        ((3, 4), True, True)
    """
    if strata is None:
        return rng.integers(0, n_units, size=(n_resamples, n_units))
    idx = np.empty((n_resamples, n_units), dtype=np.int64)
    for value in np.unique(strata):
        members = np.flatnonzero(strata == value)
        idx[:, members] = members[rng.integers(0, len(members), size=(n_resamples, len(members)))]
    return idx


def stderr(aggregate: Callable[[list], float], items, n_resamples: int, seed: int = 1234) -> float:
    """Standard deviation of ``aggregate`` over resamples of ``items`` (seeded); a resample without a defined
    value (NaN, or a note such as "n/a: ...") is skipped, so one undefined resample does not make it NaN.

    Args:
        aggregate: maps a list of items to a number.
        items: the per-unit items.
        n_resamples: how many resamples.
        seed: the resampling seed.

    Returns:
        The standard error; NaN when fewer than two resamples are defined.

    Example:
        >>> from lm_eval_longctx.metrics.bootstrap import stderr
        >>> se = stderr(lambda xs: sum(xs) / len(xs), [1.0, 2.0, 3.0, 4.0], n_resamples=500)
        >>> 0.3 < se < 0.8
        True
    """
    items = list(items)
    rng = np.random.default_rng(seed)
    drawn = [aggregate([items[i] for i in rng.integers(0, len(items), len(items))]) for _ in range(n_resamples)]
    values = np.array([v for v in drawn if isinstance(v, (int, float)) and np.isfinite(v)], dtype=np.float64)
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
