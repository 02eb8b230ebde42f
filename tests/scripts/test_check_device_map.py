"""scripts/check_device_map.py on the CPU: the evaluator loaded whole and loaded with device_map="auto" (on a machine
without GPUs: the CPU) give the same scores, and the logits come back where the caller reads them."""

from __future__ import annotations

import json

import pytest

from tests.scripts import script

# loads a model twice through transformers: seconds, so not in the fast subset
pytestmark = pytest.mark.integration


def test_the_sharded_load_scores_as_the_whole_one(tmp_path):
    check_device_map = script("check_device_map")
    out = tmp_path / "check.json"
    assert check_device_map.main(["--device", "cpu", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["logits_returned_on"] == "cpu"
    assert max(report["max_abs_diff"].values()) <= 1e-5
