"""Values that are only lower bounds: a length the model still uses (an effective length, a memory length) that
equals the longest length its run tested could be longer, since nothing longer was tried. The leaderboard, the
report card and the gate show such a value as ``≥ 976``, and the gate compares it as a bound.

Each results JSON a run saves holds the same reading under ``longctx_bounds`` (``bounds_record``), per task and
length metric: the value, the longest length tested, and whether the value is only a lower bound.

The lengths a run tested come from the results themselves: the per-length metrics of the same task name them
(``gain@L00976`` for an effective length, ``copy_acc@00512`` for a memory length), those with a number only; a
results file without them falls back on the lengths its ``longctx_settings`` record.
"""

from __future__ import annotations

import math
import re

LOWER_BOUND_MARK = "≥"
LOWER_BOUND_LEGEND = (
    f"{LOWER_BOUND_MARK}: a lower bound, a length that reaches the longest length its run tested (the model may hold "
    "more)"
)

# metric -> (its per-length metrics, the longctx_settings keys that list the lengths, first found wins)
_MAP_LENGTHS = (re.compile(r"gain@L(\d+)"), ("lengths_used", "context_lengths"))
_CURVE_LENGTHS = (re.compile(r"copy_acc@(\d+)"), ("lengths",))
LENGTH_METRICS = {
    "effective_length": _MAP_LENGTHS,
    "effective_length_abs": _MAP_LENGTHS,
    "fine_memory_length": _CURVE_LENGTHS,
    "coarse_memory_length": _CURVE_LENGTHS,
}


def is_lower_bound(value, tested_lengths) -> bool:
    """Whether a length the model uses is only a lower bound: it is positive and reaches the longest length tested.

    Args:
        value: the length (an effective or memory length), or None.
        tested_lengths: the lengths the run tested.

    Returns:
        True when ``value`` >= the longest of ``tested_lengths`` and above 0; False otherwise (no lengths, no value).

    Example:
        >>> is_lower_bound(976, [256, 512, 976]), is_lower_bound(512, [256, 512, 976])
        (True, False)
        >>> is_lower_bound(0, [0]), is_lower_bound(976, [])
        (False, False)
    """
    if value is None or not tested_lengths or not math.isfinite(value):
        return False
    return value > 0 and value >= max(tested_lengths)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def tested_lengths(metric: str, entries: dict, settings: dict | None = None, filt: str = "none") -> list[int] | None:
    """The lengths a task's run tested, for one of its length metrics (``LENGTH_METRICS``); None for any other
    metric. ``entries``: the task's entry in the results' ``results``; ``settings``: its ``longctx_settings``."""
    if metric not in LENGTH_METRICS:
        return None
    pattern, keys = LENGTH_METRICS[metric]
    found = []
    for key, value in entries.items():
        name, _, key_filter = key.partition(",")
        m = pattern.fullmatch(name)
        if m and key_filter == filt and _finite(value):
            found.append(int(m.group(1)))
    if found or not isinstance(settings, dict):
        return found
    for key in keys:
        listed = settings.get(key)
        if isinstance(listed, list) and listed and all(_finite(x) for x in listed):
            return [int(x) for x in listed]
    return []


def metric_is_lower_bound(metric: str, value, entries: dict, settings: dict | None = None, filt: str = "none") -> bool:
    """Whether a task's ``metric`` (its value ``value``) is a length that reaches the longest length tested."""
    lengths = tested_lengths(metric, entries, settings, filt)
    return lengths is not None and is_lower_bound(value, lengths)


def bound_text(text: str, lower_bound: bool) -> str:
    """A shown value with its mark: ``≥ 976`` for a lower bound, the text itself otherwise."""
    return f"{LOWER_BOUND_MARK} {text}" if lower_bound else text


BOUNDS_KEY = "longctx_bounds"


def recorded_settings(data: dict, task: str) -> dict | None:
    """The task's ``configs.<task>.metadata.longctx_settings`` when the results hold them as an object, else None
    (a task of another suite; what the tools refuse when malformed is checked where they read it)."""
    configs = data.get("configs")
    cfg = configs.get(task) if isinstance(configs, dict) else None
    metadata = cfg.get("metadata") if isinstance(cfg, dict) else None
    settings = metadata.get("longctx_settings") if isinstance(metadata, dict) else None
    return settings if isinstance(settings, dict) else None


def bounds_record(results: dict) -> dict:
    """Per task and length metric of a results dict (lm-eval's aggregated results): the value, the longest length
    the run tested, and whether the value is only a lower bound; tasks without a length metric are left out.

    Example:
        >>> results = {"results": {"retrieval_gain_map": {"alias": "retrieval_gain_map",
        ...     "effective_length,none": 976.0, "gain@L00208,none": 2.8, "gain@L00976,none": 2.6}}}
        >>> bounds_record(results)["retrieval_gain_map"]["effective_length"]
        {'value': 976.0, 'longest_tested': 976, 'lower_bound': True}
    """
    out: dict = {}
    for task, entries in (results.get("results") or {}).items():
        if not isinstance(entries, dict):
            continue
        settings = recorded_settings(results, task)
        for key, value in entries.items():
            metric, _, filt = key.partition(",")
            if metric not in LENGTH_METRICS or not _finite(value):
                continue
            lengths = tested_lengths(metric, entries, settings, filt or "none")
            if not lengths:
                continue
            out.setdefault(task, {})[metric] = {
                "value": value,
                "longest_tested": max(lengths),
                "lower_bound": is_lower_bound(value, lengths),
            }
    return out


def add_bounds(results: dict) -> None:
    """Write ``bounds_record(results)`` into ``results`` under ``BOUNDS_KEY`` (nothing when no task has a length
    metric): what a results JSON says of its bounds, beside the values."""
    record = bounds_record(results)
    if record:
        results[BOUNDS_KEY] = record
