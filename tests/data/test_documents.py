"""A local data file read when the datasets cache cannot be written: one warning, the same rows, no lost run."""

from __future__ import annotations

import json
import logging

import pytest

from lm_eval_longctx.data import documents


def test_a_datasets_cache_that_cannot_be_written_is_one_warning(tmp_path, monkeypatch, caplog):
    datasets = pytest.importorskip("datasets")
    rows = tmp_path / "docs.jsonl"
    rows.write_text("".join(json.dumps({"text": f"document {k}"}) + "\n" for k in range(3)))
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "a-file" / "datasets")
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        ds, source = documents.load_rows("unused", None, "test", str(rows))
    assert ds["text"] == ["document 0", "document 1", "document 2"] and source == {"data_files": str(rows)}
    [warning] = [r.getMessage() for r in caplog.records if r.name == "lm_eval_longctx"]
    assert "datasets cache" in warning and "Not a directory" in warning and "the run continues without" in warning
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "docs.jsonl"]


def test_a_file_that_is_not_rows_is_still_named(tmp_path):
    pytest.importorskip("datasets")
    bad = tmp_path / "docs.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="docs.parquet: cannot be read as parquet rows"):
        documents.load_rows("unused", None, "test", str(bad))
