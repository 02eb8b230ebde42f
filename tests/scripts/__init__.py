"""The tests of scripts/*.py; ``script(name)`` imports one of them as a module."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as a module (the folder is on ``sys.path`` while it imports, as when it runs)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))
