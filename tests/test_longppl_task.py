"""longppl_govreport through the harness, against brute force and the LongPPL reference package."""

import json
import math
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lm_eval_longctx.keytokens import span_files
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval, write_docs

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


K, D, ALPHA, BETA = 48, 20, 0.5, -10.0
TASK = "longppl_govreport"


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def last_logprob(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)


def brute_force_doc(text, evaluator, evaluated, K, d, alpha, beta):
    """Per-token forwards over exactly each token's context: slow and obviously right."""
    ev_model, ev_tok = evaluator
    enc = ev_tok(text, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        full = torch.log_softmax(ev_model(torch.tensor([ids])).logits[0].float(), -1)
    key_spans = []
    lsd = {}
    for t in range(K, len(ids)):
        s = ((t - K) // d) * d  # the reference window that scores t starts at s
        lp_long = float(full[t - 1, ids[t]])
        lp_short = float(last_logprob(ev_model, ids[s:t])[ids[t]])
        lsd[t] = lp_long - lp_short
        if lp_long - lp_short > alpha and lp_long > beta:
            a, b = offs[t]
            if key_spans and key_spans[-1][1] == a:
                key_spans[-1][1] = b
            else:
                key_spans.append([a, b])
    ev_offs = offs
    model, tok = evaluated
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
    nll = [-float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]
    key = [i - 1 for i in range(1, len(ids)) if any(s <= offs[i][0] and offs[i][1] <= e for s, e in key_spans)]
    # LongPPL-soft (gamma = 5): the weight of the evaluator token holding the token's last character
    weights = []
    for i in range(1, len(ids)):
        last = max(offs[i][1] - 1, offs[i][0])
        j = max(k for k, (a, _) in enumerate(ev_offs) if a <= last)
        weights.append(min(math.exp(lsd[j]), 5.0) if j in lsd else 1.0)
    soft = (sum(w * x for w, x in zip(weights, nll)), sum(weights))
    return sum(nll[i] for i in key), len(key), sum(nll), len(nll), key_spans, soft


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


def test_doc_without_key_tokens_is_dropped_from_longppl_with_a_warning(evaluator_run):
    res, _, caught = evaluator_run
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    assert samples[-1]["longppl"][1] == 0 and samples[-1]["ppl"][1] > 0  # "short document."
    assert any(
        "document 3 has no key tokens (" in str(w.message)
        and "evaluator tokens, not more than trunc_len = 48, so no token has a truncated context" in str(w.message)
        for w in caught
    )


def test_settings_and_provenance_are_in_the_results(evaluator_run, model_dirs):
    res, _, _ = evaluator_run
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["trunc_len"] == K and rec["sliding_window"] == D and rec["alpha"] == ALPHA and rec["beta"] == BETA
    assert rec["key_source"] == "evaluator" and rec["evaluator"] == model_dirs["b"]
    assert len(rec["data"]["texts_sha256"]) == 64
    assert "longppl_soft,none" in res["results"][TASK]


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


def test_spans_are_cached_and_reusable_as_a_spans_dir(evaluator_run, brute, model_dirs, docs, tmp_path):
    res, cache, _ = evaluator_run
    entries = sorted(cache.glob("*.spans.npz"))
    assert len(entries) == len(docs[0])
    # a second run with the same settings reads the cache: the evaluator is never loaded
    from lm_eval_longctx.tasks.longppl import LongPPLTask

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
        mp.setattr(LongPPLTask, "_load_evaluator", no_evaluator)
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
