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

The same finder also waits for ``lm_eval.evaluator``: its ``simple_evaluate`` is handed to
``harness/evaluation.py`` (:func:`simple_evaluate`), which keeps the call's run state and checks our tasks before
the model loads. The finder removes itself once the task manager and the evaluator are both loaded. Both
replacements are two of the contacts listed in ``contacts.py``.

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
_EVALUATOR = "lm_eval.evaluator"  # simple_evaluate: handed to harness/evaluation.py
_EVALUATION = "lm_eval_longctx.harness.evaluation"
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
    from typing import cast

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
    return os.path.abspath(os.fspath(cast("os.PathLike[str]", root)))


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


# Set on every replacement this package puts on lm-eval (here and in contacts.py), with the original it replaced
# (None: lm-eval had none). Looked up by name, not by identity, so the checks hold after this module is reloaded.
_ORIGINAL = "_lm_eval_longctx_original"


def set_contact(owner, attribute: str, make) -> bool:
    """Put ``make(original)`` in place of ``owner.attribute`` (``original``: None when lm-eval has none), unless a
    replacement of ours is there already (idempotent) or ``make`` returns None (this lm-eval needs none). Return
    whether a replacement of ours is in place."""
    original = vars(owner).get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
    if getattr(original, _MARK, False):
        return True
    replacement = make(original)
    if replacement is None:
        return False
    setattr(replacement, _MARK, True)
    setattr(replacement, _ORIGINAL, original)
    setattr(owner, attribute, replacement)
    return True


def remove_contact(owner, attribute: str) -> None:
    """Put back what ``set_contact`` replaced (or remove what it added)."""
    current = vars(owner).get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
    if not getattr(current, _MARK, False):
        return
    original = getattr(current, _ORIGINAL, None)
    if original is None:
        delattr(owner, attribute)
    else:
        setattr(owner, attribute, original)


def task_manager_init(original):
    """``TaskManager.__init__`` with our task folder in ``include_path`` (see the module docstring), or None where
    this lm-eval needs no such change."""
    import functools
    import inspect

    if original is None:
        return None
    if reads_task_entry_points(sys.modules.get(original.__module__)):
        _log().debug("lm-eval reads the lm_eval.tasks entry point itself; discovery hook not applied")
        return None
    signature = inspect.signature(original)
    if "include_path" not in signature.parameters:
        # A future lm-eval with a different API (which likely reads entry points instead).
        _log().debug("TaskManager.__init__ has no include_path parameter; discovery hook not applied")
        return None
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

    return __init__


def simple_evaluate(original):
    """``lm_eval.simple_evaluate`` handed to ``harness.evaluation.evaluate`` (the run state, the checks before the
    model, the bootstrap stderrs) of the copy of this package that imports resolve to at call time."""
    import functools

    if original is None:
        return None

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        import importlib

        return importlib.import_module(_EVALUATION).evaluate(original, *args, **kwargs)

    return simple_evaluate


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
        set_contact(module.TaskManager, "__init__", task_manager_init)
    except Exception as err:
        _log().warning("lm_eval_longctx: could not patch lm_eval TaskManager (%s)", err)


def _on_evaluator_loaded(module) -> None:
    _remove_finders_when_done()
    try:
        set_contact(module, "simple_evaluate", simple_evaluate)
    except Exception as err:
        _log().warning("lm_eval_longctx: could not patch lm_eval.evaluator.simple_evaluate (%s)", err)


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
