"""The forgetting curve (``tasks/forgetting_curve.py``): a bound on the samples per length, the samples built as
lm-eval reads them (their starts drawn in the reference's order, a length's when it is first reached), the checks of
its settings before the model loads, its special tokens; the harness run against brute force (the reference's
recipe), lengths that cannot be scored, and the picture written beside the results."""

from __future__ import annotations

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

from lm_eval_longctx.data import documents
from lm_eval_longctx.engine import plans, scoring
from lm_eval_longctx.harness import contacts, request_type
from lm_eval_longctx.report.pictures.forgetting_curve_plot import curve_from_results
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import forgetting_curve
from tests import tiny
from tests.harness_utils import (
    json_numbers,
    refuse_model_loading,
    run_task,
    save_like_lm_eval,
    write_books,
    write_docs,
)

ROOT = Path(__file__).resolve().parents[2]
TASK = "forgetting_curve"
LENGTHS = [8, 21, 50, 99]
N_SAMPLES = 3
LIMIT = 2 * len(LENGTHS)  # sample-major docs: two samples at every length


def test_samples_per_length_above_its_bound_is_refused_when_parsed():
    with pytest.raises(SettingsError, match=r"'samples_per_length' = 1000000000000 is above its upper bound"):
        forgetting_curve.resolve_settings({"samples_per_length": 10**12})
    with pytest.raises(SettingsError, match=r"'lengths' = .* is above its upper bound"):
        forgetting_curve.resolve_settings({"lengths": list(range(1, 20_002))})


def test_min_len_above_max_len_is_refused_when_parsed():
    with pytest.raises(SettingsError, match="'min_len' = 50 is above 'max_len' = 20; .* lower min_len or raise"):
        forgetting_curve.resolve_settings({"min_len": 50, "max_len": 20})
    assert forgetting_curve.resolve_settings({"min_len": 50, "lengths": [20]})["lengths"] == [20]  # lengths replace


class CountingRandom(random.Random):
    draws = 0

    def randint(self, a, b):
        CountingRandom.draws += 1
        return super().randint(a, b)


def test_sample_starts_are_drawn_a_length_at_a_time_in_the_reference_order(monkeypatch):
    lengths, n = [8, 500, 40], 4
    expected = documents.sample_starts(10_000, lengths, n, seed=3)
    monkeypatch.setattr(random, "Random", CountingRandom)
    CountingRandom.draws = 0
    starts = documents.SampleStarts(10_000, lengths, n, seed=3)
    assert starts.start(8, 2) == expected[8][2] and CountingRandom.draws == n  # the shortest length only
    assert starts.start(40, 0) == expected[40][0] and CountingRandom.draws == 2 * n
    assert [starts.start(x, k) for x in (8, 40, 500) for k in range(n)] == [
        expected[x][k] for x in (8, 40, 500) for k in range(n)
    ]
    with pytest.raises(ValueError, match="at least 3000 tokens"):  # every length checked at once
        documents.SampleStarts(2999, [10, 1000], 1)


@pytest.mark.integration
def test_limit_builds_only_the_samples_it_evaluates(model_dirs, tmp_path, monkeypatch):
    corpus = write_docs(tmp_path / "corpus.jsonl", tiny.corpus_texts())
    monkeypatch.setattr(random, "Random", CountingRandom)
    CountingRandom.draws = 0
    md = {"data_files": corpus, "lengths": [8, 16, 32], "samples_per_length": 10_000, "chunk_size": 16}
    res = run_task("forgetting_curve", model_dirs["a"], md, limit=2)
    assert res["n-samples"]["forgetting_curve"] == {"original": 30_000, "effective": 2}
    assert CountingRandom.draws == 2 * 10_000  # the starts of the two lengths the first two samples have


@pytest.mark.integration
def test_settings_are_checked_before_the_model_loads(monkeypatch, model_dirs):
    refuse_model_loading(monkeypatch)
    with pytest.raises(SettingsError, match=r"'samples_per_length' = 1000000000000 is above its upper bound"):
        run_task("forgetting_curve", model_dirs["a"], {"samples_per_length": 10**12}, limit=2)
    with pytest.raises(SettingsError, match="'min_len' = 50 is above 'max_len' = 20"):
        run_task("forgetting_curve", model_dirs["a"], {"min_len": 50, "max_len": 20})
    with pytest.raises(SettingsError, match=r"'bos_token_id' = -1 is not allowed"):
        run_task("forgetting_curve", model_dirs["a"], {"bos_token_id": -1})


def test_lengths_map_to_the_longest_copy_length_each_fits():
    s = forgetting_curve.resolve_settings({"max_seq_lengths": [256, 1024]})
    out = forgetting_curve.settings_for_lengths([256, 1024], s)
    assert out == {"lengths": [126, 510]}
    assert all(forgetting_curve.sample_tokens(x) <= n for x, n in zip(out["lengths"], [256, 1024]))
    assert forgetting_curve.sample_tokens(511) > 1024
    # a setting of the grid given: the grid, up to the copy length the longest length fits
    s = forgetting_curve.resolve_settings({"max_seq_lengths": [256, 1024], "num_lengths": 4})
    assert forgetting_curve.settings_for_lengths([256, 1024], s) == {"max_len": 510}
    with pytest.raises(SettingsError, match=r"lengths \[4\] of max_seq_lengths hold no copy sample"):
        forgetting_curve.settings_for_lengths([4, 100], s)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, corpus_texts):
    """Three 'books' with titles, as PG-19 rows."""
    return write_books(tmp_path_factory.mktemp("pg19") / "books.jsonl", corpus_texts[:3])


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


def test_special_ids_come_from_the_tokenizer_with_a_documented_fallback():
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
    real = scoring.score_long_batch

    def fails_at_50(model, seqs, **kwargs):
        if len(seqs[0]) == 2 * 50 + 3:
            raise scoring.ScoringError("simulated failure")
        return real(model, seqs, **kwargs)

    monkeypatch.setattr(scoring, "score_long_batch", fails_at_50)
    with pytest.raises(scoring.ScoringError, match=r"copy length 50 \(103-token samples\): simulated failure"):
        run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT)


@pytest.mark.integration
def test_a_length_out_of_memory_is_skipped_and_named_with_its_reason(
    trained_dir, corpus, run, monkeypatch, caplog, tmp_path
):
    real = scoring.score_long_batch

    def oom_at_50(model, seqs, **kwargs):
        if len(seqs[0]) == 2 * 50 + 3:  # what the engine raises when every plan ran out of memory
            raise scoring.OutOfMemoryScoringError("simulated")
        return real(model, seqs, **kwargs)

    monkeypatch.setattr(scoring, "score_long_batch", oom_at_50)
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
    monkeypatch.setattr(scoring, "score_long_batch", real)
    again = run_task(TASK, trained_dir, metadata(corpus), limit=LIMIT, use_cache=cache)["results"][TASK]
    assert again["copy_acc@00050,none"] == ok["copy_acc@00050,none"] and again["n_failed_lengths,none"] == 0


def test_out_of_memory_halves_the_batch_then_fails_only_its_length(trained_dir, monkeypatch):
    stream = np.arange(3, 400) % 250 + 3
    forgetting_curve._STREAMS["test-stream"] = stream
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
            "kind": forgetting_curve.KIND,
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
    ctx = request_type.ScoringContext(model, None, 4096, 8)
    out = forgetting_curve.serve(ctx, items)
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
    again = forgetting_curve.serve(ctx, items[:6])
    assert [(o.n_scored, o.n_correct) for o in again] == [(o.n_scored, o.n_correct) for o in out[:6]]
    # a sample longer than the model's maximum stops the run before any length is scored, unless allowed
    short_ctx = request_type.ScoringContext(model, None, 40, 8)
    scored = []
    real = scoring.score_long_batch
    monkeypatch.setattr(scoring, "score_long_batch", lambda *a, **k: scored.append(1) or real(*a, **k))
    with pytest.raises(scoring.ScoringError, match="maximum length 40"):
        forgetting_curve.serve(short_ctx, items)
    assert scored == []
    out = forgetting_curve.serve(short_ctx, [(t, {**s, "allow_beyond_max_length": True}) for t, s in items])
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

    contacts.install()
    results = {k: v for k, v in run.items() if k != "samples"}
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    tracker.save_results_aggregated(results=json.loads(json.dumps(results, default=str)), samples=None)
    saved = list((tmp_path / "out" / "tiny").glob("results_*.json"))
    assert len(saved) == 1
    png = saved[0].with_name(f"{saved[0].stem}_{TASK}.png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    curve = curve_from_results(json.loads(saved[0].read_text()))
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
