"""Every lm-eval callable this package replaces or adds at run time, with the reason, in one table.

lm-eval 0.4.13 has no plugin interface for what these serve (finding the task folder, a request type of its own, the
model a task is evaluated with, files beside the results), so the harness sets them on lm-eval's classes and
modules: :func:`install` sets them (each at its stage, ``Contact.stage``) and :func:`uninstall` puts lm-eval back as
it was. The start-up hook (``discovery.py``) sets the first two as soon as lm-eval imports their modules, before any
task is looked up; a ``simple_evaluate`` call sets the next before it builds the model; the rest are set when a task
of the suite is built or checked, so that a run of other suites' tasks meets only the first three.
``replaced_callables`` finds what is set, by where each function was defined, so that a test holds the table to what
runs.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass

from . import discovery

OURS = "lm_eval_longctx"
# The lm-eval releases the harness is tested with (pyproject.toml pins the same range).
TESTED_LM_EVAL = ">=0.4.13,<0.5"


# When a contact is set, earliest first: as soon as lm-eval imports its module (the start-up hook); when a
# simple_evaluate call starts (before it builds the model); when a task of the suite is built or checked. A run of
# other suites' tasks alone meets the first two stages only, and imports no backend for them.
STAGES = ("import", "call", "task")


@dataclass(frozen=True)
class Contact:
    owner: str  # the module or class, by its import path
    attribute: str
    replacement: str  # "module:function": called with lm-eval's original (None where it has none), gives ours
    stage: str  # STAGES: when it is set
    why: str


CONTACTS = (
    Contact(
        "lm_eval.tasks.manager.TaskManager",
        "__init__",
        "lm_eval_longctx.harness.discovery:task_manager_init",
        "import",
        "adds the task folder to include_path: lm-eval 0.4.13 reads no lm_eval.tasks entry point",
    ),
    Contact(
        "lm_eval.evaluator",
        "simple_evaluate",
        "lm_eval_longctx.harness.discovery:simple_evaluate",
        "import",
        "the run state (harness/evaluation.py): the call's options, which lm-eval hands no task; every task's settings "
        "checked before the model loads (lm-eval builds tasks after the model); the bootstrap stderrs added",
    ),
    Contact(
        "lm_eval.api.model.LM",
        "__init__",
        "lm_eval_longctx.harness.evaluation:lm_init",
        "call",
        "the model simple_evaluate builds from --model_args, which the tasks tokenize with and size to",
    ),
    Contact(
        "lm_eval.models.huggingface.HFLM",
        "longctx_scores",
        "lm_eval_longctx.harness.serving:longctx_scores",
        "task",
        "serves the request type with the engine (lm-eval dispatches with getattr(lm, request_type))",
    ),
    Contact(
        "lm_eval.loggers.evaluation_tracker.EvaluationTracker",
        "save_results_aggregated",
        "lm_eval_longctx.harness.saving:save_results_aggregated",
        "task",
        "pictures written beside the results file; a failed save removes its partial file and stops the run",
    ),
    Contact(
        "lm_eval.loggers.evaluation_tracker.EvaluationTracker",
        "save_results_samples",
        "lm_eval_longctx.harness.saving:save_results_samples",
        "task",
        "a failed save of the samples removes what it appended and stops the run",
    ),
)


def _owner(path: str):
    """The module or class at ``path`` (importing its module)."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, name = path.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


def _replacement(contact: Contact):
    module, name = contact.replacement.split(":")
    return getattr(importlib.import_module(module), name)


def install(stage: str = "task") -> None:
    """Set every contact of ``stage`` and the stages before it (``STAGES``; idempotent: a second call changes
    nothing). At the ``task`` stage, also register the named aggregations and the hf backend's model_args keys; that
    stage imports lm-eval's hf backend (and so torch)."""
    from .. import settings
    from . import aggregations

    upto = STAGES[: STAGES.index(stage) + 1]
    for contact in CONTACTS:
        if contact.stage in upto:
            discovery.set_contact(_owner(contact.owner), contact.attribute, _replacement(contact))
    if stage != "task":
        return
    aggregations.register_aggregations()
    hflm = _owner("lm_eval.models.huggingface.HFLM")
    keys = [
        k
        for k, p in inspect.signature(hflm.__init__).parameters.items()
        if k != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    settings.add_external_keys("hf model_args", [*keys, "model"])


def uninstall() -> None:
    """Put back every lm-eval callable a contact replaced, and remove what one added."""
    for contact in CONTACTS:
        discovery.remove_contact(_owner(contact.owner), contact.attribute)


def _defined_here(value) -> bool:
    # by the mark set_contact puts on a replacement, else by the file its code is in (a wrapper made with
    # functools.wraps carries the wrapped function's __module__)
    function = getattr(value, "__func__", value)
    if getattr(function, discovery._MARK, False):
        return True
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
