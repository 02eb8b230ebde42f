"""Audit records as the report tools read them: parsed as data, every field checked, an error naming the file."""

from __future__ import annotations

import json

import pytest

from lm_eval_longctx.report.audits import KIND, read_audit_summary, read_audits
from lm_eval_longctx.report.results import UnusableInput


def record(**over) -> dict:
    judged = {
        "verdict": "effective below the claim",
        "sentence": "effective 8192 of claimed 32768",
        "rules": {"decides": "relative"},
        "effective": {"relative": {"value": 8192.0, "low": 8192.0, "high": 8192.0}, "absolute": {"value": 8192.0}},
    }
    return {"kind": KIND, "model": "/m/twin", "window": {"tokens": 32768, "source": "max_position_embeddings"},
            "verdict": judged, **over}  # fmt: skip


def test_a_record_reads_as_its_summary(tmp_path):
    (tmp_path / "audit.json").write_text(json.dumps(record(results_model="/m/twin")))
    a = read_audit_summary(tmp_path)
    assert (a.model, a.claimed, a.effective, a.effective_text()) == ("/m/twin", 32768, 8192, "8192 [8192, 8192]")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{", "not a readable audit record"),
        (json.dumps({"kind": "other"}), "not an audit record"),
        (json.dumps(record(window={})), "lacks 'tokens'"),
        (json.dumps(record(window={"tokens": "x"})), "window.tokens is not a finite number"),
        (json.dumps(record(window={"tokens": 0})), "window.tokens is 0, not a positive whole number"),
        (json.dumps(record(window={"tokens": -5})), "window.tokens is -5, not a positive whole number"),
    ],
)
def test_a_file_that_is_not_an_audit_is_refused_by_name(tmp_path, content, words):
    path = tmp_path / "audit.json"
    path.write_text(content)
    with pytest.raises(UnusableInput, match=words):
        read_audit_summary(path)


def test_two_audits_of_one_model_are_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "audit.json").write_text(json.dumps(record()))
    with pytest.raises(UnusableInput, match="two audits of '/m/twin'"):
        read_audits([tmp_path / "a", tmp_path / "b"])
