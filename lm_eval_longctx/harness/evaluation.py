"""A ``simple_evaluate`` call as the tasks see it: what lm-eval hands no task, read from the run state.

lm-eval 0.4.13 builds the model, then the tasks, then serves their requests and aggregates, all inside
``simple_evaluate``, and hands a task none of the call's options (the model, the chat options, ``--limit``,
``--gen_kwargs``). The start-up hook's wrapper of ``simple_evaluate`` (``discovery.py``) hands each call to
:func:`evaluate`, which checks our tasks before the model loads, keeps the call's ``Evaluation``
(``run_state.py``) current while it runs and adds the bootstrap stderrs once lm-eval has aggregated. Outside a call
(tasks built by hand, ``lm_eval.evaluator.evaluate`` called directly) the tasks see no model and no options.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import math

from .. import errors, settings
from .evaluated_model import EvaluatedModel, check_model_class, check_vocabulary
from .run_state import Evaluation, current, in_progress, model_args_of, running

log = logging.getLogger("lm_eval_longctx")

# The class method of a task class of this package that checks, before lm-eval loads the model, what building the
# task checks without one (tasks/base.py): called with the task's config as lm-eval will build it and the arguments
# of simple_evaluate.
BEFORE_MODEL_CHECK = "check_before_model"
# a task YAML names its class as `class: !function lm_eval_longctx.suite.X`
_OUR_CLASSES = "lm_eval_longctx."
# the simple_evaluate parameters read (lm-eval 0.4.13's names)
READ_ARGUMENTS = (
    "model",
    "model_args",
    "tasks",
    "apply_chat_template",
    "system_instruction",
    "gen_kwargs",
    "limit",
    "samples",
    "bootstrap_iters",
)


def evaluate(original, *args, **kwargs):
    """``lm_eval.simple_evaluate`` (``original``) with our tasks checked before the model loads, the call's
    ``Evaluation`` current while it runs, and the bootstrap stderrs added to its results."""
    from . import aggregations, contacts, notices

    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return original(*args, **kwargs)  # its own error
    bound.apply_defaults()
    contacts.install("call")  # the model lm-eval builds is noted (LM.__init__); our tasks set the rest when checked
    run = Evaluation(arguments=dict(bound.arguments))
    if isinstance(run.arguments.get("model"), _lm_class()):
        run.lm = run.arguments["model"]
    with (
        running(run),
        errors.new_evaluation(),
        errors.one_line_under_lm_eval_cli(),
        settings.model_args_given(run.model_args()),
        notices.expected_notices(),
    ):
        check_before_model(run.arguments)
        results = original(*args, **kwargs)
        aggregations.add_bootstrap_stderrs(results, run.aggregated, run.arguments.get("bootstrap_iters"))
    return results


def _lm_class():
    from lm_eval.api.model import LM

    return LM


def note_model_built(lm) -> None:
    """An LM is being built: the first one built while a call runs is the model it evaluates."""
    run = in_progress()
    if run is not None and run.lm is None:
        run.lm = lm


def lm_init(original):
    """``LM.__init__``: ``original``, after noting the model being built (``note_model_built``)."""

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        # the copy of this module that imports resolve to now (the start-up hook may hold an older one)
        importlib.import_module(__name__).note_model_built(self)
        original(self, *args, **kwargs)

    return __init__


# ------------------------------------------------------------------ before the model loads


def check_before_model(arguments: dict) -> None:
    """When ``simple_evaluate`` starts, before it loads the model (lm-eval 0.4.13 builds the tasks after the model):
    each task of this package that the call will build checks its settings and the call's options
    (``BEFORE_MODEL_CHECK``), so that a wrong value stops the run before minutes of loading. The tasks are found
    as lm-eval will find them: by name, tag or group in the call's task manager (else in our task folder), each with
    its YAML and metadata merged as lm-eval merges them; a task's own error propagates."""
    try:
        configs, metadata, foreign = _our_task_configs(arguments)
    except Exception as err:  # never break lm-eval because of the hook: the tasks check again when built
        log.debug("lm_eval_longctx: tasks not checked before the model (%s)", err)
        return
    for cls, config in configs:
        getattr(cls, BEFORE_MODEL_CHECK)(config, arguments)
    if configs and not foreign:  # no task of another suite in the run could take an unknown key
        # lm-eval puts the --model_args into every task's metadata: they are the model's, not settings
        settings.refuse_unused_keys({k: v for k, v in metadata.items() if k not in model_args_of(arguments)})


def _our_task_configs(arguments: dict) -> tuple[list, dict, bool]:
    """(task class, config) of every task of this package among ``arguments["tasks"]``, the metadata they are built
    with, and whether the run also holds a task of another suite (or one this index does not know)."""
    from pathlib import Path

    from lm_eval.tasks._factory import TaskFactory
    from lm_eval.tasks._index import Kind, TaskIndex

    from .discovery import task_configs_dir

    manager = arguments.get("task_manager")
    if manager is not None:
        index, metadata = manager.task_index, getattr(manager, "metadata", None) or {}
    else:  # simple_evaluate builds TaskManager(metadata=model_args | metadata), whose index holds our folder
        index = TaskIndex.build([Path(task_configs_dir())])
        metadata = model_args_of(arguments) | (arguments.get("metadata") or {})
    factory = TaskFactory(meta=metadata)
    found: dict[str, tuple] = {}
    foreign = []

    def visit(spec, overrides: dict, depth: int) -> None:
        name = spec.get("task") if isinstance(spec, dict) else spec
        entry = index.get(name) if isinstance(name, str) else None
        if entry is None:
            foreign.append(name)
        if entry is None or depth > 10 or name in found:
            return
        assert isinstance(name, str)  # entry comes from index.get(name) only for a str
        if isinstance(spec, dict):
            overrides = {**overrides, **{k: v for k, v in spec.items() if k != "task"}}
        if entry.kind is Kind.TAG:
            for member in sorted(entry.tags):
                visit(member, overrides, depth + 1)
        elif entry.kind is Kind.GROUP:
            members = (entry.cfg or {}).get("task")
            for member in members if isinstance(members, list) else [members]:
                visit(member, overrides, depth + 1)
        elif entry.kind is Kind.PY_TASK and str((entry.cfg or {}).get("class", "")).rsplit("/", 1)[-1].startswith(
            _OUR_CLASSES
        ):
            config = factory._load_full_config(entry, overrides or None)
            if hasattr(config.get("class"), BEFORE_MODEL_CHECK):
                found[name] = (config["class"], config)
        else:
            foreign.append(name)

    requested = arguments.get("tasks") or []
    for spec in requested if isinstance(requested, list) else [requested]:
        visit(spec, {}, 0)
    return list(found.values()), metadata, bool(foreign)


# ------------------------------------------------------------------ what a task reads of the call


def evaluated_model() -> EvaluatedModel | None:
    """The model of the running ``simple_evaluate`` call, or None outside one (tasks built by hand, for
    ``lm_eval.evaluator.evaluate``, or with the start-up hook off)."""
    return current().evaluated_model()


def prompt_options() -> tuple[bool, str | None] | None:
    """``(apply_chat_template, system_instruction)`` of the running ``simple_evaluate`` call, or None outside one.
    Read when a task is built, because simple_evaluate looks the chat template up (and fails on a model without
    one) after it has built the tasks but before it hands them these options."""
    run = in_progress()
    if run is None:
        return None
    return bool(run.arguments.get("apply_chat_template")), run.arguments.get("system_instruction")


def documents_evaluated(n_docs: int, task_name: str | None = None) -> list[int]:
    """The indices of the ``n_docs`` documents of a task that the running ``simple_evaluate`` call evaluates: the
    first ``limit`` (a count, or a fraction below 1, as lm-eval reads it), the ``samples`` listed for the task, or all
    of them (also outside a call)."""
    arguments = current().arguments
    samples = arguments.get("samples")
    if isinstance(samples, dict) and task_name in samples:
        return sorted({int(i) for i in samples[task_name] if 0 <= int(i) < n_docs})
    limit = arguments.get("limit")
    if limit is None:
        return list(range(n_docs))
    count = int(math.ceil(n_docs * float(limit))) if float(limit) < 1.0 else int(limit)
    return list(range(min(count, n_docs)))


def generation_options() -> dict | None:
    """The ``gen_kwargs`` of the running ``simple_evaluate`` call (--gen_kwargs) as a dict, or None (none given, or
    outside one): simple_evaluate applies them to the generating tasks after it has built them."""
    from lm_eval.utils import simple_parse_args_string

    given = current().arguments.get("gen_kwargs")
    if isinstance(given, str):
        given = simple_parse_args_string(given)
    return dict(given) if given else None


def note_evaluated_model(task_name: str, scores_per_token: bool = True) -> EvaluatedModel | None:
    """When a task is built: refuse a backend that cannot serve our requests (``scores_per_token``: the task's
    requests run the model, so a backend whose scoring the engine would bypass is refused too) or a model whose
    embedding is smaller than its tokenizer, and return the evaluated model when it is known."""
    model = evaluated_model()
    if model is not None:
        check_model_class(type(model.lm), task_name, scores_per_token, model.python_api)
        check_vocabulary(model.lm, task_name)
    return model


def scoring_of(task_name: str) -> dict | None:
    """How ``task_name``'s requests were scored in the running call (strategy per pass, dtype, model type)."""
    return current().scoring.get(task_name)


def tokenizer_of(task_name: str) -> dict | None:
    """The identity of the tokenizer that served ``task_name``'s requests in the running call, or None."""
    return current().served_tokenizer.get(task_name)


class LmEvalRunError(RuntimeError):
    """lm-eval's command line, run in this process (``run_cli``), exited with an error or saved no results."""


def run_cli(argv: list[str]):
    """Run lm-eval's command line in this process with ``argv`` (which names an ``--output_path`` folder); return
    the results JSON it saved there (a ``pathlib.Path``)."""
    import sys
    from pathlib import Path

    folder = Path(argv[argv.index("--output_path") + 1])
    before = set(folder.rglob("results_*.json")) if folder.is_dir() else set()
    old_argv = sys.argv
    sys.argv = ["lm_eval", *argv]
    try:
        cli_evaluate()
    except SystemExit as e:  # argparse errors exit; never let them end the caller's interpreter
        if e.code not in (None, 0):
            raise LmEvalRunError(f"lm_eval exited with status {e.code} (see the messages above)") from e
    finally:
        sys.argv = old_argv
    saved = sorted(set(folder.rglob("results_*.json")) - before, key=lambda path: path.stat().st_mtime)
    if not saved:
        raise LmEvalRunError("lm_eval finished without saving a results JSON (see the messages above)")
    return saved[-1]


def cli_evaluate():
    """lm-eval's command-line entry point, what the ``lm_eval`` console script calls (reads ``sys.argv``)."""
    import lm_eval.__main__

    return lm_eval.__main__.cli_evaluate()
