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


def test_a_text_is_cut_at_a_token_boundary_to_at_most_n_tokens(tmp_path):
    from transformers import AutoTokenizer

    from tests import tiny

    tokenizer = AutoTokenizer.from_pretrained(tiny.save_tiny_model(tmp_path, tiny.corpus_texts(2, 300)))
    text = tiny.corpus_texts(1, 900, seed=4)[0]
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    for keep in (1, 7, 100, n - 1):
        for special in (False, True):
            cut = documents.cut_to_tokens(tokenizer, text, keep, special)
            assert text.startswith(cut)
            assert keep - 2 <= len(tokenizer(cut, add_special_tokens=special)["input_ids"]) <= keep
    assert documents.cut_to_tokens(tokenizer, text, n) == text  # short enough: the text itself
