"""scripts/check_device_map.py on the CPU: the evaluator loaded whole and loaded with device_map="auto" (on a machine
without GPUs: the CPU) give the same scores, and the logits come back where the caller reads them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# loads a model twice through transformers: seconds, so not in the fast subset
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_sharded_load_scores_as_the_whole_one(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_device_map
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out = tmp_path / "check.json"
    assert check_device_map.main(["--device", "cpu", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["logits_returned_on"] == "cpu"
    assert max(report["max_abs_diff"].values()) <= 1e-5
