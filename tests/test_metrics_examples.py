"""The metrics layer's docstring examples run and give what they show, and every public metric function has one."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import pkgutil
import types

import pytest

import lm_eval_longctx.metrics

OPTIONFLAGS = doctest.NORMALIZE_WHITESPACE

MODULES = sorted(
    f"{lm_eval_longctx.metrics.__name__}.{info.name}" for info in pkgutil.iter_modules(lm_eval_longctx.metrics.__path__)
)


def public_functions(module: types.ModuleType) -> list[str]:
    """The names of the functions ``module`` defines (not imports) whose names do not start with "_"."""
    return sorted(
        name
        for name, obj in inspect.getmembers(module, inspect.isfunction)
        if obj.__module__ == module.__name__ and not name.startswith("_")
    )


def functions_without_example(module: types.ModuleType) -> list[str]:
    """The public functions of ``module`` whose docstring holds no ``>>>`` example."""
    examples = {
        test.name.rsplit(".", 1)[-1]: len(test.examples)
        for test in doctest.DocTestFinder().find(module)
        if test.name != module.__name__
    }
    return [name for name in public_functions(module) if not examples.get(name)]


def test_the_layer_has_its_metric_modules():
    names = {m.rsplit(".", 1)[-1] for m in MODULES}
    assert {"per_token", "gain_map"} <= names, MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_give_what_they_show(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=OPTIONFLAGS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {module_name} failed (above)"
    assert result.attempted >= len(public_functions(module)) > 0


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_function_has_an_example(module_name):
    module = importlib.import_module(module_name)
    assert functions_without_example(module) == [], f"{module_name}: add an Example: section with >>> lines"


PROBE_SOURCE = '''
def documented(x):
    """Twice x.

    Example:
        >>> documented(2)
        5
    """
    return 2 * x


def undocumented(x):
    """Twice x, with no example."""
    return 2 * x


def _private(x):
    return x
'''


def test_the_checks_catch_a_missing_example_and_a_wrong_one(tmp_path):
    path = tmp_path / "metric_examples_probe.py"
    path.write_text(PROBE_SOURCE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("metric_examples_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert public_functions(module) == ["documented", "undocumented"]
    assert functions_without_example(module) == ["undocumented"]
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS, verbose=False)
    for test in doctest.DocTestFinder().find(module):
        runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False) == (1, 1)  # (failed, attempted): 2 * 2 is not 5
