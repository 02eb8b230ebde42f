"""The release: pyproject's version is CHANGELOG.md's newest released section, and pip installed that version
(the results record it as ``longctx_version``)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_changelogs_newest_release_and_the_installed_one():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"$', pyproject, flags=re.M).group(1)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)$", changelog, flags=re.M)
    assert released and released[0][0] == version
    assert importlib.metadata.version("lm_eval_longctx") == version
