"""The embedded corpus (``data/embedded_corpus.py``): documents cut at paragraph boundaries, deterministic and at least
the asked size, written with their provenance; ``lm-eval-longctx corpus`` writes a short local corpus of documents
of at least N tokens in one command; on a nearly full disk, the corpus file whole or not there."""

from __future__ import annotations

import json
import platform

import pytest

from lm_eval_longctx import cli
from lm_eval_longctx.data import documents, embedded_corpus
from lm_eval_longctx.demo.run import default_model_dir
from tests.tiny import writes_cut_at


def test_a_corpus_that_does_not_fit_leaves_nothing(tmp_path):
    with pytest.raises(OSError), writes_cut_at(500):
        embedded_corpus.write_corpus(tmp_path / "corpus.jsonl", ["a document " * 100, "another " * 100])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_embedded_documents_are_deterministic_and_at_least_the_asked_size():
    a = embedded_corpus.embedded_documents(20_000)
    b = embedded_corpus.embedded_documents(20_000)
    assert a == b and len(a) >= 2
    assert all(len(t) >= 20_000 for t in a)
    assert embedded_corpus.embedded_documents(20_000, n_docs=2) == a[:2]


@pytest.mark.integration
def test_embedded_documents_are_cut_at_paragraph_boundaries():
    stream = embedded_corpus.topics_stream()
    size = 30_000
    docs = embedded_corpus.embedded_documents(size)
    joined = embedded_corpus.PARAGRAPH.join(docs)
    # the documents are the stream's prefix, in order, with the blank lines between them removed
    assert stream.startswith(joined)
    rest = stream[len(joined) :]
    assert rest == "" or rest.startswith(embedded_corpus.PARAGRAPH)
    pos = 0
    for doc in docs:
        end = pos + len(doc)
        assert stream[end : end + 2] in (embedded_corpus.PARAGRAPH, "")  # ends where a paragraph ends
        # ... at the FIRST boundary past the size: no whole blank line after `size` characters
        assert doc.find(embedded_corpus.PARAGRAPH, size) == -1
        pos = end + len(embedded_corpus.PARAGRAPH)
    # the dropped tail is shorter than one document
    assert len(rest) - len(embedded_corpus.PARAGRAPH) < size or rest == ""


@pytest.mark.integration
def test_embedded_documents_errors():
    with pytest.raises(ValueError, match="chars_per_doc"):
        embedded_corpus.embedded_documents(0)
    with pytest.raises(ValueError, match="only"):
        embedded_corpus.embedded_documents(embedded_corpus.DEFAULT_CHARS_PER_DOC, n_docs=10_000)
    with pytest.raises(ValueError):
        embedded_corpus.embedded_documents(10**9)


@pytest.mark.integration
def test_write_corpus_rows_and_provenance(tmp_path):
    texts = embedded_corpus.embedded_documents(15_000, n_docs=3)
    prov = embedded_corpus.write_corpus(tmp_path / "sub" / "corpus.jsonl", texts)
    rows = [json.loads(line) for line in (tmp_path / "sub" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [{"text": t} for t in texts]
    assert prov["path"] == str((tmp_path / "sub" / "corpus.jsonl").resolve())
    assert prov["source"] == "pydoc_data.topics" and prov["python_version"] == platform.python_version()
    assert prov["n_docs"] == 3 and prov["chars"] == [len(t) for t in texts]
    # the same fingerprint the tasks record in longctx_settings.data
    assert prov["texts_sha256"] == documents.texts_sha256(texts)
    assert prov["texts_sha256"] != documents.texts_sha256(texts[:2])


# ------------------------------------------------------------------ lm-eval-longctx corpus


def test_documents_of_at_least_n_tokens_of_the_given_tokenizer(tmp_path, capsys):
    from transformers import AutoTokenizer

    out = tmp_path / "corpus.jsonl"
    assert (
        cli.main(["corpus", str(out), "--tokens", "3000", "--docs", "3", "--tokenizer", str(default_model_dir())]) == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(default_model_dir())
    sizes = [len(tok(r["text"], add_special_tokens=False)["input_ids"]) for r in rows]
    assert len(rows) == 3 and min(sizes) >= 3000 and max(sizes) < 3000 * 1.5
    assert "data_files" in capsys.readouterr().out


def test_an_existing_file_or_too_much_text_is_exit_2(tmp_path, capsys):
    out = tmp_path / "corpus.jsonl"
    out.write_text("mine")
    assert cli.main(["corpus", str(out), "--tokens", "100", "--docs", "1"]) == 2 and out.read_text() == "mine"
    assert cli.main(["corpus", str(tmp_path / "big.jsonl"), "--tokens", "10000000", "--docs", "2"]) == 2
    assert "holds" in capsys.readouterr().err and not (tmp_path / "big.jsonl").exists()
