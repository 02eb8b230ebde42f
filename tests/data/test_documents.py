"""Documents (``data/documents.py``): GovReport rows selected and decoded, tokenized rows of one kind with valid token
ids, JSON lines split on "\\n" only, the forgetting curve's length grid, sample starts, samples and token stream; a
local data file read when the datasets cache cannot be written (one warning, the same rows, no lost run), and texts
cut at a token boundary."""

from __future__ import annotations

import json
import logging
import math
import random

import numpy as np
import pytest
from transformers import AutoTokenizer

from lm_eval_longctx.data import documents
from tests import tiny
from tests.harness_utils import write_books

# Unicode line breaks that JSON allows unescaped inside a string (str.splitlines would split on them)
LINE_BREAKS_IN_TEXT = "first\u2028second\u2029third\x85fourth \u2028"


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
    tokenizer = AutoTokenizer.from_pretrained(tiny.save_tiny_model(tmp_path, tiny.corpus_texts(2, 300)))
    text = tiny.corpus_texts(1, 900, seed=4)[0]
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    for keep in (1, 7, 100, n - 1):
        for special in (False, True):
            cut = documents.cut_to_tokens(tokenizer, text, keep, special)
            assert text.startswith(cut)
            assert keep - 2 <= len(tokenizer(cut, add_special_tokens=special)["input_ids"]) <= keep
    assert documents.cut_to_tokens(tokenizer, text, n) == text  # short enough: the text itself


# ---------------------------------------------------------------- GovReport rows


@pytest.fixture(scope="module")
def decode_tokenizer(tmp_path_factory):
    """A tiny fast tokenizer saved as a folder (the decode tokenizer of the token ids)."""
    path = tmp_path_factory.mktemp("decode_tokenizer")
    tiny.train_tokenizer(tiny.corpus_texts(2, 200), vocab_size=120, kind="bpe").save_pretrained(path)
    return str(path)


def _write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _tokenized(n: int, start: int = 10) -> dict:
    return {"input_ids": list(range(start, start + n)), "tokenized_len": n}


def test_tokenized_rows_are_decoded(tmp_path, decode_tokenizer):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(8), _tokenized(3), _tokenized(9, 20)])
    docs = documents.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=5, num_docs=2)
    tok = AutoTokenizer.from_pretrained(decode_tokenizer)
    assert docs.texts == [tok.decode(list(range(10, 18))), tok.decode(list(range(20, 29)))]


@pytest.mark.parametrize(
    "bad_row, field, expected",
    [
        ({"input_ids": [10, -1, 12], "tokenized_len": 3}, "'input_ids' item 1 is -1", "whole numbers >= 0"),
        ({"input_ids": [10, 10**12], "tokenized_len": 2}, "'input_ids' item 1 is 1000000000000", "< "),
        ({"input_ids": [10, 11, 5000], "tokenized_len": 3}, "'input_ids' item 2 is 5000", "vocabulary"),
        ({"input_ids": [10, 11.5], "tokenized_len": 2}, "'input_ids' item 1 is 11.5", "whole numbers"),
        ({"input_ids": "10 11", "tokenized_len": 2}, "'input_ids' is '10 11'", "a list of token ids"),
        ({"input_ids": [10, 11], "tokenized_len": None}, "'tokenized_len' is None", "a whole number"),
        ({"input_ids": [10, 11], "tokenized_len": 2.5}, "'tokenized_len' is 2.5", "a whole number"),
        ({"input_ids": [10, 11], "tokenized_len": -2}, "'tokenized_len' is -2", "a whole number >= 0"),
    ],
)
def test_a_bad_tokenized_row_names_file_row_and_field(tmp_path, decode_tokenizer, bad_row, field, expected):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(4), bad_row, _tokenized(4)])
    with pytest.raises(ValueError) as err:
        documents.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)
    msg = str(err.value)
    assert f"data_files {path}, row 1: {field}" in msg and expected in msg, msg


def test_a_true_tokenized_len_is_not_a_count(tmp_path, decode_tokenizer):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(4), {"input_ids": [10], "tokenized_len": True}])
    with pytest.raises(ValueError, match=r"row 1: 'tokenized_len' is True; expected a whole number"):
        documents.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)


def test_text_and_tokenized_rows_in_one_file_are_an_error(tmp_path, decode_tokenizer):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(4), {"text": "a document"}, _tokenized(4)])
    with pytest.raises(ValueError, match=r"rows.jsonl, row 1: a 'text' row, but row 0 is a tokenized row.*one kind"):
        documents.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)
    path = _write_rows(tmp_path / "rows2.jsonl", [{"text": "a document"}, _tokenized(4)])
    with pytest.raises(ValueError, match=r"rows2.jsonl, row 0: a 'text' row, but row 1 is a tokenized row"):
        documents.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)


def test_unicode_line_breaks_inside_json_strings_arrive_intact(tmp_path):
    texts = [LINE_BREAKS_IN_TEXT, "plain"]
    path = _write_rows(tmp_path / "docs.jsonl", [{"text": t} for t in texts])
    assert "\u2028" in (tmp_path / "docs.jsonl").read_text(encoding="utf-8")  # unescaped in the file
    assert documents.load_govreport(data_files=path, num_docs=2).texts == texts
    # CRLF line ends are line ends too
    (tmp_path / "crlf.jsonl").write_bytes("".join(json.dumps({"text": t}) + "\r\n" for t in texts).encode())
    assert documents.load_govreport(data_files=str(tmp_path / "crlf.jsonl"), num_docs=2).texts == texts


@pytest.mark.integration
def test_govreport_selection_and_decoding(tmp_path, model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    rows = []
    for i, n in enumerate([30, 5, 40, 12, 50, 60]):
        ids = [(7 * i + j) % 200 + 10 for j in range(n)]
        rows.append({"input": f"doc {i}", "input_ids": ids, "tokenized_len": n})
    path = tmp_path / "gov.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs = documents.load_govreport(
        data_files=str(path), decode_tokenizer=model_dirs["a"], min_tokens=12, max_tokens=35, num_docs=3
    )
    # rows with tokenized_len >= 12, first 3 in order (rows 0, 2, 3), first 35 ids, decoded
    expected = [tok.decode(rows[i]["input_ids"][:35]) for i in (0, 2, 3)]
    assert docs.texts == expected
    assert docs.provenance["num_docs"] == 3 and docs.provenance["texts_sha256"] == documents.texts_sha256(expected)
    with pytest.warns(UserWarning, match="only 5 documents"):
        assert (
            len(
                documents.load_govreport(
                    data_files=str(path), decode_tokenizer=model_dirs["a"], min_tokens=12, num_docs=10
                ).texts
            )
            == 5
        )
    with pytest.raises(FileNotFoundError):
        documents.load_govreport(data_files=str(tmp_path / "missing.jsonl"))


# ---------------------------------------------------------------- the forgetting curve's samples


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, corpus_texts):
    """Three 'books' with titles, as PG-19 rows."""
    return write_books(tmp_path_factory.mktemp("pg19") / "books.jsonl", corpus_texts[:3])


def test_lengths_reproduce_the_reference_grid():
    grid = documents.copy_lengths(16000)
    assert len(grid) == 32 and grid[0] == 8 and grid[-1] == 16000
    # the reference curve's published lengths (numpy's int cast truncates)
    assert {523, 4134, 4650, 5166, 9293} <= set(grid)
    assert grid == [int(x) for x in np.linspace(8, 16000, 32, dtype=int)]
    geo = documents.copy_lengths(16000, spacing="geometric")
    assert geo == sorted(set(int(x) for x in np.geomspace(8, 16000, 32, dtype=int))) and geo[-1] == 16000
    assert documents.copy_lengths(20, num=32) == list(range(8, 21))  # duplicates dropped
    with pytest.raises(ValueError):
        documents.copy_lengths(4)
    with pytest.raises(ValueError, match="spacing"):
        documents.copy_lengths(100, spacing="cubic")


def test_sample_starts_follow_the_reference_draw_order():
    starts = documents.sample_starts(10_000, [8, 500, 40], 4, seed=0)
    random.seed(0)  # the reference: global random seeded once, lengths in order, samples within
    for length in (8, 40, 500):
        assert starts[length] == [random.randint(0, 10_000 - 3 * length) for _ in range(4)]
    with pytest.raises(ValueError, match="at least 3000 tokens"):
        documents.sample_starts(2999, [1000], 1)


def test_samples_are_built_token_by_token(model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    from lm_eval_longctx.tasks.forgetting_curve import special_token_ids

    bos, eos = special_token_ids(tok)
    assert (bos, eos) == (tok.bos_token_id, tok.eos_token_id) and bos != eos
    stream = np.arange(1000, 1300)
    length, start = 5, 10
    copy = documents.forgetting_curve_sample(stream, length, start, "copy", bos, eos)
    lm = documents.forgetting_curve_sample(stream, length, start, "lm", bos, eos)
    s = [1010, 1011, 1012, 1013, 1014]
    assert copy.tolist() == [bos, *s, bos, *s, eos]
    assert lm.tolist() == [bos, 1295, 1296, 1297, 1298, 1299, bos, *s, eos]
    first, stop = documents.forgetting_curve_scored_targets(length)
    assert (first, stop) == (9, 12)  # second S is positions 7..11; its last ceil(5/2) = 3 are scored
    assert copy[first:stop].tolist() == s[-3:] and lm[first:stop].tolist() == s[-3:]
    assert copy[stop] == eos and copy[first - 1] == s[1]
    for length in (1, 2, 8, 99, 100):
        first, stop = documents.forgetting_curve_scored_targets(length)
        assert stop - first == math.ceil(length / 2) and stop == 2 * length + 2
    with pytest.raises(ValueError):
        documents.forgetting_curve_sample(stream, 10, 295, "copy", bos, eos)


def test_corpus_pieces_and_token_stream(corpus, model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    docs = documents.load_book_pieces(data_files=corpus)
    rows = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    assert docs.texts == [p for r in rows for p in (r["short_book_title"] + "\n", r["text"] + "\n")]
    stream = documents.token_stream(tok, docs.texts)
    expected = [t for p in docs.texts for t in tok(p)["input_ids"]]
    assert stream.tolist() == expected and stream.tolist().count(tok.bos_token_id) == len(docs.texts)
    bare = documents.token_stream(tok, docs.texts, add_special_tokens=False)
    assert len(bare) == len(stream) - len(docs.texts)


def test_lazy_documents_build_only_what_is_read():
    built = []

    def build(i):
        built.append(i)
        return {"doc_id": i, "x": 2 * i}

    docs = documents.LazyDocuments(10**12, build, ("doc_id", "x"))
    assert len(docs) == 10**12 and list(docs.features) == ["doc_id", "x"]
    assert docs[0] == {"doc_id": 0, "x": 0} and docs[-1]["doc_id"] == 10**12 - 1
    assert [d["x"] for d in docs[2:5]] == [4, 6, 8]
    first = iter(docs)
    assert [next(first)["doc_id"] for _ in range(3)] == [0, 1, 2]
    assert built == [0, 10**12 - 1, 2, 3, 4, 0, 1, 2]
    with pytest.raises(IndexError):
        docs[10**12]
