"""Every lm-eval callable this package replaces or adds at run time, with the reason, in one table.

lm-eval 0.4.13 has no plugin interface for what these serve (a request type of its own, the model a task is
evaluated with, files beside the results), so the harness sets them on lm-eval's classes and modules when lm-eval
is imported (``discovery.install``, ``glue.install``). ``replaced_callables`` finds what is set, by where each
function was defined, so that a test holds the table to what runs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

OURS = "lm_eval_longctx"


@dataclass(frozen=True)
class Contact:
    owner: str  # the module or class, by its import path
    attribute: str
    why: str


CONTACTS = (
    Contact(
        "lm_eval.tasks.manager.TaskManager",
        "__init__",
        "adds the task folder to include_path: lm-eval 0.4.13 reads no lm_eval.tasks entry point",
    ),
    Contact(
        "lm_eval.tasks.manager.TaskManager",
        "load",
        "what one call loads, so the first task built checks the resources of all (tasks/preflight.py)",
    ),
    Contact(
        "lm_eval.evaluator",
        "simple_evaluate",
        "checks every task's settings before the model loads (lm-eval builds tasks after the model) and records "
        "the evaluated model and chat options, which lm-eval hands no task",
    ),
    Contact("lm_eval.api.model.LM", "__init__", "which backend was built, to refuse one that cannot serve the tasks"),
    Contact("lm_eval.api.model.LM", "create_from_arg_string", "the --model_args keys and the model built from them"),
    Contact("lm_eval.api.model.LM", "create_from_arg_obj", "the same, for model_args given as a dict"),
    Contact("lm_eval.api.model.LM", "longctx_scores", "the request type on other backends: one line saying why not"),
    Contact("lm_eval.models.huggingface.HFLM", "longctx_scores", "serves the request type with the engine"),
    Contact(
        "lm_eval.evaluator_utils",
        "stderr_for_metric",
        "a bootstrap stderr for token-weighted aggregations, where lm-eval's would be NaN or missing",
    ),
    Contact(
        "lm_eval.loggers.evaluation_tracker.EvaluationTracker",
        "save_results_aggregated",
        "pictures and exports written beside the results file; a failed save removes its partial file",
    ),
    Contact(
        "lm_eval.loggers.evaluation_tracker.EvaluationTracker",
        "save_results_samples",
        "a failed save of the samples removes its partial file",
    ),
    Contact("sys", "excepthook", "an error of this package ends an lm_eval run in one line, not a traceback"),
)


def _defined_here(value) -> bool:
    # by the file its code is in: a wrapper made with functools.wraps carries the wrapped function's __module__
    function = getattr(value, "__func__", value)
    code = getattr(function, "__code__", None)
    return code is not None and f"{os.sep}{OURS}{os.sep}" in code.co_filename


def replaced_callables() -> set[tuple[str, str]]:
    """(owner, attribute) of every callable of a loaded lm-eval module or class (and ``sys.excepthook``) that a
    module of this package defined."""
    found = set()
    if _defined_here(sys.excepthook):
        found.add(("sys", "excepthook"))
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "lm_eval" or name.startswith("lm_eval.")):
            continue
        for attribute, value in list(vars(module).items()):
            if callable(value) and _defined_here(value):
                found.add((name, attribute))
            if isinstance(value, type) and value.__module__ == name:
                for member, inner in vars(value).items():
                    if _defined_here(inner):
                        found.add((f"{name}.{attribute}", member))
    return found
