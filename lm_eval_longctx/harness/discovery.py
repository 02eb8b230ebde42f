"""Let lm-eval 0.4.13 find the lm_eval_longctx task YAMLs without ``--include_path``.

lm-eval 0.4.13 discovers tasks only by scanning its own ``lm_eval/tasks/**.yaml`` and the
``include_path`` handed to ``TaskManager``. It never reads the ``lm_eval.tasks`` entry point
(upstream PR #4015, open, adds that; no release has it). To make the bare command
``lm_eval --tasks longppl_govreport --model hf ...`` and ``lm-eval ls tasks`` work after
``pip install``, the wheel ships two start-up files into site-packages (see ``setup.py``):

* ``lm_eval_longctx_discovery.pth``: its ``import`` line calls :func:`_startup_from_pth`. Pythons up to
  3.14 run it; 3.15 to 3.17 run it only when no matching ``.start`` file exists (PEP 829), later
  releases ignore ``import`` lines in ``.pth`` files.
* ``lm_eval_longctx_discovery.start`` (PEP 829, Python 3.15+): the entry point
  ``lm_eval_longctx.harness.discovery:_startup_from_pth``. Its presence makes 3.15+ skip the ``.pth``
  file's ``import`` line, so the hook runs once on every Python; older Pythons ignore ``.start`` files.
  (Running both would still be harmless: :func:`install` is idempotent.)

When lm-eval itself reads the ``lm_eval.tasks`` entry point (PR #4015's
``lm_eval.tasks.manager.discover_plugin_task_paths``), the hook steps aside and patches nothing.

Importing this module is cheap: it imports only ``sys`` and ``os``. It does not import lm_eval,
torch or transformers. It puts a ``sys.meta_path`` finder in front that does nothing until
``lm_eval.tasks.manager`` is imported. Right after that module has executed, the finder wraps
``TaskManager.__init__`` so that our task folder (:func:`task_configs_dir`) joins
``include_path``, and then removes itself from ``sys.meta_path``. If ``lm_eval.tasks.manager`` is
already imported when :func:`install` runs, the patch is applied at once.

The same finder also waits for ``lm_eval.evaluator``: :func:`wrap_simple_evaluate` records, while ``simple_evaluate`` runs, the model it evaluates
and the chat options it was given (``EVALUATIONS_ATTR``), which lm-eval hands no task; the tasks read them when
they are built. Before it lets ``simple_evaluate`` load the model (lm-eval 0.4.13 builds the tasks after the model),
:func:`check_before_model` asks each of our tasks the call will build to check its settings and the call's options.
The finder removes itself once the task manager and the evaluator are both loaded.

The ``.pth`` line calls :func:`_startup_from_pth`. After installing the finder, it removes
``lm_eval_longctx`` and this module from ``sys.modules``. Only the private alias
``_lm_eval_longctx_discovery_hook`` keeps them. Without this step, every interpreter in the
environment would pin the *installed* copy of the package before the script directory or
cwd is put on ``sys.path``. ``pytest`` in a newer checkout would then silently import an old
install. The patched ``__init__`` asks the copy that imports resolve to *at call time* for its
task folder (:func:`_current_task_configs_dir`), so the folder always matches the code that
``class: !function lm_eval_longctx...`` will import.

Precedence. lm-eval scans the built-in folder first and then each ``include_path`` entry in
order, and a later path overrides an earlier one (with a warning). We insert our folder
*before* the user's paths, which gives built-ins < lm_eval_longctx < user ``--include_path``.
A user can therefore shadow any of our tasks with their own YAML of the same name. This is the
order upstream PR #4015 uses for entry-point plugins (defaults < plugins < include_path).

Other rules:

* ``TaskManager(include_defaults=False)`` means "only the folders I list", so nothing is added.
* If the caller already lists our folder in ``include_path``, in any spelling that resolves to the
  same directory, it is not added again and the caller's position wins.
* Patching is idempotent. A second :func:`install`, or a reload of this module, neither wraps
  ``__init__`` twice nor adds a second finder.
* ``LM_EVAL_LONGCTX_DISABLE_HOOK=1`` (also ``true``/``yes``/``on``) turns the hook off. When set at
  start-up, nothing is installed. When set later in the process, the wrapper passes every call
  straight through.
* The hook must never break an interpreter or lm-eval. Every failure is logged (a warning at
  most), and lm-eval then runs unchanged.

The explicit route needs no hook and works everywhere, including ``python -S`` and installs that
skip the ``.pth``::

    lm_eval --include_path "$(python -c 'from lm_eval_longctx.harness.discovery import task_configs_dir as d; print(d())')" ...
"""

import os
import sys

__all__ = ["DISABLE_ENV", "hook_disabled", "install", "task_configs_dir"]

DISABLE_ENV = "LM_EVAL_LONGCTX_DISABLE_HOOK"
_TARGET = "lm_eval.tasks.manager"
_EVALUATOR = "lm_eval.evaluator"  # simple_evaluate: the evaluated model and the chat options (wrap_simple_evaluate)
# Marker attribute set on our finder and on the patched __init__. It is looked up by name and not
# by class identity, so the checks still work after this module has been reloaded.
_MARK = "_lm_eval_longctx_hook"
_CANONICAL = "lm_eval_longctx.harness.discovery"
_ALIAS = "_lm_eval_longctx_discovery_hook"  # where the .pth-loaded copy lives in sys.modules


def hook_disabled() -> bool:
    """True when ``LM_EVAL_LONGCTX_DISABLE_HOOK`` holds a true value (anything but '', 0, false, no, off)."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def task_configs_dir() -> str:
    """Absolute path of the folder that holds our task YAMLs: the package ``lm_eval_longctx.task_configs`` of an
    installed copy (the wheel maps the top-level ``task_configs/`` folder there), else a checkout's
    ``task_configs/`` beside ``lm_eval_longctx/``."""
    from importlib import resources

    try:
        root = resources.files("lm_eval_longctx.task_configs")
    except ModuleNotFoundError:
        checkout = os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "task_configs"
        )
        if os.path.isdir(checkout):
            return checkout
        raise
    # A plain directory gives a pathlib.Path. A zipped install gives a Traversable that is not
    # os.PathLike; lm-eval cannot glob inside it anyway, so the TypeError is allowed to surface.
    return os.path.abspath(os.fspath(root))


def _current_task_configs_dir() -> str:
    """``task_configs_dir()`` of the lm_eval_longctx that ``import`` resolves to now (see module docstring)."""
    try:
        import importlib

        find = importlib.import_module(_CANONICAL).task_configs_dir
    except Exception:
        find = task_configs_dir
    return find()


def _same_dir(a, b: str) -> bool:
    try:
        return os.path.normcase(os.path.realpath(os.fspath(a))) == os.path.normcase(os.path.realpath(b))
    except (TypeError, ValueError):
        return False


def _merge_include_path(include_path, ours: str):
    """Return the ``include_path`` to hand to lm-eval: our folder first, then the caller's entries."""
    # Same normalisation as TaskManager.__init__: a falsy value means none; a list/tuple is a list.
    if not include_path:
        user = []
    elif isinstance(include_path, (list, tuple)):
        user = list(include_path)
    else:
        user = [include_path]
    if any(_same_dir(p, ours) for p in user):
        return include_path  # already listed by the caller; keep their order
    return [ours, *user]


def _log():
    import logging

    return logging.getLogger("lm_eval_longctx.discovery")


def _patch_task_manager(manager_module) -> bool:
    """Wrap ``manager_module.TaskManager.__init__``. Return True if it is patched (now or before)."""
    task_manager = getattr(manager_module, "TaskManager", None)
    original = getattr(task_manager, "__init__", None) if task_manager is not None else None
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True  # already patched: idempotent
    if reads_task_entry_points(manager_module):
        _log().debug("lm-eval reads the lm_eval.tasks entry point itself; discovery hook not applied")
        return False

    import functools
    import inspect

    signature = inspect.signature(original)
    if "include_path" not in signature.parameters:
        # A future lm-eval with a different API (which likely reads entry points instead).
        _log().debug("TaskManager.__init__ has no include_path parameter; discovery hook not applied")
        return False
    defaults_param = signature.parameters.get("include_defaults")
    defaults_default = True if defaults_param is None else defaults_param.default

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if not hook_disabled():
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                bound = None  # bad call: let the original raise its own error
            if bound is not None and bound.arguments.get("include_defaults", defaults_default):
                try:
                    ours = _current_task_configs_dir()
                except Exception as err:  # never break lm-eval because of the hook
                    _log().warning("lm_eval_longctx: task folder not found, tasks not added (%s)", err)
                else:
                    bound.arguments["include_path"] = _merge_include_path(bound.arguments.get("include_path"), ours)
                    _log().debug("lm_eval_longctx: include_path -> %r", bound.arguments["include_path"])
                    return original(*bound.args, **bound.kwargs)
        return original(self, *args, **kwargs)

    setattr(__init__, _MARK, True)
    task_manager.__init__ = __init__
    _record_loads(task_manager)
    return True


# The TaskManager.load call in progress, as (call number, what it was asked to load), kept on lm-eval's class: the
# first of our tasks it builds checks what the whole call will need (tasks/preflight.py).
LOADING_ATTR = "_lm_eval_longctx_loading"


def _record_loads(task_manager) -> None:
    import functools
    import itertools

    original = getattr(task_manager, "load", None)
    if original is None or getattr(original, _MARK, False):
        return
    calls = itertools.count(1)

    @functools.wraps(original)
    def load(self, task_list, *args, **kwargs):
        previous = getattr(task_manager, LOADING_ATTR, None)
        setattr(task_manager, LOADING_ATTR, (next(calls), task_list))
        try:
            return original(self, task_list, *args, **kwargs)
        finally:
            setattr(task_manager, LOADING_ATTR, previous)

    setattr(load, _MARK, True)
    task_manager.load = load


def reads_task_entry_points(manager_module) -> bool:
    """Whether this lm-eval scans ``lm_eval.tasks`` entry points itself (upstream PR #4015), so that our
    folder would be added twice (every task then overrides itself, with a warning each)."""
    return callable(getattr(manager_module, "discover_plugin_task_paths", None)) or (
        getattr(manager_module, "TASKS_ENTRY_POINT_GROUP", None) == "lm_eval.tasks"
    )


def _remove_finders() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, _MARK, False)]


def _remove_finders_when_done() -> None:
    """One shot: nothing left on the import path once the task manager and the evaluator are both loaded (the CLI
    loads the manager first, the Python API the evaluator, which loads the manager while it runs)."""
    if _TARGET in sys.modules and _EVALUATOR in sys.modules:
        _remove_finders()


def _on_manager_loaded(module) -> None:
    _remove_finders_when_done()
    try:
        _patch_task_manager(module)
        watch_model_creation()
    except Exception as err:
        _log().warning("lm_eval_longctx: could not patch lm_eval TaskManager (%s)", err)


def _on_evaluator_loaded(module) -> None:
    _remove_finders_when_done()
    try:
        wrap_simple_evaluate(module)
        watch_model_creation()
    except Exception as err:
        _log().warning("lm_eval_longctx: could not patch lm_eval.evaluator.simple_evaluate (%s)", err)


# The lm_eval.simple_evaluate calls in progress, innermost last, kept on lm-eval's LM class (every copy of this
# module sees the same list): each a dict of what the call was given, "model" (a registry name or an LM object),
# "apply_chat_template", "system_instruction", "gen_kwargs", "limit" and "samples", and "lm", the LM it evaluates
# once known (the object passed in, or the one create_from_arg_string/obj built). The tasks read it when they are
# built (harness.glue.evaluated_model, prompt_options, ...): lm-eval hands a task none of these.
EVALUATIONS_ATTR = "_lm_eval_longctx_evaluations"
# the simple_evaluate parameters recorded (lm-eval 0.4.13's names)
RECORDED_ARGUMENTS = ("model", "apply_chat_template", "system_instruction", "gen_kwargs", "limit", "samples")


def _evaluations(lm_class) -> list:
    runs = getattr(lm_class, EVALUATIONS_ATTR, None)
    if runs is None:
        runs = []
        setattr(lm_class, EVALUATIONS_ATTR, runs)
    return runs


def wrap_simple_evaluate(evaluator_module) -> bool:
    """Wrap ``evaluator_module.simple_evaluate`` to check our tasks of each call before the model loads
    (``check_before_model``) and to record the call's model and prompt options while it runs (idempotent). Return
    False when this lm-eval's simple_evaluate lacks a parameter recorded."""
    original = getattr(evaluator_module, "simple_evaluate", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    import functools
    import inspect

    from lm_eval.api.model import LM

    signature = inspect.signature(original)
    if not set(RECORDED_ARGUMENTS) <= set(signature.parameters):
        _log().warning(
            "lm_eval_longctx: lm_eval.simple_evaluate has no parameter %s; the tasks will not know the evaluated "
            "model before its requests are served",
            sorted(set(RECORDED_ARGUMENTS) - set(signature.parameters)),
        )
        return False

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # its own error
        bound.apply_defaults()
        check_before_model(bound.arguments)
        run = {name: bound.arguments.get(name) for name in RECORDED_ARGUMENTS}
        run["lm"] = run["model"] if isinstance(run["model"], LM) else None
        runs = _evaluations(LM)
        runs.append(run)
        try:
            return original(*args, **kwargs)
        finally:
            for k in range(len(runs) - 1, -1, -1):
                if runs[k] is run:
                    del runs[k]
                    break

    setattr(simple_evaluate, _MARK, True)
    evaluator_module.simple_evaluate = simple_evaluate
    return True


# The class method of a task class of this package that checks, before lm-eval loads the model, what building the
# task checks without one (tasks/base.py): called with the task's config as lm-eval will build it and the arguments
# of simple_evaluate.
BEFORE_MODEL_CHECK = "check_before_model"
# a task YAML names its class as `class: !function lm_eval_longctx.suite.X`
_OUR_CLASSES = "lm_eval_longctx."


def check_before_model(arguments: dict) -> None:
    """When ``simple_evaluate`` starts, before it loads the model (lm-eval 0.4.13 builds the tasks after the model):
    each task of this package that the call will build checks its settings and the call's options
    (``BEFORE_MODEL_CHECK``), so that a wrong value stops the run before minutes of loading. The tasks are found
    as lm-eval will find them: by name, tag or group in the call's task manager (else in our task folder), each with
    its YAML and metadata merged as lm-eval merges them; a task's own error propagates."""
    try:
        configs, metadata, foreign = _our_task_configs(arguments)
    except Exception as err:  # never break lm-eval because of the hook: the tasks check again when built
        _log().debug("lm_eval_longctx: tasks not checked before the model (%s)", err)
        return
    for cls, config in configs:
        getattr(cls, BEFORE_MODEL_CHECK)(config, arguments)
    if configs and not foreign:  # no task of another suite in the run could take an unknown key
        from ..settings import refuse_unused_keys

        # lm-eval puts the --model_args into every task's metadata: they are the model's, not settings
        refuse_unused_keys({k: v for k, v in metadata.items() if k not in _model_args(arguments)})


def _model_args(arguments: dict) -> dict:
    """The call's ``model_args`` as a dict (lm-eval takes a "k=v,..." string or a dict)."""
    from lm_eval.utils import simple_parse_args_string

    model_args = arguments.get("model_args")
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    return model_args if isinstance(model_args, dict) else {}


def _our_task_configs(arguments: dict) -> tuple[list, dict, bool]:
    """(task class, config) of every task of this package among ``arguments["tasks"]``, the metadata they are built
    with, and whether the run also holds a task of another suite (or one this index does not know)."""
    from pathlib import Path

    from lm_eval.tasks._factory import TaskFactory
    from lm_eval.tasks._index import Kind, TaskIndex

    manager = arguments.get("task_manager")
    if manager is not None:
        index, metadata = manager.task_index, getattr(manager, "metadata", None) or {}
    else:  # simple_evaluate builds TaskManager(metadata=model_args | metadata), whose index holds our folder
        index = TaskIndex.build([Path(_current_task_configs_dir())])
        metadata = _model_args(arguments) | (arguments.get("metadata") or {})
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


# lm-eval builds the model before it loads the tasks; these attributes of its LM class say which
# backend was built last and with which --model_args keys, so that our tasks can refuse an
# unsupported backend when they are built (harness.note_evaluated_model). Kept on lm-eval's class,
# not here, so every copy of this module sees the same record.
LAST_MODEL_ATTR = "_lm_eval_longctx_last_model"
MODEL_ARGS_ATTR = "_lm_eval_longctx_model_args"


def watch_model_creation() -> None:
    """Wrap ``LM.__init__`` and ``LM.create_from_arg_string/obj`` to note the backend and its argument keys
    (idempotent; lm_eval.api.model imports no torch)."""
    from lm_eval.api.model import LM
    from lm_eval.utils import simple_parse_args_string

    if getattr(LM.__init__, _MARK, False):
        return
    original_init = LM.__init__

    def __init__(self, *args, **kwargs):
        setattr(LM, LAST_MODEL_ATTR, type(self))
        original_init(self, *args, **kwargs)

    setattr(__init__, _MARK, True)
    LM.__init__ = __init__
    for name in ("create_from_arg_string", "create_from_arg_obj"):
        original = getattr(LM, name).__func__

        def create(cls, arg, additional_config=None, _original=original):
            keys = simple_parse_args_string(arg) if isinstance(arg, str) else dict(arg or {})
            setattr(LM, MODEL_ARGS_ATTR, frozenset(keys))
            lm = _original(cls, arg, additional_config)
            runs = getattr(LM, EVALUATIONS_ATTR, None)
            if runs and runs[-1].get("lm") is None:  # the model the running simple_evaluate builds
                runs[-1]["lm"] = lm
            return lm

        setattr(LM, name, classmethod(create))


_ON_LOADED = {_TARGET: _on_manager_loaded, _EVALUATOR: _on_evaluator_loaded}


class _PatchingLoader:
    """Delegates to the real loader; patches the module after its body has run."""

    def __init__(self, loader, on_loaded=_on_manager_loaded):
        self._loader = loader
        self._on_loaded = on_loaded

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # Put the real loader back first so the module looks untouched (inspect, reload, pickling).
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._on_loaded(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ManagerImportHook:
    """``sys.meta_path`` finder that reacts only to ``lm_eval.tasks.manager`` and ``lm_eval.evaluator``."""

    _lm_eval_longctx_hook = True  # == _MARK

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _ON_LOADED:
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, _MARK, False):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, _ON_LOADED[fullname])
        return spec

    def invalidate_caches(self):
        pass


def install() -> bool:
    """Install the hook (idempotent). Return False when it is disabled by the environment."""
    if hook_disabled():
        return False
    # lm-eval was imported before us (e.g. this module was imported by hand): patch what is there now
    evaluator = sys.modules.get(_EVALUATOR)
    if evaluator is not None:
        _on_evaluator_loaded(evaluator)
    module = sys.modules.get(_TARGET)
    if module is not None:
        _on_manager_loaded(module)
    if not (_TARGET in sys.modules and _EVALUATOR in sys.modules) and not any(
        getattr(f, _MARK, False) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _ManagerImportHook())
    return True


def _startup_from_pth() -> None:
    """Entry point of the ``.pth`` line and of the ``.start`` file: install, then detach the package from
    ``sys.modules``."""
    install()
    me = sys.modules.get(__name__)
    if me is not None and __name__ == _CANONICAL:
        sys.modules.setdefault(_ALIAS, me)  # keeps the first hook visible (and referenced) under a private name
        parts = _CANONICAL.split(".")
        for depth in range(len(parts), 0, -1):  # this module, then lm_eval_longctx.harness, then lm_eval_longctx
            sys.modules.pop(".".join(parts[:depth]), None)


try:
    install()
except Exception:  # pragma: no cover - never let a .pth import break interpreter start-up
    pass
