"""The package's layers and what each may import, checked by parsing every module's imports (ast).

The layers are the folders of lm_eval_longctx/ (each __init__.py says what its layer may import). The rules:
* only harness/ and tasks/ import lm_eval (harness/glue.py is the glue; tasks/ subclass its task class);
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

BASICS = {"errors", "settings", "output_dirs"}
# layer -> the layers it may import (besides itself and the basics)
LOWER = {
    "basics": set(),
    "engine": set(),
    "metrics": set(),
    "data": set(),
    "keytokens": {"engine", "metrics", "data"},
    "training": {"engine"},
    "harness": {"engine", "metrics", "keytokens", "data"},
    "report": {"metrics", "data"},
    "tasks": {"engine", "metrics", "keytokens", "data", "harness", "training"},
    "demo": {"engine", "metrics", "keytokens", "data", "harness", "report", "tasks", "training"},
    "entry": {"engine", "metrics", "keytokens", "data", "harness", "report", "tasks", "training", "demo"},
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
        "from lm_eval.api.task import ConfigurableTask\nfrom ..harness import glue\n"
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
