"""The interval a report shows around a metric from the stderr lm-eval reports, on the scale that fits the metric:
a perplexity (positive, skewed: exp of a mean NLL) on the log scale, exp(ln v ± z·se/v) by the delta method, so
that it never reaches below 0 or 1; an accuracy within [0, 1]; any other metric value ± z·se."""

from __future__ import annotations

import math


def scale_of(name: str) -> str:
    """``"log"`` for a perplexity (its name holds ``ppl``), ``"unit"`` for an accuracy (``acc``), else ``"linear"``."""
    metric = name.split("/", 1)[-1].split(",", 1)[0].lower()
    if "ppl" in metric:
        return "log"
    if metric == "acc" or metric.startswith(("acc_", "acc@", "copy_acc", "lm_acc")):
        return "unit"
    return "linear"


def interval(name: str, value: float, stderr: float | None, z: float) -> tuple[float, float] | None:
    """(low, high) around ``value`` from ``stderr`` on the scale of metric ``name`` (``scale_of``); None without a
    finite value and stderr."""
    if stderr is None or not math.isfinite(value) or not math.isfinite(stderr):
        return None
    scale = scale_of(name)
    if scale == "log" and value > 0:
        half = z * stderr / value
        return value * math.exp(-half), value * math.exp(half)
    low, high = value - z * stderr, value + z * stderr
    if scale == "unit":
        return max(0.0, low), min(1.0, high)
    return low, high


def is_symmetric(name: str, value: float) -> bool:
    return scale_of(name) == "linear" or (scale_of(name) == "log" and value <= 0)
