"""forgetting_curve: samples, engine batch, memory lengths, harness run against brute force, plots."""

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lm_eval_longctx.data import documents as data
from lm_eval_longctx.engine import scoring as engine
from lm_eval_longctx.metrics import per_token as metrics
from lm_eval_longctx.report.pictures import forgetting_curve as plotting
from tests import tiny
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval

ROOT = Path(__file__).resolve().parents[1]
TASK = "forgetting_curve"
LENGTHS = [8, 21, 50, 99]
N_SAMPLES = 3
LIMIT = 2 * len(LENGTHS)  # sample-major docs: two samples at every length


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, corpus_texts):
    """Three 'books' with titles, as PG-19 rows."""
    path = tmp_path_factory.mktemp("pg19") / "books.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(corpus_texts[:3]):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def trained_dir(model_dirs, corpus_texts, tmp_path_factory):
    """The tiny model after a few training steps: it predicts some tokens right (a random model
    predicts none, and a test comparing zeros cannot fail)."""
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    model = AutoModelForCausalLM.from_pretrained(model_dirs["a"], dtype=torch.float32)
    ids = torch.tensor([t for piece in tok(corpus_texts)["input_ids"] for t in piece])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # far faster than two contended threads for a model this small
    try:
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        model.train()
        for _ in range(60):
            starts = torch.randint(0, len(ids) - 65, (16,), generator=gen)
            x = torch.stack([ids[s : s + 64] for s in starts])
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    out = tmp_path_factory.mktemp("trained") / "model"
    model.eval().save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def metadata(corpus, **extra):
    return {
        "data_files": corpus,
        "lengths": LENGTHS,
        "samples_per_length": N_SAMPLES,
        "chunk_size": 16,
        "batch_size": 2,
        **extra,
    }


@pytest.fixture(scope="module")
def run(trained_dir, corpus):
    return run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT)


# ---------------------------------------------------------------- brute force (the reference's recipe)


def reference_samples(tokenizer, corpus, lengths, n_samples, seed=0):
    """What the reference builds: pieces tokenized with default special tokens and concatenated;
    Python's random seeded once, one randint(0, N - 3l) per sample, lengths in order."""
    rows = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    stream = []
    for r in rows:
        stream += tokenizer(r["short_book_title"] + "\n")["input_ids"]
        stream += tokenizer(r["text"] + "\n")["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    rng = random.Random(seed)
    out = {}
    for length in lengths:
        out[length] = []
        for _ in range(n_samples):
            b = rng.randint(0, len(stream) - 3 * length)
            s = stream[b : b + length]
            out[length].append(([bos] + s + [bos] + s + [eos], [bos] + stream[-length:] + [bos] + s + [eos]))
    return out


def brute_accuracy(model, ids, length):
    """A separate full forward; argmax at position p - 1 vs token p over the last ceil(l/2) of S."""
    with torch.no_grad():
        pred = model(torch.tensor([ids])).logits[0].argmax(-1)
    second_s = range(length + 2, 2 * length + 2)
    scored = list(second_s)[-math.ceil(length / 2) :]
    return sum(int(pred[p - 1]) == ids[p] for p in scored) / len(scored)


@pytest.fixture(scope="module")
def brute(trained_dir, corpus):
    tok = AutoTokenizer.from_pretrained(trained_dir)
    model = AutoModelForCausalLM.from_pretrained(trained_dir, dtype=torch.float32).eval()
    samples = reference_samples(tok, corpus, LENGTHS, N_SAMPLES)
    per_length = LIMIT // len(LENGTHS)
    return {
        length: (
            [brute_accuracy(model, c, length) for c, _ in samples[length][:per_length]],
            [brute_accuracy(model, m, length) for _, m in samples[length][:per_length]],
        )
        for length in LENGTHS
    }


# ---------------------------------------------------------------- data


def test_lengths_reproduce_the_reference_grid():
    grid = data.copy_lengths(16000)
    assert len(grid) == 32 and grid[0] == 8 and grid[-1] == 16000
    # the reference curve's published lengths (numpy's int cast truncates)
    assert {523, 4134, 4650, 5166, 9293} <= set(grid)
    assert grid == [int(x) for x in np.linspace(8, 16000, 32, dtype=int)]
    geo = data.copy_lengths(16000, spacing="geometric")
    assert geo == sorted(set(int(x) for x in np.geomspace(8, 16000, 32, dtype=int))) and geo[-1] == 16000
    assert data.copy_lengths(20, num=32) == list(range(8, 21))  # duplicates dropped
    with pytest.raises(ValueError):
        data.copy_lengths(4)
    with pytest.raises(ValueError, match="spacing"):
        data.copy_lengths(100, spacing="cubic")


def test_sample_starts_follow_the_reference_draw_order():
    starts = data.sample_starts(10_000, [8, 500, 40], 4, seed=0)
    random.seed(0)  # the reference: global random seeded once, lengths in order, samples within
    for length in (8, 40, 500):
        assert starts[length] == [random.randint(0, 10_000 - 3 * length) for _ in range(4)]
    with pytest.raises(ValueError, match="at least 3000 tokens"):
        data.sample_starts(2999, [1000], 1)


def test_samples_are_built_token_by_token(model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    from lm_eval_longctx.tasks.forgetting_curve import special_token_ids

    bos, eos = special_token_ids(tok)
    assert (bos, eos) == (tok.bos_token_id, tok.eos_token_id) and bos != eos
    stream = np.arange(1000, 1300)
    length, start = 5, 10
    copy = data.forgetting_curve_sample(stream, length, start, "copy", bos, eos)
    lm = data.forgetting_curve_sample(stream, length, start, "lm", bos, eos)
    s = [1010, 1011, 1012, 1013, 1014]
    assert copy.tolist() == [bos, *s, bos, *s, eos]
    assert lm.tolist() == [bos, 1295, 1296, 1297, 1298, 1299, bos, *s, eos]
    first, stop = data.forgetting_curve_scored_targets(length)
    assert (first, stop) == (9, 12)  # second S is positions 7..11; its last ceil(5/2) = 3 are scored
    assert copy[first:stop].tolist() == s[-3:] and lm[first:stop].tolist() == s[-3:]
    assert copy[stop] == eos and copy[first - 1] == s[1]
    for length in (1, 2, 8, 99, 100):
        first, stop = data.forgetting_curve_scored_targets(length)
        assert stop - first == math.ceil(length / 2) and stop == 2 * length + 2
    with pytest.raises(ValueError):
        data.forgetting_curve_sample(stream, 10, 295, "copy", bos, eos)


def test_special_ids_come_from_the_tokenizer_with_a_documented_fallback():
    from lm_eval_longctx.settings import SettingsError
    from lm_eval_longctx.tasks.forgetting_curve import special_token_ids

    class Tok(SimpleNamespace):
        def __len__(self):
            return 100

    assert special_token_ids(Tok(bos_token_id=7, eos_token_id=9)) == (7, 9)
    # no BOS (e.g. Qwen2): the EOS stands in, as lm-eval's prefix token
    assert special_token_ids(Tok(bos_token_id=None, eos_token_id=9)) == (9, 9)
    assert special_token_ids(Tok(bos_token_id=7, eos_token_id=None)) == (7, 7)
    assert special_token_ids(Tok(bos_token_id=7, eos_token_id=9), 3, 4) == (3, 4)
    with pytest.raises(ValueError, match="bos_token_id"):
        special_token_ids(Tok(bos_token_id=None, eos_token_id=None))
    with pytest.raises(SettingsError, match="'eos_token_id' = 100 is outside the tokenizer's vocabulary"):
        special_token_ids(Tok(bos_token_id=7, eos_token_id=9), 3, 100)


def test_corpus_pieces_and_token_stream(corpus, model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    docs = data.load_book_pieces(data_files=corpus)
    rows = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    assert docs.texts == [p for r in rows for p in (r["short_book_title"] + "\n", r["text"] + "\n")]
    stream = data.token_stream(tok, docs.texts)
    expected = [t for p in docs.texts for t in tok(p)["input_ids"]]
    assert stream.tolist() == expected and stream.tolist().count(tok.bos_token_id) == len(docs.texts)
    bare = data.token_stream(tok, docs.texts, add_special_tokens=False)
    assert len(bare) == len(stream) - len(docs.texts)


# ---------------------------------------------------------------- engine


def test_score_long_batch_equals_one_full_forward_per_sequence():
    model = tiny.tiny_llama(vocab_size=61, seed=3)
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 61, (50,), generator=gen) for _ in range(3)]
    seqs[1][25:] = seqs[1][:25]  # a repeat, so some predictions are greedy hits
    full = []
    for s in seqs:
        with torch.no_grad():
            full.append(torch.log_softmax(model(s[None]).logits[0, :-1].float(), -1))
    for chunk, score_from in ((7, 20), (64, 1), (16, 49)):
        out = engine.score_long_batch(model, seqs, chunk_size=chunk, score_from=score_from)
        for s, f, r in zip(seqs, full, out):
            t = np.arange(score_from, 50)  # targets scored
            want = f[t - 1, s[t]].numpy()
            np.testing.assert_allclose(r.logprob[t - 1], want, atol=1e-4)
            assert (r.greedy[t - 1] == (f[t - 1].argmax(-1) == s[t]).numpy()).all()
            assert np.isnan(r.logprob[: score_from - 1]).all() and not r.greedy[: score_from - 1].any()
            single = engine.score_long(model, s, chunk_size=chunk, score_from=score_from)
            np.testing.assert_allclose(r.logprob, single.logprob, atol=1e-5)
    assert engine.score_long_batch(model, seqs, 7, 20)[1].greedy.any()
    with pytest.raises(engine.ScoringError, match="one length"):
        engine.score_long_batch(model, [seqs[0], seqs[0][:40]])
    assert engine.score_long_batch(model, []) == []


# ---------------------------------------------------------------- memory lengths


def test_memory_lengths_on_synthetic_curves():
    L = np.array([8, 100, 200, 300, 400])
    fine, coarse = metrics.fine_memory_length, metrics.coarse_memory_length
    # monotonic forgetting: the reference Llama-3-8B points
    ref_l = np.array([523, 4134, 4650, 5166, 9293])
    assert fine(ref_l, [0.999, 0.999, 0.845, 0.50, 0.069]) == 4134
    assert coarse(ref_l, [0.999, 0.999, 0.845, 0.50, 0.069], [0.51, 0.53, 0.44, 0.28, 0.05]) == 9293
    # never above the threshold / always above
    assert fine(L, [0.5] * 5) == 0 and coarse(L, [0.5] * 5, [0.5] * 5) == 0
    assert fine(L, [1.0] * 5) == 400 and coarse(L, [1.0] * 5, [0.2] * 5) == 400
    # thresholds are strict: exactly 99% / exactly 1 point do not count
    assert fine(L[:1], [0.99]) == 0 and coarse(L[:1], [0.75], [0.74]) == 0
    assert fine(L[:1], [np.mean([0.99] * 10)]) == 0 and fine(L[:1], [0.9901]) == 8
    # non-monotonic: a dip at 200 and a recovery at 300
    copy = [1.0, 1.0, 0.9, 1.0, 0.3]
    assert fine(L, copy) == 300 and fine(L, copy, rule="contiguous") == 100
    # a noisy first point (l = 8 scores 4 tokens: one miss in 40 is 97.5%)
    copy = [0.975, 1.0, 1.0, 0.6, 0.3]
    assert fine(L, copy) == 200 and fine(L, copy, rule="contiguous") == 0
    # failed (NaN) lengths never qualify; they end a contiguous run
    copy = [1.0, np.nan, 1.0, 0.2, 0.2]
    lm = [0.1, np.nan, 0.1, 0.2, 0.2]
    assert fine(L, copy) == 200 and fine(L, copy, rule="contiguous") == 8
    assert coarse(L, copy, lm) == 200 and coarse(L, copy, lm, rule="contiguous") == 8
    with pytest.raises(ValueError, match="rule"):
        fine(L, copy, rule="median")
    # from samples: per-length means, a length with a failed sample is failed
    items = [(8, 1.0, 0.1), (8, 1.0, 0.2), (50, 0.995, 0.5), (50, 0.99, 0.5), (90, 1.0, 0.1), (90, np.nan, np.nan)]
    assert metrics.fine_memory_length_from_samples(items) == 50.0  # mean 0.9925 > 0.99
    assert metrics.coarse_memory_length_from_samples(items) == 50.0
    assert metrics.failed_lengths_from_samples(items) == [90] and metrics.n_failed_lengths_from_samples(items) == 1.0
    curve = metrics.forgetting_curve_by_length(*zip(*items))
    assert curve["n"].tolist() == [2, 2, 2] and curve["failed"].tolist() == [False, False, True]
    assert curve["copy_std"][1] == pytest.approx(np.std([0.995, 0.99]))


# ---------------------------------------------------------------- through the harness


@pytest.mark.integration
def test_accuracies_equal_brute_force_through_the_harness(run, brute):
    r = run["results"][TASK]
    hits = 0
    for length in LENGTHS:
        copy, lm = brute[length]
        assert r[f"copy_acc@{length:05d},none"] == pytest.approx(np.mean(copy), abs=1e-12)
        assert r[f"lm_acc@{length:05d},none"] == pytest.approx(np.mean(lm), abs=1e-12)
        assert r[f"copy_acc@{length:05d}_stderr,none"] == pytest.approx(np.std(copy, ddof=1) / np.sqrt(len(copy)))
        hits += sum(x > 0 for x in copy + lm)
    assert hits >= 4  # not a comparison of zeros
    # memory lengths, recomputed here from the brute-force curve: fine = largest length where copy
    # > 99%; coarse = end of the run of lengths, from the first, where copy - LM > 1 point
    copy_mean = {x: np.mean(brute[x][0]) for x in LENGTHS}
    lm_mean = {x: np.mean(brute[x][1]) for x in LENGTHS}
    assert r["fine_memory_length,none"] == max([x for x in LENGTHS if copy_mean[x] > 0.99], default=0)
    coarse = 0
    for x in LENGTHS:
        if not copy_mean[x] - lm_mean[x] > 0.01:
            break
        coarse = x
    assert r["coarse_memory_length,none"] == coarse
    assert r["n_failed_lengths,none"] == 0
    assert run["n-samples"][TASK] == {"original": N_SAMPLES * len(LENGTHS), "effective": LIMIT}


@pytest.mark.integration
def test_results_table_lists_the_curve_in_length_order(run):
    from lm_eval.utils import make_table

    table = make_table(run)
    rows = [line.split("|")[5].strip() for line in table.splitlines() if "acc@" in line]
    assert rows == [f"copy_acc@{x:05d}" for x in LENGTHS] + [f"lm_acc@{x:05d}" for x in LENGTHS]
    rec = run["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["lengths"] == LENGTHS and rec["samples_per_length"] == N_SAMPLES and rec["seed"] == 0
    assert rec["bos_token_id"] == 1 and rec["eos_token_id"] == 2 and rec["model_max_length"] == 4096
    assert len(rec["data"]["stream_sha256"]) == 64 and rec["data"]["num_pieces"] == 6
    # docs are sample-major and responses are one-line summaries
    samples = sorted(run["samples"][TASK], key=lambda s: s["doc_id"])
    assert [(s["doc"]["sample"], s["doc"]["length"]) for s in samples] == [(k, x) for k in range(2) for x in LENGTHS]
    assert json.loads(str(samples[0]["resps"][0][0]))["mode"] == "copy" and len(str(samples[0]["resps"])) < 200


@pytest.mark.integration
def test_samples_file_holds_per_length_hits_and_counts(run, tmp_path):
    """What `lm_eval --log_samples` writes per (sample, length): the accuracies and memory-length items as JSON
    numbers, each response's scored tokens and greedy hits as a JSON summary, and a target naming what is
    predicted."""
    _, files = save_like_lm_eval(run, tmp_path)
    lines = sorted(files[TASK], key=lambda x: x["doc_id"])
    assert len(lines) == LIMIT and all(len(json.dumps(x)) < 20_000 for x in lines)
    for line in lines:
        length, start = line["doc"]["length"], line["doc"]["start"]
        name = f"{length:05d}"
        numbers = [m for m in line["metrics"] if m != "skipped_lengths"]  # skipped_lengths: (length, reason text)
        assert all(json_numbers(line[m]) for m in numbers) and line["skipped_lengths"] == [length, ""]
        copy, lm = (json.loads(r[0]) for r in line["resps"])
        for summary, mode in ((copy, "copy"), (lm, "lm")):
            assert summary == {
                "mode": mode,
                "length": length,
                "n_scored": (length + 1) // 2,
                "n_correct": summary["n_correct"],
            }
        assert line[f"copy_acc@{name}"] == copy["n_correct"] / copy["n_scored"]
        assert line[f"lm_acc@{name}"] == lm["n_correct"] / lm["n_scored"]
        assert line["fine_memory_length"] == [length, line[f"copy_acc@{name}"], line[f"lm_acc@{name}"]]
        assert line["target"] == (
            f"greedy predictions of the last {(length + 1) // 2} tokens of S = stream[{start}:{start + length}], "
            "read after S (copy) and after unrelated text (lm)"
        )


@pytest.mark.integration
def test_a_length_the_engine_cannot_score_ends_the_run_with_its_error(trained_dir, corpus, monkeypatch):
    real = engine.score_long_batch

    def fails_at_50(model, seqs, **kwargs):
        if len(seqs[0]) == 2 * 50 + 3:
            raise engine.ScoringError("simulated failure")
        return real(model, seqs, **kwargs)

    monkeypatch.setattr(engine, "score_long_batch", fails_at_50)
    with pytest.raises(engine.ScoringError, match=r"copy length 50 \(103-token samples\): simulated failure"):
        run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT)


@pytest.mark.integration
def test_a_length_out_of_memory_is_skipped_and_named_with_its_reason(
    trained_dir, corpus, run, monkeypatch, caplog, tmp_path
):
    real = engine.score_long_batch

    def oom_at_50(model, seqs, **kwargs):
        if len(seqs[0]) == 2 * 50 + 3:  # what the engine raises when every plan ran out of memory
            raise engine.OutOfMemoryScoringError("simulated")
        return real(model, seqs, **kwargs)

    monkeypatch.setattr(engine, "score_long_batch", oom_at_50)
    cache = str(tmp_path / "cache")
    with caplog.at_level("WARNING", logger="lm_eval_longctx"):
        res = run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT, use_cache=cache)
    r, ok = res["results"][TASK], run["results"][TASK]
    assert math.isnan(r["copy_acc@00050,none"]) and math.isnan(r["lm_acc@00050,none"])
    assert r["n_failed_lengths,none"] == 1 and ok["n_failed_lengths,none"] == 0
    assert r["skipped_lengths,none"] == "50: out of memory at one sample per forward (simulated)"
    assert ok["skipped_lengths,none"] == "none"
    for length in (8, 21, 99):
        assert r[f"copy_acc@{length:05d},none"] == ok[f"copy_acc@{length:05d},none"]
    assert any("copy length 50 (103-token samples) is skipped" in m for m in caplog.messages)
    # the printed table names it too
    from lm_eval.utils import make_table

    assert "50: out of memory at one sample per forward" in make_table(res)
    # the skip is not cached: with the cause gone, the same cache gives the full curve
    monkeypatch.setattr(engine, "score_long_batch", real)
    again = run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT, use_cache=cache)["results"][TASK]
    assert again["copy_acc@00050,none"] == ok["copy_acc@00050,none"] and again["n_failed_lengths,none"] == 0


def test_out_of_memory_halves_the_batch_then_fails_only_its_length(trained_dir, monkeypatch):
    from lm_eval_longctx.engine import plans
    from lm_eval_longctx.harness import glue as harness
    from lm_eval_longctx.tasks import forgetting_curve as fc

    stream = np.arange(3, 400) % 250 + 3
    fc._STREAMS["test-stream"] = stream
    model = AutoModelForCausalLM.from_pretrained(trained_dir, dtype=torch.float32).eval()
    calls = []

    def oom_for(real):
        def scores(self, ids_dev, ids, first):
            calls.append((self.strategy, ids.shape[1], ids.shape[0]))
            if ids.shape[1] == 2 * 30 + 3 or (ids.shape[1] == 2 * 10 + 3 and ids.shape[0] > 1):
                raise torch.cuda.OutOfMemoryError("simulated")
            return real(self, ids_dev, ids, first)

        return scores

    real_full, real_chunked = plans.FullPlan.scores, plans.ChunkedPlan.scores
    monkeypatch.setattr(plans.FullPlan, "scores", oom_for(real_full))
    monkeypatch.setattr(plans.ChunkedPlan, "scores", oom_for(real_chunked))

    def spec(length, start, mode):
        return {
            "kind": fc.KIND,
            "stream": "test-stream",
            "mode": mode,
            "length": length,
            "start": start,
            "bos": 1,
            "eos": 2,
            "chunk_size": 8,
            "batch_size": 4,
        }

    items = [("x", spec(x, st, m)) for x in (10, 30) for st in (0, 5, 9) for m in ("copy", "lm")]
    ctx = harness.ScoringContext(model, None, 4096, 8)
    out = fc.serve(ctx, items)
    assert [o.error == "" for o in out] == [True] * 6 + [False] * 6
    assert out[-1].error.startswith("out of memory at one sample per forward (model type 'llama': out of memory")
    # halved to one sample per forward, then the rest of the length at one per forward
    assert calls[:8] == [("full", 23, 4), ("full", 23, 2)] + [("full", 23, 1)] * 6
    # the longer length tried every plan, one forward and chunks, before it was skipped
    assert {(strategy, rows) for strategy, width, rows in calls if width == 63} == {
        ("full", 4),
        ("full", 2),
        ("full", 1),
        ("chunked", 4),
        ("chunked", 2),
        ("chunked", 1),
    }
    monkeypatch.setattr(plans.FullPlan, "scores", real_full)
    monkeypatch.setattr(plans.ChunkedPlan, "scores", real_chunked)
    again = fc.serve(ctx, items[:6])
    assert [(o.n_scored, o.n_correct) for o in again] == [(o.n_scored, o.n_correct) for o in out[:6]]
    # a sample longer than the model's maximum stops the run before any length is scored, unless allowed
    short_ctx = harness.ScoringContext(model, None, 40, 8)
    scored = []
    real = engine.score_long_batch
    monkeypatch.setattr(engine, "score_long_batch", lambda *a, **k: scored.append(1) or real(*a, **k))
    with pytest.raises(engine.ScoringError, match="maximum length 40"):
        fc.serve(short_ctx, items)
    assert scored == []
    out = fc.serve(short_ctx, [(t, {**s, "allow_beyond_max_length": True}) for t, s in items])
    assert all(o.error == "" and o.n_scored == 15 for o in out[6:])


@pytest.mark.integration
def test_default_lengths_fit_the_model_and_beyond_needs_a_request(trained_dir, corpus):
    md = {"data_files": corpus, "num_lengths": 4, "samples_per_length": 1}
    res = run_task(TASK, trained_dir, md, model_args={"max_length": 64})
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["model_max_length"] == 64 and rec["lengths"] == [8, 15, 22, 30]  # 2 * 30 + 3 <= 64
    with pytest.raises(ValueError, match="allow_beyond_max_length"):
        run_task(TASK, trained_dir, {**md, "max_len": 40}, model_args={"max_length": 64})
    # (memory-length settings reach the aggregation: any copying beats a threshold of 0)
    res = run_task(
        TASK,
        trained_dir,
        {**md, "max_len": 40, "allow_beyond_max_length": True, "fine_threshold": 0, "coarse_rule": "largest"},
        model_args={"max_length": 64},
    )
    r = res["results"][TASK]
    assert r["n_failed_lengths,none"] == 0 and np.isfinite(r["copy_acc@00040,none"])
    lengths = res["configs"][TASK]["metadata"]["longctx_settings"]["lengths"]
    assert lengths[-1] == 40 and r["fine_memory_length,none"] == 40
    gaps = {x: r[f"copy_acc@{x:05d},none"] - r[f"lm_acc@{x:05d},none"] for x in lengths}
    assert r["coarse_memory_length,none"] == max([x for x in lengths if gaps[x] > 0.01], default=0)
    longest = [s for s in res["samples"][TASK] if s["doc"]["length"] == 40][0]
    assert json.loads(str(longest["resps"][0][0]))["n_scored"] == 20  # 83-token samples scored whole, not cut


# ---------------------------------------------------------------- plots


@pytest.mark.integration
def test_png_beside_saved_results_and_plot_script(run, tmp_path):
    pytest.importorskip("matplotlib")
    from lm_eval.loggers import EvaluationTracker

    from lm_eval_longctx.harness import glue as harness

    harness.install()
    results = {k: v for k, v in run.items() if k != "samples"}
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    tracker.save_results_aggregated(results=json.loads(json.dumps(results, default=str)), samples=None)
    saved = list((tmp_path / "out" / "tiny").glob("results_*.json"))
    assert len(saved) == 1
    png = saved[0].with_name(f"{saved[0].stem}_{TASK}.png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    curve = plotting.curve_from_results(json.loads(saved[0].read_text()))
    assert curve.lengths.tolist() == LENGTHS
    # bands: population std (the reference's np.std) from stderr and the 2 samples per length
    r = run["results"][TASK]
    se = r["copy_acc@00021_stderr,none"]
    assert curve.copy_std[1] == pytest.approx(se * math.sqrt(2 - 1))

    other = tmp_path / "other.json"
    synthetic = json.loads(saved[0].read_text())
    synthetic["model_name"] = "other-model"
    other.write_text(json.dumps(synthetic))
    out = tmp_path / "two.png"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "plot_forgetting_curve.py"), str(saved[0]), str(other), "-o", str(out)],
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.exists() and out.stat().st_size > 10_000


# ---------------------------------------------------------------- the picture, from curves (no model)


def _curve(fine, coarse, lengths=(16, 64, 256, 1024)):
    lengths = np.array(lengths, dtype=np.int64)
    n = len(lengths)
    copy, lm, std = np.linspace(1.0, 0.3, n), np.full(n, 0.03), np.full(n, 0.08)
    return plotting.ForgettingCurve(
        "m", lengths, copy, std, lm, std, np.zeros(n, bool), fine, coarse, None, "geometric"
    )


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _region_spans(ax, name):
    return [p for p in ax.patches if p.get_label().startswith(name)]


def test_picture_draws_amnesia_only_where_a_length_was_tested_beyond_memory():
    pytest.importorskip("matplotlib")
    forgets = plotting.forgetting_curve_figure([_curve(64, 256)]).axes[0]
    assert "amnesia (> 256)" in _legend(forgets) and len(_region_spans(forgets, "amnesia")) == 1
    assert "fine-grained memory (<= 64)" in _legend(forgets) and "coarse-grained memory (<= 256)" in _legend(forgets)
    # memory up to the longest length tested: no amnesia drawn or named, and the memory length is a lower bound
    remembers = plotting.forgetting_curve_figure([_curve(1024, 1024)]).axes[0]
    assert not [t for t in _legend(remembers) if t.startswith("amnesia")] and not _region_spans(remembers, "amnesia")
    assert "fine-grained memory (<= 1024, longest tested)" in _legend(remembers)
    # no memory at all: amnesia everywhere
    blank = plotting.forgetting_curve_figure([_curve(None, None)]).axes[0]
    assert _legend(blank)[-1] == "amnesia" and len(_region_spans(blank, "amnesia")) == 1


@pytest.mark.parametrize("log_x", [True, False])
def test_picture_shows_the_first_and_last_points_and_their_bands_whole(log_x):
    pytest.importorskip("matplotlib")
    curve = _curve(64, 256)
    fig = plotting.forgetting_curve_figure([curve], log_x=log_x)
    ax = fig.axes[0]
    fig.canvas.draw()
    box = ax.get_window_extent()
    points = [line for line in ax.get_lines() if line.get_marker() in ("o", "s")]
    assert len(points) == 2
    for line in points:
        radius = (line.get_markersize() / 2 + line.get_markeredgewidth()) * fig.dpi / 72
        x = ax.transData.transform(line.get_xydata())[:, 0]
        assert x.min() - radius > box.x0 and x.max() + radius < box.x1, (log_x, x, box)
    low, high = ax.get_ylim()  # the LM band dips below 0 and the copy band rises above 1: both inside
    assert low < (curve.lm_mean - curve.lm_std).min() and high > (curve.copy_mean + curve.copy_std).max()
    if log_x:  # the tested lengths as ticks, in plain numbers
        assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "64", "256", "1024"]
