"""What the suite's tasks declare for the report card (``configs.<task>.metadata.longctx_report``), for results files
built by hand in the report tests: the sections, headlines, settings shown and pictures each task declares, and
its metrics' directions."""

from __future__ import annotations

import copy
import fnmatch

from lm_eval_longctx.tasks import base

# Read from the task classes themselves, so the hand-built results carry what the tasks write today.
_TASKS = base.suite_tasks()
LONGCTX_REPORT = {name: cls.REPORT.record() for name, cls in _TASKS.items() if cls.REPORT is not None}
DIRECTIONS = {name: tuple(cls.METRIC_DIRECTIONS) for name, cls in _TASKS.items()}


def direction(task: str, metric: str) -> bool | None:
    """The direction a task of the suite declares for ``metric`` (None: informational, or not declared)."""
    for pattern, value in DIRECTIONS.get(task, ()):
        if fnmatch.fnmatchcase(metric, pattern):
            return value
    return None


def declaration(task: str) -> dict:
    """The task's ``longctx_report`` (a copy), or {} for a task of another suite."""
    return copy.deepcopy(LONGCTX_REPORT.get(task, {}))


def with_declarations(data: dict) -> dict:
    """``data`` (a results dict) with every suite task's ``longctx_report`` in its config, as the tasks write it."""
    for task, cfg in (data.get("configs") or {}).items():
        if task in LONGCTX_REPORT:
            cfg.setdefault("metadata", {})["longctx_report"] = declaration(task)
    return data
