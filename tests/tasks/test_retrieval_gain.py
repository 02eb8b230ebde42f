"""retrieval_gain (``tasks/retrieval_gain.py``): its anchors and conditions, the task against one full forward per
request through the harness, and its sizing from max_seq_lengths or the model's window (the whole with-document
sequence holds the length)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lm_eval_longctx.data import retrieval_cases
from lm_eval_longctx.engine import scoring
from lm_eval_longctx.harness import request_type
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import retrieval_gain
from tests import tiny
from tests.brute_force import brute_last
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval, write_docs
from tests.tiny import load

TOL = 1e-4
TASK = "retrieval_gain"
# small enough for the tiny models (max 4096 positions) and fast on CPU
MD = {"doc_tokens": 400, "query_tokens": 8, "answer_tokens": 6, "separator": "\n", "chunk_size": 64}


def test_the_document_fills_the_longest_length_beside_bos_separator_query_and_answer(tmp_path):
    from transformers import AutoTokenizer

    s = retrieval_gain.resolve_settings({"max_seq_lengths": [512, 2048], "separator": "\n"})
    assert retrieval_gain.settings_for_lengths([512, 2048], 49) == {"doc_tokens": 1999}
    tokenizer = AutoTokenizer.from_pretrained(tiny.save_tiny_model(tmp_path, tiny.corpus_texts(2, 200)))
    extra = retrieval_cases.query_extra_tokens(tokenizer, s)
    s["doc_tokens"] = retrieval_gain.settings_for_lengths([2048], extra)["doc_tokens"]
    text = " ".join(["the report of committee found"] * 2000)
    case = retrieval_cases.retrieval_case_for_text(tokenizer, text, s)
    assert case.max_with_length == 2048  # [BOS] document sep Q A: exactly the length
    assert retrieval_cases.query_extra_tokens(None, s) == 1 + 24 + 24  # no tokenizer known: one BOS, no separator
    with pytest.raises(SettingsError, match="a length of 40 tokens leaves no room for a document"):
        retrieval_gain.settings_for_lengths([40], 49)


def test_the_paper_preset_reads_8192_tokens_of_each_document():
    assert retrieval_gain.resolve_settings({"preset": "paper"})["doc_tokens"] == 8192
    assert retrieval_gain.resolve_settings({})["doc_tokens"] is None  # sized when the task is built


# ------------------------------------------------------------------ anchors and conditions


# ------------------------------------------------------------------ through the harness


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = corpus_texts[:3]
    return texts, write_docs(tmp_path_factory.mktemp("rgdata") / "docs.jsonl", texts)


def brute_force_task(model_dir, texts, doc_tokens, q, r, separator):
    """Per document: its pairs built here from the documented recipe, one full forward each."""
    model, tok = load(model_dir)
    sep = tok(separator, add_special_tokens=False)["input_ids"]
    bos = [tok.bos_token_id]
    per_doc = []
    for text in texts:
        x = tok(text, add_special_tokens=False)["input_ids"][:doc_tokens]
        U = len(x) - q - r
        rows = []
        for a in (math.ceil(U / 10), math.floor(6 * U / 10)):
            qa = x[a : a + q + r]
            nll_with = -brute_last(model, bos + x + sep + qa, r)[0].astype(np.float64).mean()
            nll_without = -brute_last(model, bos + qa, r)[0].astype(np.float64).mean()
            rows.append((nll_without - nll_with, nll_with, nll_without))
        per_doc.append(np.mean(rows, axis=0))
    return np.array(per_doc)


@pytest.fixture(scope="module")
def harness_run(model_dirs, docs):
    return run_task(TASK, model_dirs["a"], {"data_files": docs[1], **MD})


@pytest.mark.integration
def test_task_equals_brute_force_through_the_harness(harness_run, model_dirs, docs):
    res = harness_run
    expected = brute_force_task(model_dirs["a"], docs[0], 400, 8, 6, "\n")
    r = res["results"][TASK]
    for col, name in enumerate(("retrieval_gain", "nll_with", "nll_without")):
        assert r[f"{name},none"] == pytest.approx(expected[:, col].mean(), abs=TOL)
        # stderr over documents (the harness's closed form for a mean)
        assert r[f"{name}_stderr,none"] == pytest.approx(expected[:, col].std(ddof=1) / math.sqrt(3), abs=TOL)
    assert np.abs(expected[:, 0]).max() > 1e-3  # the document changes the numbers: not a vacuous test
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    for s, row in zip(samples, expected):
        assert s["retrieval_gain"] == pytest.approx(row[0], abs=TOL)
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["doc_tokens"] == 400 and rec["separator"] == "\n" and rec["bos"] == "auto"
    assert len(rec["data"]["texts_sha256"]) == 64


@pytest.mark.integration
def test_samples_file_holds_per_anchor_gains(harness_run, tmp_path):
    """What `lm_eval --log_samples` writes per document: its mean gain and NLLs as JSON numbers, the response as a
    JSON summary with the token counts and per anchor the NLLs and the gain, and a target naming what is
    predicted."""
    _, files = save_like_lm_eval(harness_run, tmp_path)
    lines = sorted(files[TASK], key=lambda x: x["doc_id"])
    assert len(lines) == 3 and all(len(json.dumps(x)) < 20_000 for x in lines)
    for line in lines:
        assert set(line["metrics"]) == {"retrieval_gain", "nll_with", "nll_without"}
        assert all(json_numbers(line[m]) for m in line["metrics"])
        summary = json.loads(line["resps"][0][0])
        assert line["filtered_resps"] == line["resps"][0]
        assert summary["n_doc_tokens"] == 400 and summary["n_source_tokens"] >= 400
        assert summary["answer_tokens"] == 6 and len(summary["anchors"]) == 2
        for key in ("anchors", "nll_with", "nll_without", "gain"):
            assert json_numbers(summary[key]) and len(summary[key]) == 2
        for key, metric in (("gain", "retrieval_gain"), ("nll_with", "nll_with"), ("nll_without", "nll_without")):
            assert float(np.mean(summary[key])) == line[metric]  # the document's value is the mean over anchors
        assert line["target"].startswith("the answer tokens after each anchor's query in doc.text")


@pytest.mark.integration
def test_limit_counts_documents_and_use_cache_serves_the_new_kind(model_dirs, docs, tmp_path, monkeypatch):
    md = {"data_files": docs[1], **MD}
    first = run_task(TASK, model_dirs["a"], md, limit=2, use_cache=str(tmp_path / "cache"))
    assert first["n-samples"][TASK]["effective"] == 2  # documents, not (document, anchor) pairs

    def fail(*a, **k):
        raise AssertionError("scored again although --use_cache holds the result")

    monkeypatch.setattr(scoring, "score_continuations", fail)
    monkeypatch.setattr(scoring, "score_sequence_ends", fail)
    second = run_task(TASK, model_dirs["a"], md, limit=2, use_cache=str(tmp_path / "cache"))
    for name in ("retrieval_gain", "nll_with", "nll_without"):
        assert second["results"][TASK][f"{name},none"] == first["results"][TASK][f"{name},none"]
    # other settings are another cache key: scored afresh
    with pytest.raises(AssertionError, match="scored again"):
        run_task(TASK, model_dirs["a"], {**md, "n_queries": 3}, limit=2, use_cache=str(tmp_path / "cache"))


def test_non_default_conditions_equal_brute_force(model_dirs, docs):
    """before_anchor context, no BOS, centred anchors: the serve path against one forward per sequence."""
    model, tok = load(model_dirs["a"])
    spec = {
        **retrieval_gain.resolve_settings(
            {
                "doc_tokens": 200,
                "query_tokens": 5,
                "answer_tokens": 7,
                "n_queries": 3,
                "with_context": "before_anchor",
                "bos": False,
                "anchor_spacing": "centered",
                "chunk_size": 16,
            }
        ),
        "kind": retrieval_gain.KIND,
    }
    out = retrieval_gain.serve(request_type.ScoringContext(model, tok, None, 2), [(t, spec) for t in docs[0][:2]])
    for text, scores in zip(docs[0][:2], out):
        x = tok(text, add_special_tokens=False)["input_ids"][:200]
        U = 200 - 12
        lo, hi = math.ceil(U / 10), math.floor(6 * U / 10)
        anchors = [lo + (2 * i + 1) * (hi - lo) // 6 for i in range(3)]
        assert scores.anchors.tolist() == anchors
        for j, a in enumerate(anchors):
            # the document up to the anchor, then Q A: the document read in place, no BOS
            np.testing.assert_allclose(scores.with_logprob[j], brute_last(model, x[: a + 12], 7)[0], atol=TOL)
            np.testing.assert_allclose(scores.without_logprob[j], brute_last(model, x[a : a + 12], 7)[0], atol=TOL)


@pytest.mark.integration
def test_longer_than_the_model_maximum_is_an_error(model_dirs, docs):
    # the with-document sequence is 1 + 400 + 1 + 14 tokens
    with pytest.raises(scoring.ScoringError, match="longer than the model's maximum length 256.*doc_tokens"):
        run_task(TASK, model_dirs["a"], {"data_files": docs[1], **MD}, model_args={"max_length": 256}, limit=1)
    # asked for explicitly, it is scored (the serve path, without the harness)
    model, tok = load(model_dirs["a"])
    ctx = request_type.ScoringContext(model, tok, 256, 4)
    spec = {**retrieval_gain.resolve_settings(MD), "allow_beyond_max_length": True}
    [scores] = retrieval_gain.serve(ctx, [(docs[0][0], spec)])
    assert scores.n_with_tokens == 416 and np.isfinite(scores.with_logprob).all()


def test_the_docstring_examples_run():
    import doctest

    assert doctest.testmod(retrieval_gain).failed == 0
