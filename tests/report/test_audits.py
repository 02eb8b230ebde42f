"""Audit records as the report tools read them: parsed as data, every field checked, an error naming the file; an
effective length at the longest length tested read as a bound; an audit joined to the runs of its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lm_eval_longctx import output_dirs
from lm_eval_longctx.report.audits import KIND, CheckpointMatcher, audits_by_model, read_audit_summary, read_audits
from lm_eval_longctx.report.results import UnusableInput
from tests.report_fixtures import write_audit, write_checkpoint


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


def test_an_effective_length_that_reaches_the_longest_length_tested_reads_as_a_bound(tmp_path):
    a = read_audit_summary(write_audit(tmp_path / "a", "/m/x", effective=16384, tested=[4096, 8192, 16384]))
    assert a.effective_lower_bound and a.effective_text() == "≥ 16384 [16384, 16384]"
    b = read_audit_summary(write_audit(tmp_path / "b", "/m/y", effective=8192, tested=[4096, 8192, 16384]))
    assert not b.effective_lower_bound and b.effective_text() == "8192 [8192, 8192]"


def test_an_audit_joins_the_run_of_its_checkpoint_however_each_spelled_it(tmp_path, monkeypatch):
    folder = write_checkpoint(tmp_path / "models" / "SmolLM2-135M-Instruct")
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    copy = write_checkpoint(tmp_path / "elsewhere" / "copy")  # the same config and weights in another folder
    other = write_checkpoint(tmp_path / "other", weights=b"other weights")
    monkeypatch.chdir(tmp_path)
    audit = read_audit_summary(write_audit(tmp_path / "audit", str(folder)))  # the audit records the absolute path
    runs = ["models/SmolLM2-135M-Instruct", "./models/SmolLM2-135M-Instruct/", "link", str(copy)]
    matched, unmatched = audits_by_model([*runs, str(other), "org/hub-model"], [audit])
    assert set(matched) == set(runs) and all(a is audit for a in matched.values()) and unmatched == []
    # an audit of a hub id joins by the name alone; one that matches no run is returned as such
    hub = read_audit_summary(write_audit(tmp_path / "hub", "org/hub-model"))
    lone = read_audit_summary(write_audit(tmp_path / "lone", "/gone/model"))
    matched, unmatched = audits_by_model(["org/hub-model", "models/SmolLM2-135M-Instruct"], [hub, lone, audit])
    assert matched == {"org/hub-model": hub, "models/SmolLM2-135M-Instruct": audit} and unmatched == [lone]


def test_two_audits_of_one_checkpoint_under_two_spellings_are_refused(tmp_path, monkeypatch):
    folder = write_checkpoint(tmp_path / "models" / "m")
    monkeypatch.chdir(tmp_path)
    audits = [
        read_audit_summary(write_audit(tmp_path / n, name)) for n, name in (("a", str(folder)), ("b", "models/m"))
    ]
    with pytest.raises(UnusableInput, match="2 audits of the checkpoint of 'models/m'"):
        audits_by_model(["models/m"], audits)


def test_checkpoints_are_compared_by_content_only_when_their_files_agree_in_name_and_size(tmp_path, monkeypatch):
    a, b = write_checkpoint(tmp_path / "a"), write_checkpoint(tmp_path / "b", weights=b"weightz")  # same size
    hashed = []
    monkeypatch.setattr(output_dirs, "file_sha256", lambda p: hashed.append(p) or Path(p).read_bytes().hex())
    assert not CheckpointMatcher().same(str(a), str(b)) and hashed  # same sizes: read, and told apart
    hashed.clear()
    c = write_checkpoint(tmp_path / "c", weights=b"longer weights")
    assert not CheckpointMatcher().same(str(a), str(c)) and not hashed  # other sizes: never read
    assert not CheckpointMatcher().same(str(tmp_path), str(a))  # a folder without config.json is no checkpoint
