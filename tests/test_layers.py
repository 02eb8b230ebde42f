"""The package's layers and what each may import, checked by parsing every module's imports (ast).

The layers are the folders of lm_eval_longctx/ (each __init__.py says what its layer may import). The rules:
* only harness/ and tasks/ import lm_eval (harness/ holds every contact, listed in contacts.py; tasks/ subclass its task class);
* each layer imports only the layers below it (LOWER);
* metrics/ imports no torch/transformers at all; report/, data/, the basics and cli.py import none at module
  level (the report tools and `lm-eval-longctx --help` stay light);
* the package root and harness/ __init__ files import nothing (the start-up hook imports them in every
  interpreter).
The checker is also run on a small made-up package with one violation of each kind: it must report each.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lm_eval_longctx"
NAME = "lm_eval_longctx"

BASICS = {"errors", "settings", "output_dirs", "records"}
# layer -> the layers it may import (besides itself and the basics)
LOWER = {
    "basics": set(),
    "engine": set(),
    "metrics": set(),
    "data": set(),
    "keytokens": {"engine", "metrics", "data"},
    "training": {"engine", "metrics", "data"},
    "harness": {"engine", "metrics", "keytokens", "data"},
    "report": {"metrics", "data"},
    "tasks": {"engine", "metrics", "keytokens", "data", "harness", "training"},
    "profiles": set(),
    "demo": {"engine", "metrics", "keytokens", "data", "harness", "report", "tasks", "training", "profiles"},
    # the audit reads runs through report/ and runs lm_eval through harness/: nothing from the demo
    "audit": {"engine", "metrics", "keytokens", "data", "harness", "report", "tasks", "training", "profiles"},
    "entry": {
        "engine",
        "metrics",
        "keytokens",
        "data",
        "harness",
        "report",
        "tasks",
        "training",
        "profiles",
        "demo",
        "audit",
    },
}
LM_EVAL_LAYERS = {"harness", "tasks"}
NO_HEAVY_AT_ALL = {"metrics"}
NO_HEAVY_AT_MODULE_LEVEL = {"report", "data", "basics", "metrics", "entry"}
HEAVY = {"torch", "transformers", "accelerate", "lm_eval"}
EMPTY_INITS = {"__init__.py", "harness/__init__.py"}


def layer_of(rel: str) -> str:
    """Layer of a module given by its path inside the package ('engine/scoring.py', 'cli.py')."""
    parts = rel.split("/")
    if len(parts) == 1:
        stem = parts[0][:-3]
        return "basics" if stem in BASICS else "entry"
    return parts[0]


def _imports(tree: ast.Module, module: str):
    """(absolute module imported, line, at module level?) of every import in a module's tree."""
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        level = id(node) in top_level
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno, level
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target in (NAME, f"{NAME}.tasks", f"{NAME}.report", f"{NAME}.data") or (
                node.module is None and node.level
            ):
                # `from . import x` / `from lm_eval_longctx import x`: x may be a submodule
                for a in node.names:
                    yield f"{target}.{a.name}", node.lineno, level
            else:
                yield target, node.lineno, level


def _target_layer(target: str) -> str | None:
    rest = target[len(NAME) + 1 :]
    if not rest:
        return "entry"
    first = rest.split(".")[0]
    if first in BASICS:
        return "basics"
    if first in ("cli", "__main__", "suite", "precompute"):
        return "entry"
    return first


def violations(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        module = ".".join([NAME, *rel[:-3].split("/")])
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")] + ".__init__"
        layer = layer_of(rel)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if rel in EMPTY_INITS and any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
            found.append(f"{rel}: imports something (the start-up hook imports this file in every interpreter)")
        for target, line, module_level in _imports(tree, module):
            top = target.split(".")[0]
            where = f"{rel}:{line}"
            if top == "lm_eval" and layer not in LM_EVAL_LAYERS:
                found.append(f"{where}: imports lm_eval outside harness/ and tasks/")
            if top in HEAVY and layer in NO_HEAVY_AT_ALL:
                found.append(f"{where}: {layer}/ imports {top}")
            elif top in HEAVY and module_level and layer in NO_HEAVY_AT_MODULE_LEVEL:
                found.append(f"{where}: imports {top} at module level")
            if top == NAME:
                other = _target_layer(target)
                if other in (layer, "basics") or other is None:
                    continue
                if other not in LOWER[layer]:
                    found.append(f"{where}: {layer} imports {target} ({other} is not below {layer})")
    return found


def test_every_layer_follows_its_import_rules():
    assert violations(PACKAGE) == []


def test_every_layer_folder_is_a_package_and_documents_its_rules():
    for folder in sorted(p for p in PACKAGE.rglob("*") if p.is_dir() and any(p.glob("*.py"))):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder} holds modules but no __init__.py (setuptools would not ship it)"
        if folder != PACKAGE:
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc, f"{init}: say what the layer is and what it may import"
            if folder.parent == PACKAGE and folder.name != "tasks":
                assert "import" in doc, f"{init}: say what the layer may import"
    assert set(LOWER) >= {layer_of(p.relative_to(PACKAGE).as_posix()) for p in PACKAGE.rglob("*.py")}


@pytest.mark.parametrize(
    "rel, source, expected",
    [
        ("metrics/bad.py", "import torch\n", "metrics/ imports torch"),
        ("metrics/bad.py", "def f():\n    import torch\n", "metrics/ imports torch"),
        ("report/bad.py", "import torch\n", "imports torch at module level"),
        (
            "engine/bad.py",
            "def f():\n    from lm_eval.api.model import LM\n",
            "imports lm_eval outside harness/ and tasks/",
        ),
        ("report/bad.py", "import lm_eval\n", "imports lm_eval outside harness/ and tasks/"),
        ("data/bad.py", "from ..engine import scoring\n", "data imports lm_eval_longctx.engine"),
        ("engine/bad.py", "from lm_eval_longctx import metrics\n", "engine imports lm_eval_longctx.metrics"),
        ("report/bad.py", "from ..tasks import longppl\n", "report imports lm_eval_longctx.tasks.longppl"),
        ("harness/__init__.py", "import os\n", "harness/__init__.py: imports something"),
        ("cli.py", "import transformers\n", "imports transformers at module level"),
    ],
)
def test_the_checker_reports_each_kind_of_violation(tmp_path, rel, source, expected):
    pkg = tmp_path / NAME
    for sub in ("", "engine", "metrics", "report", "data", "harness", "tasks"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text('"""x"""\n')
    (pkg / "report" / "fine.py").write_text("import numpy\nfrom ..metrics import per_token\nfrom ..data import files\n")
    (pkg / "tasks" / "fine.py").write_text(
        "from lm_eval.api.task import ConfigurableTask\nfrom ..harness import serving\n"
    )
    assert violations(pkg) == []
    (pkg / rel).write_text(source)
    found = violations(pkg)
    assert any(expected in f for f in found), found


def _layers_above(layer: str) -> set[str]:
    """Every layer that may import ``layer`` (directly or not): importing one of them from ``layer`` is a back-arrow."""
    above = {other for other, lower in LOWER.items() if layer in lower}
    for other in list(above):
        above |= _layers_above(other)
    return above


BACK_ARROWS = sorted(
    (low, high) for low in LOWER for high in _layers_above(low) if low not in ("basics", "entry") and high != "entry"
)


def test_the_layers_form_no_cycle():
    """No layer may import a layer that may import it: the graph only points down."""
    for layer, lower in LOWER.items():
        assert layer not in _layers_above(layer), layer
        assert not (lower & _layers_above(layer)), (layer, lower & _layers_above(layer))


@pytest.mark.parametrize("low, high", BACK_ARROWS)
def test_the_checker_reports_every_back_arrow(tmp_path, low, high):
    """A module of each layer importing any layer above it is reported (the report -> tasks arrow included)."""
    pkg = tmp_path / NAME
    for sub in {"", low, high}:
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text('"""x"""\n')
    (pkg / high / "up.py").write_text("")
    (pkg / low / "bad.py").write_text(f"def f():\n    from ..{high} import up\n")
    found = violations(pkg)
    assert any(f"{low} imports lm_eval_longctx.{high}" in f and f"({high} is not below {low})" in f for f in found), (
        found
    )


# ------------------------------------------------------------------ tasks own what is theirs (no shared module names one)


def _module_name(rel: str) -> str:
    """The dotted name of a module given by its path inside the package ('tasks/base.py', 'harness/__init__.py')."""
    parts = rel[:-3].split("/")
    return ".".join([NAME, *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _task_classes(package: Path) -> dict[str, set[str]]:
    """module -> the suite names its task classes declare (``SUITE_TASK_NAME`` and ``GROUP`` string constants)."""
    found: dict[str, set[str]] = {}
    for path in sorted((package / "tasks").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id in ("SUITE_TASK_NAME", "GROUP") for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and stmt.value.value
                ):
                    found.setdefault(_module_name(path.relative_to(package).as_posix()), set()).add(stmt.value.value)
    return found


def _strings_compared(tree: ast.Module):
    """(string constant, line) of every string that takes part in a comparison (==, !=, in, not in, ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    yield sub.value, node.lineno


def task_name_violations(package: Path) -> list[str]:
    """Imports of a task module by a module outside tasks/, and comparisons with a task's name outside the module
    whose class owns that name."""
    owners = _task_classes(package)
    names = {name: module for module, owned in owners.items() for name in owned}
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        module = _module_name(rel)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not rel.startswith("tasks/"):
            dotted = f"{NAME}.{rel[:-3].replace('/', '.')}"
            for target, line, _ in _imports(tree, dotted):
                if any(target == m or target.startswith(f"{m}.") for m in owners):
                    found.append(f"{rel}:{line}: imports the task module {target}")
        for value, line in _strings_compared(tree):
            if value in names and names[value] != module:
                found.append(f"{rel}:{line}: compares a string to the task name {value!r} (owned by {names[value]})")
    return found


def test_no_module_outside_the_owning_task_imports_or_names_a_task():
    assert task_name_violations(PACKAGE) == []


@pytest.mark.parametrize(
    "rel, source, expected",
    [
        ("suite.py", "from .tasks.longppl import LongPPLTask\n", "suite.py:1: imports the task module"),
        ("report/bad.py", "def f():\n    from ..tasks import longppl\n", "imports the task module"),
        ("report/bad.py", "def f(t):\n    return t == 'longppl_govreport'\n", "compares a string to the task name"),
        ("tasks/base.py", "def f(t):\n    return t in ('x', 'longppl_govreport')\n", "(owned by"),
    ],
)
def test_the_task_name_checker_reports_each_kind(tmp_path, rel, source, expected):
    pkg = tmp_path / NAME
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "report").mkdir()
    (pkg / "tasks" / "longppl.py").write_text(
        "class LongPPLTask:\n    SUITE_TASK_NAME = 'longppl_govreport'\n\n    def f(self, t):\n"
        "        return t == 'longppl_govreport'\n"
    )
    assert task_name_violations(pkg) == []
    (pkg / rel).write_text(source)
    assert any(expected in f for f in task_name_violations(pkg)), task_name_violations(pkg)


# ------------------------------------------------------------------ no import cycle, no peeking at the caller


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its code (module level or inside a function); a
    ``from X import name`` imports X's submodule ``name`` when there is one, else X."""
    modules = {_module_name(p.relative_to(package).as_posix()): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        dotted = module + (".__init__" if path.name == "__init__.py" else "")
        for target, _, _ in _imports(ast.parse(path.read_text(encoding="utf-8")), dotted):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds an import cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_package_has_no_import_cycle():
    assert import_cycles(import_graph(PACKAGE)) == []


def test_the_cycle_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / NAME
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "tasks" / "base.py").write_text("from . import preflight\n")
    (pkg / "tasks" / "other.py").write_text("from .base import X\n")
    assert import_cycles(import_graph(pkg)) == []
    (pkg / "tasks" / "preflight.py").write_text("def f():\n    from .other import Y\n")
    assert import_cycles(import_graph(pkg)) == [
        [f"{NAME}.tasks.base", f"{NAME}.tasks.other", f"{NAME}.tasks.preflight"]
    ]


# reading the caller's frames breaks silently when the caller renames a local: the harness is told instead
FRAME_PEEKING = {"_getframe", "f_locals", "f_back", "currentframe", "stack"}


def frame_peeking(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else None
            if name in FRAME_PEEKING and not (name == "stack" and ast.unparse(node.value) != "inspect"):
                found.append(f"{path.relative_to(package).as_posix()}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_package_reads_no_caller_frames(tmp_path):
    assert frame_peeking(PACKAGE) == []
    (tmp_path / "bad.py").write_text("import sys\n\ndef f():\n    return sys._getframe(1).f_locals['lm']\n")
    assert len(frame_peeking(tmp_path)) == 2


# ------------------------------------------------------------------ the report layer reads files, it names no task

SUITE_TASK_NAMES = {
    "longppl_govreport",
    "forgetting_curve",
    "retrieval_gain",
    "retrieval_gain_map",
    "longeval_lines",
    "longeval_lines_acc",
    "longeval_lines_ppl",
}


def task_name_literals(folder: Path) -> list[str]:
    """Every string literal equal to one of the suite's task names in the modules under ``folder``, docstrings
    excepted (comments are not in the syntax tree)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in SUITE_TASK_NAMES
                and id(node) not in docstrings
            ):
                found.append(f"{path.relative_to(folder).as_posix()}:{node.lineno}: {node.value!r}")
    return found


def test_no_report_module_holds_a_task_name():
    """The report layer takes its sections, headlines, settings, pictures and directions from the results files
    (longctx_report, higher_is_better) and its viewer's choice from the export's manifest: no task is named."""
    assert task_name_literals(PACKAGE / "report") == []


def test_the_task_name_literal_checker_reports_each_kind(tmp_path):
    (tmp_path / "fine.py").write_text(
        '"""forgetting_curve"""\n# retrieval_gain\ndef f():\n    """longeval_lines"""\n    return "retrieval gain"\n'
    )
    assert task_name_literals(tmp_path) == []
    (tmp_path / "bad.py").write_text(
        "SECTIONS = {'longppl_govreport': 1}\nx = ('longeval_lines_acc',)\n"
        "def f(key):\n    return key == 'forgetting_curve'\n"
    )
    assert task_name_literals(tmp_path) == [
        "bad.py:1: 'longppl_govreport'",
        "bad.py:2: 'longeval_lines_acc'",
        "bad.py:4: 'forgetting_curve'",
    ]


# ------------------------------------------------------------------ a plan's strategy is compared only by its plans


def strategy_comparisons(package: Path) -> list[str]:
    """Comparisons of anything's ``.strategy`` attribute outside engine/plans.py, which owns the plan classes."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "engine/plans.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                isinstance(sub, ast.Attribute) and sub.attr == "strategy" for sub in ast.walk(node)
            ):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_no_module_outside_the_plans_compares_a_strategy():
    assert strategy_comparisons(PACKAGE) == []


def test_the_strategy_checker_finds_a_comparison(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "plans.py").write_text("def f(p):\n    return p.strategy == 'full'\n")
    (tmp_path / "passes.py").write_text("def g(plan):\n    x = 1\n    return plan.strategy != 'chunked'\n")
    assert strategy_comparisons(tmp_path) == ["passes.py:3"]
