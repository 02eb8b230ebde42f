"""longppl_govreport (``tasks/longppl.py``): through the harness against brute force and the LongPPL reference
package, its key-span cache (one that cannot be used costs a warning, no lost run), and its sizing."""

from __future__ import annotations

import json
import logging
import math
import os
import warnings

import pytest

from lm_eval_longctx.keytokens import judge, span_files
from lm_eval_longctx.tasks import longppl
from tests.brute_force import brute_force_doc
from tests.harness_utils import TASK_DIR, json_numbers, refuse_model_loading, run_task, save_like_lm_eval, write_docs
from tests.tiny import load

TASK = "longppl_govreport"


@pytest.mark.integration
@pytest.mark.parametrize("broken", ["regular file", "symlink loop"])
def test_a_cache_that_cannot_be_used_costs_one_warning_not_the_run(
    model_dirs, corpus_texts, tmp_path, monkeypatch, caplog, broken
):
    from lm_eval.tasks import TaskManager

    if broken == "regular file":
        (tmp_path / "cache").write_text("not a folder")
    else:
        os.symlink(tmp_path / "loop_b", tmp_path / "cache")
        os.symlink(tmp_path / "cache", tmp_path / "loop_b")
    monkeypatch.setenv("LM_EVAL_LONGCTX_CACHE", str(tmp_path / "cache"))
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:2]])
    metadata = {"data_files": docs, "evaluator": model_dirs["b"], "trunc_len": 40, "sliding_window": 16}
    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=metadata)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        task = tm.load([TASK])["tasks"][TASK]
        task.build_all_requests(rank=0, world_size=1)
    assert sorted(task._judgements) == [0, 1]
    cache_warnings = [r.getMessage() for r in caplog.records if "key-span cache" in r.getMessage()]
    assert len(cache_warnings) == 1 and "the run continues without the cache" in cache_warnings[0]


# ------------------------------------------------------------------ sizing: max_seq_lengths, the window, presets


def test_lengths_map_to_documents_of_half_to_whole_and_k_a_quarter():

    # L = 32768 is the paper's selection, K and d, with the documents cut at L tokens of the evaluated model
    paper = longppl.SETTINGS.presets["paper"]
    assert longppl.settings_for_lengths([4096, 32768]) == {
        "cut_tokens": 32768,
        **{k: paper[k] for k in ("min_tokens", "max_tokens", "trunc_len", "sliding_window")},
    }
    assert longppl.settings_for_lengths([8192]) == {
        "cut_tokens": 8192,
        "min_tokens": 4096,
        "max_tokens": 8191,
        "trunc_len": 2048,
        "sliding_window": 512,
    }
    # beyond 32k: the paper's K and its shortest documents, up to L
    assert longppl.settings_for_lengths([131072])["min_tokens"] == 16384
    assert longppl.settings_for_lengths([131072])["trunc_len"] == 4096


def test_a_k_not_below_the_documents_length_is_refused_when_parsed():
    from lm_eval_longctx.settings import SettingsError

    with pytest.raises(SettingsError, match="trunc_len = 4096 is not below the documents' length 2048"):
        longppl.resolve_settings({"max_seq_lengths": [1024, 2048], "trunc_len": 4096})
    with pytest.raises(SettingsError, match="trunc_len = 600 is not below the documents' length 500"):
        longppl.resolve_settings({"cut_tokens": 500, "trunc_len": 600})
    assert longppl.resolve_settings({"max_seq_lengths": [8192], "trunc_len": 4096})["trunc_len"] == 4096


def test_the_ci_preset_judges_itself_on_the_embedded_corpus_unless_told_otherwise(tmp_path):
    from lm_eval_longctx.settings import SettingsError

    s = longppl.resolve_settings({"preset": "ci"})
    assert s["key_source"] == "self" and s["embedded_corpus"] and s["num_docs"] == 10
    assert s.sources["evaluator"] == "preset ci"
    s = longppl.resolve_settings({"preset": "ci", "evaluator": str(tmp_path), "data_files": "docs.jsonl"})
    assert s["key_source"] == "evaluator" and not s["embedded_corpus"]  # given settings win over the preset's
    assert s.sources["embedded_corpus"] == "data_files given, over preset ci"
    with pytest.raises(SettingsError, match="embedded_corpus and data_files both name the documents"):
        longppl.resolve_settings({"embedded_corpus": True, "data_files": "docs.jsonl"})


@pytest.mark.integration
def test_the_papers_documents_on_a_shorter_window_are_refused_before_the_model_loads(monkeypatch, model_dirs):
    from lm_eval_longctx.settings import SettingsError

    refuse_model_loading(monkeypatch)
    with pytest.raises(
        SettingsError, match=r"at least 16384 tokens .*beyond the model's window of 4096.*default preset"
    ):
        run_task(TASK, model_dirs["a"], {"preset": "paper", "evaluator": "self"})


# ------------------------------------------------------------------ through the harness, against brute force


K, D, ALPHA, BETA = 48, 20, 0.5, -10.0


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = [t[:3000] for t in corpus_texts[:3]] + ["short document."]
    return texts, write_docs(tmp_path_factory.mktemp("data") / "docs.jsonl", texts)


@pytest.fixture(scope="module")
def brute(model_dirs, docs):
    evaluator, evaluated = load(model_dirs["b"]), load(model_dirs["a"])
    return [brute_force_doc(text, evaluator, evaluated, K, D, ALPHA, BETA) for text in docs[0]]


@pytest.fixture(scope="module")
def evaluator_run(model_dirs, docs, tmp_path_factory):
    cache = tmp_path_factory.mktemp("spancache")
    md = {
        "data_files": docs[1],
        "evaluator": model_dirs["b"],
        "trunc_len": K,
        "sliding_window": D,
        "alpha": ALPHA,
        "beta": BETA,
        "span_cache_dir": str(cache),
        "soft_gamma": 5,
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_task(TASK, model_dirs["a"], md)
    return res, cache, caught


@pytest.mark.integration
def test_longppl_equals_brute_force_with_an_external_evaluator(evaluator_run, brute, docs):
    res, _, _ = evaluator_run
    key_nll = n_key = nll = n = 0
    per_doc = []
    for kn, kc, tn, tc, *_ in brute:
        key_nll, n_key, nll, n = key_nll + kn, n_key + kc, nll + tn, n + tc
        per_doc.append((kn, kc, tn, tc))
    assert n_key > 10  # the test is not vacuous
    r = res["results"][TASK]
    assert r["longppl,none"] == pytest.approx(math.exp(key_nll / n_key), rel=1e-5)
    assert r["ppl,none"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    assert r["key_token_fraction,none"] == pytest.approx(n_key / n)
    assert r["n_key_tokens,none"] == pytest.approx(n_key / len(docs[0]))
    soft_num, soft_den = sum(b[5][0] for b in brute), sum(b[5][1] for b in brute)
    assert r["longppl_soft,none"] == pytest.approx(math.exp(soft_num / soft_den), rel=1e-5)
    assert soft_den > n + 1  # some weights differ from 1
    for name in ("longppl", "ppl"):
        assert isinstance(r[f"{name}_stderr,none"], float) and r[f"{name}_stderr,none"] > 0
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    for s, (kn, kc, tn, tc) in zip(samples, per_doc):
        assert s["longppl"][1] == kc and s["longppl"][0] == pytest.approx(kn, rel=1e-5, abs=1e-4)
        assert s["ppl"][1] == tc and s["ppl"][0] == pytest.approx(tn, rel=1e-5)


@pytest.mark.integration
def test_longppl_matches_the_reference_package(evaluator_run, model_dirs, docs, tmp_path):
    longppl = pytest.importorskip("longppl.longppl")
    res, _, _ = evaluator_run
    (ev_model, ev_tok), (model, tok) = load(model_dirs["b"]), load(model_dirs["a"])
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    compared = 0
    for i, (text, s) in enumerate(zip(docs[0], samples)):
        L = len(ev_tok(text)["input_ids"])
        if L <= K or (L - K) % D == 1:
            continue  # the reference has no windows there, or crashes on a one-token last window
        ref = longppl.compute_longppl(
            text,
            model,
            ev_model,
            tok,
            ev_tok,
            save_path=str(tmp_path / f"s{i}.txt"),
            trunc_len=K,
            sliding_window=D,
            alpha=ALPHA,
            beta=BETA,
        )
        if ref["n_key_token"]:
            assert s["longppl"][1] == ref["n_key_token"]
            assert math.exp(s["longppl"][0] / s["longppl"][1]) == pytest.approx(float(ref["longppl"]), rel=1e-4)
            compared += 1
        assert math.exp(s["ppl"][0] / s["ppl"][1]) == pytest.approx(float(ref["ppl"]), rel=1e-4)
    assert compared >= 2


@pytest.mark.integration
def test_doc_without_key_tokens_is_dropped_from_longppl_with_a_warning(evaluator_run):
    res, _, caught = evaluator_run
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    assert samples[-1]["longppl"][1] == 0 and samples[-1]["ppl"][1] > 0  # "short document."
    assert any(
        "document 3 has no key tokens (" in str(w.message)
        and "evaluator tokens, not more than trunc_len = 48, so no token has a truncated context" in str(w.message)
        for w in caught
    )


@pytest.mark.integration
def test_settings_and_provenance_are_in_the_results(evaluator_run, model_dirs):
    res, _, _ = evaluator_run
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["trunc_len"] == K and rec["sliding_window"] == D and rec["alpha"] == ALPHA and rec["beta"] == BETA
    assert rec["key_source"] == "evaluator" and rec["evaluator"] == model_dirs["b"]
    assert len(rec["data"]["texts_sha256"]) == 64
    assert "longppl_soft,none" in res["results"][TASK]


@pytest.mark.integration
def test_samples_file_holds_per_document_numbers(evaluator_run, tmp_path):
    """What `lm_eval --log_samples` writes per document: the counts and NLL sums as JSON numbers, each response a
    JSON summary (no per-token array), and a target that says what is predicted."""
    res, _, _ = evaluator_run
    _, files = save_like_lm_eval(res, tmp_path)
    lines = sorted(files[TASK], key=lambda x: x["doc_id"])
    assert len(lines) == 4 and all(len(json.dumps(x)) < 20_000 for x in lines)
    for line in lines:
        assert set(line["metrics"]) == {"longppl", "longppl_soft", "ppl", "key_token_fraction", "n_key_tokens"}
        assert all(json_numbers(line[m]) for m in line["metrics"])
        nll_sum, n_tokens = line["ppl"]
        assert isinstance(n_tokens, int) and line["longppl"][1] == line["n_key_tokens"] == line["key_token_fraction"][0]
        assert line["key_token_fraction"][1] == n_tokens
        (response,) = line["resps"][0]  # lm-eval writes str() of each response: here JSON text
        assert line["filtered_resps"] == [response]
        summary = json.loads(response)
        # the engine's sums and counts are the per-document values of ppl, to the bit
        assert summary == {
            "n_tokens": n_tokens + 1,
            "long_scored": n_tokens,
            "long_nll_sum": nll_sum,
            "long_greedy_hits": summary["long_greedy_hits"],
        }
        assert 0 <= summary["long_greedy_hits"] <= n_tokens
        assert line["target"].startswith("every token of doc.text but the first")
    assert lines[-1]["longppl"] == [0.0, 0]  # "short document.": no key tokens


@pytest.mark.integration
def test_spans_are_cached_and_reusable_as_a_spans_dir(evaluator_run, brute, model_dirs, docs, tmp_path):
    res, cache, _ = evaluator_run
    entries = sorted(cache.glob("*.spans.npz"))
    assert len(entries) == len(docs[0])

    # a second run with the same settings reads the cache: the evaluator is never loaded
    def no_evaluator(self):
        raise AssertionError("the evaluator was loaded although its spans are cached")

    md = {
        "data_files": docs[1],
        "evaluator": model_dirs["b"],
        "trunc_len": K,
        "sliding_window": D,
        "alpha": ALPHA,
        "beta": BETA,
        "span_cache_dir": str(cache),
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(judge.EvaluatorJudge, "_load", no_evaluator)
        again = run_task(TASK, model_dirs["a"], md)
        assert again["results"][TASK]["longppl,none"] == res["results"][TASK]["longppl,none"]
        # any setting the spans depend on is part of the key: a new alpha needs the evaluator
        with pytest.raises(AssertionError, match="evaluator was loaded"):
            run_task(TASK, model_dirs["a"], {**md, "alpha": ALPHA + 0.1})
    # the same spans, given as a reference-format directory, give the same LongPPL
    spans_dir = tmp_path / "spans"
    for i, (*_, spans, _soft) in enumerate(brute):
        span_files.write_span_file(spans_dir / f"slice_{i}.txt", [tuple(x) for x in spans])
    res2 = run_task(TASK, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": str(spans_dir)})
    assert res2["results"][TASK]["longppl,none"] == pytest.approx(res["results"][TASK]["longppl,none"], rel=1e-6)
    assert res2["configs"][TASK]["metadata"]["longctx_settings"]["key_source"] == "spans_dir"


@pytest.mark.integration
def test_evaluator_self_reads_a_document_once_when_the_tokenizer_adds_no_special_token(model_dirs, docs, tmp_path):
    """The judging sequence (with special tokens) and the evaluated one (without) are the same ids when the
    tokenizer adds none: one request per document serves both, with the numbers of brute force; a tokenizer
    that adds a BOS keeps two requests."""
    import shutil

    from tokenizers import processors
    from transformers import AutoTokenizer

    no_bos = tmp_path / "no_bos"
    shutil.copytree(model_dirs["a"], no_bos)
    tokenizer = AutoTokenizer.from_pretrained(no_bos)
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    tokenizer.save_pretrained(no_bos)
    reloaded = AutoTokenizer.from_pretrained(no_bos)
    assert reloaded("some text")["input_ids"] == reloaded("some text", add_special_tokens=False)["input_ids"]

    md = {"data_files": docs[1], "evaluator": "self", "trunc_len": K, "sliding_window": D, "alpha": ALPHA, "beta": BETA}
    res = run_task(TASK, str(no_bos), md)
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    assert [len(s["resps"]) for s in samples] == [1] * len(docs[0])
    model = load(str(no_bos))
    brute = [brute_force_doc(text, model, model, K, D, ALPHA, BETA) for text in docs[0]]
    key_nll, n_key = sum(b[0] for b in brute), sum(b[1] for b in brute)
    nll, n = sum(b[2] for b in brute), sum(b[3] for b in brute)
    assert n_key > 10  # the test is not vacuous
    r = res["results"][TASK]
    assert r["longppl,none"] == pytest.approx(math.exp(key_nll / n_key), rel=1e-5)
    assert r["ppl,none"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    for s, (kn, kc, tn, tc, *_) in zip(samples, brute):
        assert s["longppl"][1] == kc and s["longppl"][0] == pytest.approx(kn, rel=1e-5, abs=1e-4)
        assert s["ppl"][1] == tc and s["ppl"][0] == pytest.approx(tn, rel=1e-5)

    with_bos = run_task(TASK, model_dirs["a"], md, limit=1)
    assert [len(s["resps"]) for s in with_bos["samples"][TASK]] == [2]
