"""The layout of the tests themselves, checked by parsing the tests tree (ast), as tests/test_layers.py checks the
package's imports.

The rules:
* a module's tests live at its mirrored path: ``tests/<layer>/test_<module>.py`` for
  ``lm_eval_longctx/<layer>/<module>.py``, ``tests/test_<module>.py`` for a module at the top of the package; whole
  runs spanning several tasks, property suites and the support matrix live under ``tests/integration/``, the tests
  of ``scripts/*.py`` under ``tests/scripts/``, and the few files that check the package as a whole are named in
  ALLOWED with their reason;
* what tests share lives in support modules (``tests/tiny.py``, ``tests/harness_utils.py``, ...) and fixtures in
  ``conftest.py``: no module of the tests imports a test module;
* no import alias renames a module or a name (CONTRIBUTING.md), but the community's own (ALIASES);
* every folder that holds test modules is a package (its ``__init__.py``), so that two test modules of one name in
  two folders do not collide.
The checkers are also run on a small made-up tree with one violation of each kind: each must be reported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "lm_eval_longctx"

# folder of tests/ -> what its test modules hold (they mirror no single module)
FREE_FOLDERS = {
    "integration": "whole runs through lm_eval spanning several tasks, property suites, the support matrix",
    "scripts": "the tests of scripts/*.py",
}
# test module at a path that mirrors no module -> why it is there
ALLOWED = {
    "test_layers.py": "checks every module of the package: its layers, imports and task names",
    "test_metrics_examples.py": "runs the docstring examples of every module of metrics/ (CONTRIBUTING.md names it)",
    "test_test_layout.py": "checks the layout of the tests themselves",
    "test_release.py": "checks the release: pyproject's version, CHANGELOG.md's newest release, what pip installed",
}
# the community's aliases, which the package uses too: module -> its alias
ALIASES = {"numpy": "np", "torch.nn.functional": "F"}


def misplaced(tests: Path, package: Path) -> list[str]:
    """Test modules at a path that mirrors no module of ``package``, outside FREE_FOLDERS and ALLOWED."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if rel.parts[0] in FREE_FOLDERS or rel.as_posix() in ALLOWED:
            continue
        module = package.joinpath(*rel.parts[:-1], rel.name[len("test_") :])
        if not module.is_file():
            found.append(
                f"{tests.name}/{rel.as_posix()}: mirrors no module ({package.name}/"
                f"{module.relative_to(package).as_posix()} does not exist); move its tests beside the module each "
                f"tests, or to {tests.name}/integration/ or {tests.name}/scripts/"
            )
    return found


def _imports(tree: ast.Module, module: str, root: Path):
    """(dotted module imported, line) of every import in a module's tree, relative imports resolved against
    ``module`` (``tests.report.test_gate``, ``tests.report.__init__``); ``from package import x`` imports the module
    ``package.x`` when ``package`` is a folder under ``root``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".")[: -node.level] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            yield target, node.lineno
            if root.joinpath(*target.split(".")).is_dir():
                for a in node.names:
                    yield f"{target}.{a.name}", node.lineno


def imports_of_test_modules(tests: Path) -> list[str]:
    """Imports of a test module (a module of ``tests`` whose name starts with ``test_``), anywhere in the tests."""
    root = tests.parent
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
        for target, line in _imports(ast.parse(path.read_text(encoding="utf-8")), module, root):
            parts = target.split(".")
            if parts[0] == tests.name and any(p.startswith("test_") for p in parts[1:]):
                found.append(
                    f"{rel.as_posix()}:{line}: imports the test module {target}; move what it shares to a support "
                    "module (tests/tiny.py, tests/harness_utils.py, tests/report_fixtures.py, ...) or conftest.py"
                )
    return found


def renaming_aliases(tests: Path) -> list[str]:
    """``import a.b as c`` / ``from a import b as c`` where ``c`` is not ``b``, but the aliases of ALIASES."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for a in node.names:
                if a.asname is None or a.asname == a.name.rpartition(".")[2]:
                    continue
                if isinstance(node, ast.Import):
                    full = a.name
                else:
                    full = "." * node.level + ".".join(filter(None, [node.module, a.name]))
                if ALIASES.get(full) != a.asname:
                    found.append(f"{rel}:{node.lineno}: imports {full} as {a.asname}; use its own name")
    return found


def folders_without_init(tests: Path) -> list[str]:
    """Folders holding test modules without an ``__init__.py``."""
    folders = sorted({p.parent for p in tests.rglob("test_*.py")})
    return [
        f"{folder.relative_to(tests.parent).as_posix()}: holds test modules but no __init__.py"
        for folder in folders
        if not (folder / "__init__.py").is_file()
    ]


def test_every_test_module_sits_at_the_mirrored_path_of_a_module():
    assert misplaced(TESTS, PACKAGE) == []


def test_no_module_of_the_tests_imports_a_test_module():
    assert imports_of_test_modules(TESTS) == []


def test_no_import_alias_renames_a_module_or_a_name():
    assert renaming_aliases(TESTS) == []


def test_every_folder_of_test_modules_is_a_package():
    assert folders_without_init(TESTS) == []


def test_the_allowed_files_exist_and_mirror_no_module():
    """A stale entry (the file moved, or a module of its name appeared) is taken out of ALLOWED."""
    for rel in ALLOWED:
        assert (TESTS / rel).is_file(), rel
        assert not (PACKAGE / rel[len("test_") :]).is_file(), rel
    assert {p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} >= set(FREE_FOLDERS)


def _made_up_tree(root: Path) -> Path:
    """A package with two modules and a tests tree that follows every rule; returns its tests folder."""
    for rel in ("lm_eval_longctx/__init__.py", "lm_eval_longctx/cli.py", "lm_eval_longctx/engine/__init__.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "lm_eval_longctx/engine/scoring.py").write_text("")
    files = {
        "__init__.py": "",
        "conftest.py": "from tests import tiny\n",
        "tiny.py": "import numpy as np\n",
        "test_layers.py": "",
        "test_cli.py": "from lm_eval_longctx import cli\nfrom tests.tiny import np\n",
        "engine/__init__.py": "",
        "engine/test_scoring.py": (
            "import torch.nn.functional as F\nimport lm_eval_longctx.engine.scoring as scoring\n"
            "from lm_eval_longctx.engine import scoring\nfrom tests import tiny\nfrom .. import tiny\n"
        ),
        "integration/__init__.py": "",
        "integration/test_whole_run.py": "from tests.tiny import np\n",
        "scripts/__init__.py": "",
        "scripts/test_bench.py": "",
    }
    for rel, text in files.items():
        (root / "tests" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "tests" / rel).write_text(text)
    return root / "tests"


CHECKERS = {
    "misplaced": lambda tests: misplaced(tests, tests.parent / "lm_eval_longctx"),
    "imports": imports_of_test_modules,
    "aliases": renaming_aliases,
    "packages": folders_without_init,
}


VIOLATIONS = [
    ("engine/test_plans.py", "", "misplaced", "tests/engine/test_plans.py: mirrors no module"),
    ("test_engine.py", "", "misplaced", "tests/test_engine.py: mirrors no module (lm_eval_longctx/engine.py"),
    ("report/test_gate.py", "", "packages", "tests/report: holds test modules but no __init__.py"),
    ("engine/test_scoring.py", "from tests.test_cli import x\n", "imports", "tests.test_cli;"),
    ("tiny.py", "def f():\n    from tests.integration import test_whole_run\n", "imports", "test_whole_run;"),
    ("conftest.py", "import tests.engine.test_scoring\n", "imports", ":1: imports the test module tests.engine"),
    ("engine/test_scoring.py", "from ..test_cli import x\n", "imports", "imports the test module tests.test_cli"),
    ("engine/test_scoring.py", "from . import test_other\n", "imports", "the test module tests.engine.test_other"),
    (
        "engine/test_scoring.py",
        "from lm_eval_longctx.engine import scoring as engine\n",
        "aliases",
        "imports lm_eval_longctx.engine.scoring as engine",
    ),
    ("test_cli.py", "def f():\n    import lm_eval.evaluator_utils as eu\n", "aliases", "evaluator_utils as eu"),
    ("tiny.py", "import torch.nn.functional as nnf\n", "aliases", "imports torch.nn.functional as nnf"),
    ("tiny.py", "import numpy as numpy_\n", "aliases", "imports numpy as numpy_"),
]


@pytest.mark.parametrize(
    "rel, source, checker, expected", VIOLATIONS, ids=[f"{checker}-{rel}" for rel, _, checker, _ in VIOLATIONS]
)
def test_the_checkers_report_each_kind_of_violation(tmp_path, rel, source, checker, expected):
    tests = _made_up_tree(tmp_path)
    assert {name: check(tests) for name, check in CHECKERS.items()} == {name: [] for name in CHECKERS}
    (tests / rel).parent.mkdir(parents=True, exist_ok=True)
    (tests / rel).write_text(source)
    found = CHECKERS[checker](tests)
    assert any(expected in f for f in found), found
