"""Local data files read as data: GovReport rows of one kind with valid token ids, JSON lines split on "\\n" only."""

from __future__ import annotations

import json

import pytest

from lm_eval_longctx.data import documents as data
from lm_eval_longctx.data import longeval_cases as longeval_data
from tests import tiny

# Unicode line breaks that JSON allows unescaped inside a string (str.splitlines would split on them)
LINE_BREAKS_IN_TEXT = "first\u2028second\u2029third\x85fourth \u2028"


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
    from transformers import AutoTokenizer

    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(8), _tokenized(3), _tokenized(9, 20)])
    docs = data.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=5, num_docs=2)
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
        data.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)
    msg = str(err.value)
    assert f"data_files {path}, row 1: {field}" in msg and expected in msg, msg


def test_a_true_tokenized_len_is_not_a_count(tmp_path, decode_tokenizer):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(4), {"input_ids": [10], "tokenized_len": True}])
    with pytest.raises(ValueError, match=r"row 1: 'tokenized_len' is True; expected a whole number"):
        data.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)


def test_text_and_tokenized_rows_in_one_file_are_an_error(tmp_path, decode_tokenizer):
    path = _write_rows(tmp_path / "rows.jsonl", [_tokenized(4), {"text": "a document"}, _tokenized(4)])
    with pytest.raises(ValueError, match=r"rows.jsonl, row 1: a 'text' row, but row 0 is a tokenized row.*one kind"):
        data.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)
    path = _write_rows(tmp_path / "rows2.jsonl", [{"text": "a document"}, _tokenized(4)])
    with pytest.raises(ValueError, match=r"rows2.jsonl, row 0: a 'text' row, but row 1 is a tokenized row"):
        data.load_govreport(data_files=path, decode_tokenizer=decode_tokenizer, min_tokens=1, num_docs=3)


def test_unicode_line_breaks_inside_json_strings_arrive_intact(tmp_path):
    texts = [LINE_BREAKS_IN_TEXT, "plain"]
    path = _write_rows(tmp_path / "docs.jsonl", [{"text": t} for t in texts])
    assert "\u2028" in (tmp_path / "docs.jsonl").read_text(encoding="utf-8")  # unescaped in the file
    assert data.load_govreport(data_files=path, num_docs=2).texts == texts
    # CRLF line ends are line ends too
    (tmp_path / "crlf.jsonl").write_bytes("".join(json.dumps({"text": t}) + "\r\n" for t in texts).encode())
    assert data.load_govreport(data_files=str(tmp_path / "crlf.jsonl"), num_docs=2).texts == texts


def test_longeval_testcases_with_unicode_line_breaks_in_a_string(tmp_path, caplog):
    case = longeval_data.generate_cases([3], 1, seed=1)[0]
    record = case.to_record()
    # the header is free text (it differs from LongChat's: a warning, scored as it is)
    record["prompt"] = LINE_BREAKS_IN_TEXT + record["prompt"]
    path = tmp_path / "3_lines.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\r\n", encoding="utf-8")
    assert "\u2029" in path.read_text(encoding="utf-8")
    (loaded,) = longeval_data.load_testcases(str(path))
    assert loaded.prompt == record["prompt"] and loaded.expected_number == case.expected_number
