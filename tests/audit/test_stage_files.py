"""A stage's files are recorded with their SHA-256 and size and verified before any verdict or copy: a path out of
the folder, an edited, cut or missing file, a samples file the record does not hold, a record without its keys:
each refused by name."""

from __future__ import annotations

import os

import pytest

from lm_eval_longctx.audit import stage_files

STAMP = "2026-11-29T06-00-00.000000"


def stage(out):
    run = out / "runs" / "L0000256" / "model"
    run.mkdir(parents=True)
    results = run / f"results_{STAMP}.json"
    results.write_text('{"results": {}}')
    (run / f"samples_retrieval_gain_map_{STAMP}.jsonl").write_text('{"doc_id": 0}\n{"doc_id": 1}\n')
    (run / f"results_{STAMP}_retrieval_gain_map.png").write_bytes(b"png")
    (run / "results_other.json").write_text("{}")  # another run's file: not this stage's
    files = stage_files.record_files(out, results)
    return {"length": 256, "results_file": results.relative_to(out).as_posix(), "files": files}


def test_a_stage_records_its_files_and_verifies_them(tmp_path):
    record = stage(tmp_path)
    assert sorted(record["files"]) == [
        f"runs/L0000256/model/results_{STAMP}.json",
        f"runs/L0000256/model/results_{STAMP}_retrieval_gain_map.png",
        f"runs/L0000256/model/samples_retrieval_gain_map_{STAMP}.jsonl",
    ]
    assert stage_files.verify_stage(tmp_path, record, "audit.json") == (tmp_path / record["results_file"]).resolve()


@pytest.mark.parametrize("change", ["edited", "cut", "missing", "extra samples"])
def test_a_changed_file_is_refused_by_name(tmp_path, change):
    record = stage(tmp_path)
    samples = tmp_path / "runs" / "L0000256" / "model" / f"samples_retrieval_gain_map_{STAMP}.jsonl"
    if change == "edited":
        samples.write_text('{"doc_id": 5}\n{"doc_id": 1}\n')  # same size, other content
    elif change == "cut":
        samples.write_text('{"doc_id": 0}\n{"doc')
    elif change == "missing":
        samples.unlink()
    else:
        (samples.parent / f"samples_forgetting_curve_{STAMP}.jsonl").write_text("{}\n")
    with pytest.raises(stage_files.StageFileError, match="samples_") as caught:
        stage_files.verify_stage(tmp_path, record, "audit.json")
    assert "Run the audit again into a new folder" in str(caught.value)


def test_a_path_out_of_the_folder_is_never_followed(tmp_path):
    out = tmp_path / "audit"
    other = tmp_path / "other"
    record = stage(other)
    out.mkdir()
    for path in (str(other / record["results_file"]), "../other/" + record["results_file"]):
        moved = {**record, "results_file": path}
        with pytest.raises(stage_files.StageFileError, match="is not inside the audit folder"):
            stage_files.verify_stage(out, moved, "audit.json")
    os.symlink(other / "runs", out / "runs")
    with pytest.raises(stage_files.StageFileError, match="leads out of the audit folder"):
        stage_files.verify_stage(out, record, "audit.json")


@pytest.mark.parametrize("key", ["length", "results_file", "files"])
def test_a_record_without_its_keys_is_refused(tmp_path, key):
    record = stage(tmp_path)
    del record[key]
    with pytest.raises(stage_files.StageFileError, match=f'no "{key}" key'):
        stage_files.verify_stage(tmp_path, record, "audit.json", way_out="Give another earlier audit")
