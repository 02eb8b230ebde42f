"""The direction of every metric this suite's tasks report: ``True`` (higher is better), ``False`` (lower is
better) or ``None`` (informational: counts, diagnostics and text notes, never gated).

The tasks declare their metrics' directions from this table (``tasks/base.py``), and the regression gate reads
it for the suite's own tasks (``report/gate.py``), so that a results file cannot switch a metric's gate off by
omitting ``higher_is_better``. Metric names built per length or per configuration are fnmatch patterns.
"""

from __future__ import annotations

import fnmatch


class UnknownMetric:
    """The type of :data:`UNKNOWN`."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = UnknownMetric()  # not a metric of this suite's tasks: its direction is whatever the results file records

# task -> (metric pattern, direction), first match wins. Per-length / per-configuration names are zero-padded
# numbers: copy_acc@00512 (forgetting_curve._name), gain@L01024_d50 and gain@L01024 (gain_map.cell_metric,
# length_metric), answer_ppl_0200 (longeval._LinesTask.config_key).
DIRECTIONS: dict[str, tuple[tuple[str, bool | None], ...]] = {
    "longppl_govreport": (
        ("longppl", False),
        ("longppl_soft", False),
        ("ppl", False),
        ("key_token_fraction", None),
        ("n_key_tokens", None),
    ),
    "forgetting_curve": (
        ("copy_acc@[0-9]*", True),
        ("lm_acc@[0-9]*", True),
        ("fine_memory_length", True),
        ("coarse_memory_length", True),
        ("n_failed_lengths", False),
        ("skipped_lengths", None),  # a text note: which lengths were skipped, and why
    ),
    "retrieval_gain": (
        ("retrieval_gain", True),
        ("nll_with", False),
        ("nll_without", False),
    ),
    "retrieval_gain_map": (
        ("gain@L[0-9]*", True),  # a cell (gain@L01024_d50) and a length's mean over depths (gain@L01024)
        ("gain", True),
        ("effective_length", True),
        ("effective_length_abs", True),
    ),
    "longeval_lines_ppl": (
        ("answer_ppl", False),
        ("non_answer_ppl", False),
        ("answer_ppl_[0-9]*", False),
        ("non_answer_ppl_[0-9]*", False),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),  # the share of cases skipped as over-long (over_length: skip)
    ),
    "longeval_lines_acc": (
        ("acc", True),
        ("acc_[0-9]*", True),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),
    ),
}

# group -> its tasks; lm-eval records a group's directions as the union of its tasks' (None where they differ)
GROUPS: dict[str, tuple[str, ...]] = {"longeval_lines": ("longeval_lines_ppl", "longeval_lines_acc")}


def _task_direction(task: str, metric: str) -> bool | None | UnknownMetric:
    for pattern, direction in DIRECTIONS.get(task, ()):
        if fnmatch.fnmatchcase(metric, pattern):
            return direction
    return UNKNOWN


def declared_direction(task: str, metric: str) -> bool | None | UnknownMetric:
    """The declared direction of ``metric`` (its name without a ",filter") of ``task``, a task or group of this
    suite; :data:`UNKNOWN` when it is not one of this suite's metrics (another task, or a name the task does not
    report)."""
    if task in GROUPS:
        found = [d for t in GROUPS[task] if (d := _task_direction(t, metric)) is not UNKNOWN]
        if not found:
            return UNKNOWN
        return found[0] if all(d == found[0] for d in found) else None
    return _task_direction(task, metric)


def direction_of(task: str, metric: str) -> bool | None:
    """:func:`declared_direction` for a metric a task of this suite declares; a name missing from the table is a
    ``KeyError`` (add the metric to :data:`DIRECTIONS`)."""
    direction = declared_direction(task, metric)
    if isinstance(direction, UnknownMetric):
        raise KeyError(f"{task}/{metric}: no direction in lm_eval_longctx/metrics/directions.py; add it to DIRECTIONS")
    return direction
