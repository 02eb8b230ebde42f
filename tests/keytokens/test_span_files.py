"""Span files (``keytokens/span_files.py``): the text form round-trips and is parsed strictly, the reference's files
parse; on a nearly full disk, whole or not there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx.keytokens import span_files, spans_to_tokens
from tests.tiny import writes_cut_at

REFERENCE_SPANS = Path(__file__).resolve().parents[3] / "shared" / "reference-data" / "longppl-key-spans"


def test_a_span_file_that_does_not_fit_leaves_nothing(tmp_path):
    spans = [(k * 10, k * 10 + 3) for k in range(500)]
    with pytest.raises(OSError), writes_cut_at(200):
        span_files.write_span_file(tmp_path / "spans" / "slice_0.txt", spans)
    assert list((tmp_path / "spans").iterdir()) == []
    span_files.write_span_file(tmp_path / "spans" / "slice_0.txt", spans)
    assert span_files.read_span_file(tmp_path / "spans" / "slice_0.txt") == spans


def test_span_text_round_trip_and_strict_parsing(tmp_path):
    spans = [(0, 5), (7, 19), (1000, 1003)]
    text = span_files.format_span_text(spans)
    assert text == "[0, 5];[7, 19];[1000, 1003]"
    assert span_files.parse_span_text(text) == spans
    assert span_files.parse_span_text("") == []
    for bad in ["__import__('os').system('true')", "[1, 2]; (3, 4)", "[1, 2, 3]", "[5, 1]", "[1,2];;[3,4]"]:
        with pytest.raises(spans_to_tokens.KeySpanFormatError):
            span_files.parse_span_text(bad)
    with pytest.raises(FileNotFoundError):
        span_files.read_span_file(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError, match="slice_1.txt"):
        span_files.write_span_file(tmp_path / "d" / "slice_0.txt", spans)
        span_files.read_span_dir(tmp_path / "d", ["x" * 2000, "y" * 2000])


def test_a_number_too_long_for_a_span_is_a_format_error_naming_the_file(tmp_path):
    path = tmp_path / "slice_0.txt"
    path.write_text(f"[0, 5];[7, {'9' * 5000}]", encoding="utf-8")
    with pytest.raises(
        spans_to_tokens.KeySpanFormatError, match=r"slice_0.txt: item 1 is not '\[start, end\]'.*18 digits"
    ):
        span_files.read_span_file(path)
    assert span_files.parse_span_text(f"[0, {'9' * 18}]") == [(0, 10**18 - 1)]
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match="item 0"):
        span_files.parse_span_text(f"[0, {'9' * 19}]")


@pytest.mark.skipif(not REFERENCE_SPANS.is_dir(), reason="shared/reference-data is not present")
def test_all_reference_span_files_parse():
    longppl = pytest.importorskip("longppl.longppl")
    files = sorted(REFERENCE_SPANS.glob("*/slice_*.txt"))
    assert len(files) == 150
    empty = []
    for f in files:
        spans = span_files.read_span_file(f)
        if not spans:
            empty.append(f"{f.parent.name}/{f.name}")
            continue
        ref = longppl.load_key_token(f)  # the reference's own (eval-based) reader, on trusted files
        assert [tuple(x) for x in ref] == spans
        arr = np.asarray(spans)
        assert (arr[:, 1] >= arr[:, 0]).all() and (arr[1:, 0] >= arr[:-1, 1]).all()
    assert empty == ["Qwen2-72B-Instruct/slice_9.txt"]
    for evaluator in ("Meta-Llama-3.1-8B", "Mistral-Large-Instruct-2407", "Qwen2-72B-Instruct"):
        # no manifest: accepted with a warning, unverified (the GovReport texts are not here: long stand-ins)
        with pytest.warns(UserWarning, match="no key_spans.json"):
            folder = span_files.read_span_dir(REFERENCE_SPANS / evaluator, ["x" * 200_000] * 50)
        assert len(folder.spans) == 50 and folder.manifest is None and folder.verified is False
