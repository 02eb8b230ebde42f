"""retrieval_gain: the prefix-sharing engine and the task against one full forward per request."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine import scoring as engine
from lm_eval_longctx.harness import glue as harness
from lm_eval_longctx.tasks import retrieval_gain as rg
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval, write_docs
from tests.test_longppl_task import load
from tests.tiny import tiny_llama

TOL = 1e-4
TASK = "retrieval_gain"
# small enough for the tiny models (max 4096 positions) and fast on CPU
MD = {"doc_tokens": 400, "query_tokens": 8, "answer_tokens": 6, "separator": "\n", "chunk_size": 64}


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=97, seed=5)


def ids(n, seed):
    return torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(seed))


def brute_last(model, seq, k):
    """One full forward over the whole sequence: log p and greedy hits of its last k tokens."""
    seq = torch.as_tensor(seq)
    with torch.no_grad():
        logits = model(seq[None]).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    n = len(seq)
    pos = torch.arange(n - k, n)
    return lp[pos - 1, seq[pos]].numpy(), (logits[pos - 1].argmax(-1) == seq[pos]).numpy()


# ------------------------------------------------------------------ engine


@pytest.mark.parametrize("chunk", [1, 7, 64, 149, 1000])
def test_score_continuations_equals_one_forward_per_continuation(model, chunk):
    prefix = ids(150, 0)
    conts = [ids(10, 1), ids(7, 2), ids(12, 3), ids(1, 4)]
    n_scored = [4, 7, 12, 1]  # 7 and 12: the whole continuation (its first token read off the prefix)
    out = engine.score_continuations(model, prefix, conts, n_scored=n_scored, chunk_size=chunk)
    hits = 0
    for c, k, res in zip(conts, n_scored, out):
        lp, greedy = brute_last(model, torch.cat([prefix, c]), k)
        assert res.logprob.shape == (k,)
        np.testing.assert_allclose(res.logprob, lp, atol=TOL, rtol=0)
        np.testing.assert_array_equal(res.greedy, greedy)
        hits += int(greedy.sum())
    # one-token prefix: nothing is cached, every continuation reads the prefix token itself
    single = engine.score_continuations(model, prefix[:1], conts[:2], chunk_size=chunk)
    for c, res in zip(conts[:2], single):
        np.testing.assert_allclose(res.logprob, brute_last(model, torch.cat([prefix[:1], c]), len(c))[0], atol=TOL)


def test_prefix_sharing_changes_nothing_and_reads_the_prefix_once(model):
    prefix, conts = ids(300, 10), [ids(20, 11), ids(20, 12), ids(9, 13)]
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].numel()))
    try:
        shared = engine.score_continuations(model, prefix, conts, n_scored=6, chunk_size=64)
    finally:
        hook.remove()
    # the prefix once (its last token travels with each continuation), then each continuation
    assert sum(seen) == (300 - 1) + sum(len(c) + 1 for c in conts)
    alone = [engine.score_continuations(model, prefix, [c], n_scored=6, chunk_size=64)[0] for c in conts]
    reversed_order = engine.score_continuations(model, prefix, conts[::-1], n_scored=6, chunk_size=64)[::-1]
    # equal-length continuations share a forward (rows of a batch round differently by a few float32 units)
    for a, b, c in zip(shared, alone, reversed_order):
        np.testing.assert_allclose(a.logprob, b.logprob, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a.logprob, c.logprob, atol=1e-5, rtol=0)


def test_score_sequence_ends_batches_equal_one_forward_each(model):
    seqs = [ids(n, 20 + n) for n in (15, 9, 30, 9, 2, 21)]
    n_scored = [6, 8, 3, 1, 1, 20]
    out = engine.score_sequence_ends(model, seqs, n_scored, batch_size=4)
    for s, k, res in zip(seqs, n_scored, out):
        lp, greedy = brute_last(model, s, k)
        np.testing.assert_allclose(res.logprob, lp, atol=TOL, rtol=0)
        np.testing.assert_array_equal(res.greedy, greedy)
    with pytest.raises(engine.ScoringError, match="last 9 tokens of a 9-token"):
        engine.score_sequence_ends(model, [ids(9, 0)], 9)


# ------------------------------------------------------------------ anchors and conditions


@pytest.mark.parametrize("spacing", ["endpoints", "centered"])
def test_anchors_are_deterministic_distinct_and_inside_the_interval(spacing):
    for T in list(range(60, 400, 7)) + [8192, 8188, 5000]:
        for n in (1, 2, 3, 5):
            U = T - 24 - 24
            lo, hi = math.ceil(Fraction(1, 10) * U), math.floor(Fraction(6, 10) * U)
            a = rg.choose_anchors(T, 24, 24, n, 0.1, 0.6, spacing)
            assert a == rg.choose_anchors(T, 24, 24, n, 0.1, 0.6, spacing)
            assert len(set(a)) == n and a == sorted(a) and lo <= a[0] and a[-1] <= hi
    assert rg.choose_anchors(8192, 24, 24, 2) == [815, 4886]  # U = 8144: 814.4 -> 815, 4886.4 -> 4886
    assert rg.choose_anchors(8188, 24, 24, 2) == [814, 4884]  # U = 8140: exactly 814 (no float round-up)
    assert rg.choose_anchors(8192, 24, 24, 2, spacing="centered") == [1832, 3868]
    with pytest.raises(engine.ScoringError, match="no room for 2 distinct anchors"):
        rg.choose_anchors(50, 24, 24, 2)


def settings(**kw):
    return rg.resolve_settings({"doc_tokens": 250, "query_tokens": 5, "answer_tokens": 4, **kw})


def test_conditions_are_built_token_by_token_as_documented():
    doc = list(range(100, 400))  # 300 tokens, truncated to 250
    case = rg.build_case(doc, settings(), lead_ids=[1], separator_ids=[7, 8])
    U = 250 - 9
    assert case.anchors == [math.ceil(U / 10), math.floor(6 * U / 10)] == [25, 144]
    assert (case.n_doc_tokens, case.n_source_tokens, case.answer_tokens) == (250, 300, 4)
    [(prefix, idx)] = case.groups  # one shared prefix: [BOS] document separator
    assert prefix == [1] + doc[:250] + [7, 8] and idx == [0, 1]
    for a, cont, without in zip(case.anchors, case.continuations, case.without):
        assert cont == doc[a : a + 9]  # Q (5) then A (4)
        assert without == [1] + doc[a : a + 9]  # [BOS] Q A
        # the document holds this Q A at the anchor (after the BOS): what a retriever copies
        full = prefix + cont
        assert full[1 + a : 1 + a + 9] == cont
    assert case.max_with_length == 1 + 250 + 2 + 9
    # before_anchor: the document up to the anchor, then Q A (no earlier copy to find)
    case = rg.build_case(doc, settings(with_context="before_anchor"), lead_ids=[], separator_ids=[])
    assert [g[0] for g in case.groups] == [doc[:25], doc[:144]] and [g[1] for g in case.groups] == [[0], [1]]
    assert case.without == [doc[25:34], doc[144:153]]


def test_bos_follows_the_tokenizer_unless_set(model_dirs):
    _, tok = load(model_dirs["a"])  # its tokenizer adds <s>
    assert rg.lead_token_ids(tok, "auto") == [tok.bos_token_id] == rg.lead_token_ids(tok, "always")
    assert rg.lead_token_ids(tok, "never") == []
    assert rg.resolve_settings({"bos": False})["bos"] == "never"
    assert rg.resolve_settings({"bos": "true"})["bos"] == "always"


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

    monkeypatch.setattr(engine, "score_continuations", fail)
    monkeypatch.setattr(engine, "score_sequence_ends", fail)
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
        **rg.resolve_settings(
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
        "kind": rg.KIND,
    }
    out = rg.serve(harness.ScoringContext(model, tok, None, 2), [(t, spec) for t in docs[0][:2]])
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
    with pytest.raises(engine.ScoringError, match="longer than the model's maximum length 256.*doc_tokens"):
        run_task(TASK, model_dirs["a"], {"data_files": docs[1], **MD}, model_args={"max_length": 256}, limit=1)
    # asked for explicitly, it is scored (the serve path, without the harness)
    model, tok = load(model_dirs["a"])
    ctx = harness.ScoringContext(model, tok, 256, 4)
    spec = {**rg.resolve_settings(MD), "allow_beyond_max_length": True}
    [scores] = rg.serve(ctx, [(docs[0][0], spec)])
    assert scores.n_with_tokens == 416 and np.isfinite(scores.with_logprob).all()
