"""retrieval_gain_map (``tasks/retrieval_gain_map.py``): the cells and their conditions, the task against one full
forward per sequence (serve and through the harness), the known-answer variants, and its sizing from
max_seq_lengths: one rung per length, the whole with-context sequence holding it."""

from __future__ import annotations

import importlib.metadata
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx.engine import scoring
from lm_eval_longctx.harness import request_type
from lm_eval_longctx.metrics.gain_map import effective_length_by_depth
from lm_eval_longctx.report.pictures.gain_map_plot import map_from_results
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import retrieval_gain_map
from tests.brute_force import brute_last
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval, write_docs
from tests.tiny import load

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4
TASK = "retrieval_gain_map"
MD = {
    "context_lengths": [60, 120, 240],
    "depths": [0, 50, 100],
    "query_tokens": 6,
    "answer_tokens": 5,
    "separator": "\n",
    "chunk_size": 32,
}


def test_each_length_is_a_rung_whose_whole_sequence_holds_it():
    s = retrieval_gain_map.resolve_settings({"max_seq_lengths": [256, 1024]})
    assert retrieval_gain_map.settings_for_lengths([256, 512, 1024], 49, s) == {"context_lengths": [207, 463, 975]}
    with pytest.raises(SettingsError, match=r"context lengths \[11\] are too short.*max_seq_lengths \[60, 256\]"):
        retrieval_gain_map.settings_for_lengths([60, 256], 49, s)


def test_the_ci_preset_tests_three_depths_on_ten_documents_of_the_embedded_corpus():
    s = retrieval_gain_map.resolve_settings({"preset": "ci"})
    assert s["depths"] == [10, 50, 90] and s["num_docs"] == 10 and s["embedded_corpus"]
    assert s["max_seq_lengths"] == [256, 512, 1024] and s["context_lengths"] is None  # sized when built


# ------------------------------------------------------------------ cells


def settings(**kw):
    return retrieval_gain_map.resolve_settings({**MD, **kw})


def test_settings_are_checked():
    assert settings()["anchor_stride"] == 11
    with pytest.raises(SettingsError, match=r"'depths' = \[0, 50, 101\] is above its upper bound.* <= 100"):
        settings(depths=[0, 50, 101])
    with pytest.raises(SettingsError, match=r"lengths \[10\] are too short"):
        settings(context_lengths=[10, 60])
    with pytest.raises(SettingsError, match="unknown setting 'lenghts'"):
        retrieval_gain_map.resolve_settings({"lenghts": [100]})
    s = retrieval_gain_map.resolve_settings({"depths": "0, 30,60", "context_lengths": "4096,1024,2048"})
    assert s["depths"] == [0, 30, 60] and s["context_lengths"] == [1024, 2048, 4096]
    assert retrieval_gain_map.resolve_settings({})["depths"] == list(range(0, 100, 10))


def test_default_ladder_doubles_within_the_documents_and_the_model():
    s = retrieval_gain_map.resolve_settings({})
    assert retrieval_gain_map.default_ladder(s, [20000, 9000], 50, 32768) == [1024, 2048, 4096, 8192]
    assert retrieval_gain_map.default_ladder(s, [20000, 90000], 50, 8192) == [1024, 2048, 4096]  # 8192 + 50 > 8192
    assert retrieval_gain_map.default_ladder({**s, "allow_beyond_max_length": True}, [20000], 50, 8192) == [
        1024,
        2048,
        4096,
        8192,
        16384,
    ]
    assert retrieval_gain_map.default_ladder({**s, "max_context": 3000}, [20000], 50, None) == [1024, 2048]
    with pytest.raises(SettingsError, match="no context length"):
        retrieval_gain_map.default_ladder(s, [900], 50, None)


# ------------------------------------------------------------------ serve and the task


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = corpus_texts[:3]
    return texts, write_docs(tmp_path_factory.mktemp("rgmdata") / "docs.jsonl", texts)


def brute_force_map(model_dir, texts, md):
    """Per document, per cell: the with/without sequences built here from the documented recipe,
    one full forward each; returns gain [docs, lengths, depths]."""
    model, tok = load(model_dir)
    sep = tok(md["separator"], add_special_tokens=False)["input_ids"] if md["separator"] else []
    bos = [tok.bos_token_id]
    q, r = md["query_tokens"], md["answer_tokens"]
    n, stride = md.get("anchors_per_cell", 1), q + r
    out = []
    for text in texts:
        x = tok(text, add_special_tokens=False)["input_ids"]
        grid = []
        for L in md["context_lengths"]:
            row = []
            for d in md["depths"]:
                U = L - q - r
                a0 = min(int(math.floor(d * U / 100 + 0.5)), U - (n - 1) * stride)
                gains = []
                for a in range(a0, a0 + n * stride, stride):
                    qa = x[a : a + q + r]
                    nll_with = -brute_last(model, bos + x[:L] + sep + qa, r)[0].astype(np.float64).mean()
                    nll_without = -brute_last(model, bos + qa, r)[0].astype(np.float64).mean()
                    gains.append(nll_without - nll_with)
                row.append(np.mean(gains))
            grid.append(row)
        out.append(grid)
    return np.array(out)


def test_serve_equals_brute_force_with_several_anchors(model_dirs, docs):
    model, tok = load(model_dirs["a"])
    md = {**MD, "anchors_per_cell": 2, "separator": ""}
    spec = {
        **retrieval_gain_map.resolve_settings(md),
        "kind": retrieval_gain_map.KIND,
        "lengths": md["context_lengths"],
    }
    out = retrieval_gain_map.serve(request_type.ScoringContext(model, tok, None, 3), [(t, spec) for t in docs[0][:2]])
    expected = brute_force_map(model_dirs["a"], docs[0][:2], md)
    for scores, exp in zip(out, expected):
        np.testing.assert_allclose(scores.gain(), exp, atol=TOL, rtol=0)
        assert scores.with_logprob.shape == (3, 3, 2, 5)
    assert np.abs(expected).max() > 1e-3  # the context changes the numbers: not a vacuous test


def test_serve_mixed_requests_score_each_with_its_own_answer_length(model_dirs, docs):
    """Requests of one batch with other q, r and ladders: the shared without-context pass keeps them apart."""
    model, tok = load(model_dirs["a"])
    mds = [
        {**MD, "context_lengths": [60, 120], "depths": [0, 100]},
        {**MD, "context_lengths": [60, 120], "depths": [0, 100], "query_tokens": 6, "answer_tokens": 3},
    ]
    specs = [
        {**retrieval_gain_map.resolve_settings(md), "kind": retrieval_gain_map.KIND, "lengths": md["context_lengths"]}
        for md in mds
    ]
    out = retrieval_gain_map.serve(
        request_type.ScoringContext(model, tok, None, 4), [(docs[0][0], specs[0]), (docs[0][0], specs[1])]
    )
    for scores, md in zip(out, mds):
        assert scores.with_logprob.shape[-1] == md["answer_tokens"]
        np.testing.assert_allclose(scores.gain(), brute_force_map(model_dirs["a"], docs[0][:1], md)[0], atol=TOL)


@pytest.fixture(scope="module")
def harness_run(model_dirs, docs):
    return run_task(TASK, model_dirs["a"], {"data_files": docs[1], **MD})


@pytest.mark.integration
def test_task_equals_brute_force_through_the_harness(harness_run, model_dirs, docs):
    res = harness_run
    expected = brute_force_map(model_dirs["a"], docs[0], MD)
    r = res["results"][TASK]
    for i, L in enumerate(MD["context_lengths"]):
        for j, d in enumerate(MD["depths"]):
            name = f"gain@L{L:05d}_d{d:03d}"  # depth 100: three digits for every depth, so names sort
            assert r[f"{name},none"] == pytest.approx(expected[:, i, j].mean(), abs=TOL)
            assert r[f"{name}_stderr,none"] == pytest.approx(expected[:, i, j].std(ddof=1) / math.sqrt(3), abs=TOL)
        per_length = expected[:, i].mean(axis=1)
        assert r[f"gain@L{L:05d},none"] == pytest.approx(per_length.mean(), abs=TOL)
        assert r[f"gain@L{L:05d}_stderr,none"] == pytest.approx(per_length.std(ddof=1) / math.sqrt(3), abs=TOL)
    assert r["gain,none"] == pytest.approx(expected.mean(), abs=TOL)
    lengths = MD["context_lengths"]  # every depth read: the brute-force gains [documents, lengths, depths]
    assert r["effective_length,none"] == effective_length_by_depth(lengths, expected, fraction=0.5, base_minimum=0.5)
    assert r["effective_length_abs,none"] == effective_length_by_depth(lengths, expected, threshold=0.5)
    names = [k for k in r if k.startswith("gain@") and "stderr" not in k]
    assert len(names) == 3 * 3 + 3
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["lengths_used"] == [60, 120, 240] and rec["depths"] == [0, 50, 100] and rec["separator"] == "\n"
    assert rec["effective_fraction"] == 0.5 and rec["runtime"]["chunk_size"] == 32


@pytest.mark.integration
def test_samples_file_holds_per_cell_values(harness_run, tmp_path):
    """What `lm_eval --log_samples` writes per document: the cells' gains as JSON numbers, the response as a JSON
    summary with the token counts, the ladder and per cell the NLLs and the gain, and a target naming what is
    predicted."""
    _, files = save_like_lm_eval(harness_run, tmp_path)
    lines = sorted(files[TASK], key=lambda x: x["doc_id"])
    assert len(lines) == 3 and all(len(json.dumps(x)) < 20_000 for x in lines)
    for line in lines:
        assert all(json_numbers(line[m]) for m in line["metrics"])
        summary = json.loads(line["resps"][0][0])
        assert summary["lengths"] == MD["context_lengths"] and summary["depths"] == MD["depths"]
        assert summary["answer_tokens"] == 5 and summary["anchors_per_cell"] == 1
        assert summary["n_source_tokens"] >= 240 and summary["n_with_tokens"] > 240
        for key in ("nll_with", "nll_without", "gain"):
            assert json_numbers(summary[key]) and np.shape(summary[key]) == (3, 3)
        for i, L in enumerate(MD["context_lengths"]):
            for j, d in enumerate(MD["depths"]):
                assert summary["gain"][i][j] == line[f"gain@L{L:05d}_d{d:03d}"]
                nll_change = summary["nll_without"][i][j] - summary["nll_with"][i][j]
                assert nll_change == pytest.approx(summary["gain"][i][j], abs=1e-9)
        # the effective lengths' item: every cell's gain, per length then depth
        assert line["effective_length"] == line["effective_length_abs"] == summary["gain"]
        assert line["target"].startswith("per cell (L, depth): the answer tokens after each anchor's query")


@pytest.mark.integration
def test_default_ladder_from_the_tokenizer_and_the_model(model_dirs, docs):
    """No lengths: the model's tokenizer counts the documents and the ladder doubles from min_length."""
    md = {k: v for k, v in MD.items() if k != "context_lengths"}
    res = run_task(
        TASK, model_dirs["a"], {"data_files": docs[1], **md, "min_context": 50}, limit=1, model_args={"max_length": 300}
    )
    _, tok = load(model_dirs["a"])
    shortest = min(len(tok(t, add_special_tokens=False)["input_ids"]) for t in docs[0])
    sep = len(tok("\n", add_special_tokens=False)["input_ids"])
    cap = min(shortest, 300 - (1 + sep + 11))
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    expected = [50 * 2**k for k in range(10) if 50 * 2**k <= cap]
    assert rec["lengths_used"] == expected and rec["model_max_length"] == 300
    assert f"gain@L{expected[-1]:05d},none" in res["results"][TASK]


@pytest.mark.integration
def test_use_cache_serves_the_map_and_longer_than_the_model_is_an_error(model_dirs, docs, tmp_path, monkeypatch):
    md = {"data_files": docs[1], **MD}
    first = run_task(TASK, model_dirs["a"], md, limit=2, use_cache=str(tmp_path / "cache"))

    def fail(*a, **k):
        raise AssertionError("scored again although --use_cache holds the result")

    monkeypatch.setattr(scoring, "score_prefix_ladder", fail)
    monkeypatch.setattr(scoring, "score_sequence_ends", fail)
    second = run_task(TASK, model_dirs["a"], md, limit=2, use_cache=str(tmp_path / "cache"))
    assert second["results"][TASK] == first["results"][TASK]
    with pytest.raises(AssertionError, match="scored again"):
        run_task(TASK, model_dirs["a"], {**md, "depths": [0, 50]}, limit=2, use_cache=str(tmp_path / "cache"))
    monkeypatch.undo()
    # the longest with-context sequence is 1 + 240 + 1 + 11 = 253 tokens
    with pytest.raises(scoring.ScoringError, match="longer than the model's maximum length 250.*max_context"):
        run_task(TASK, model_dirs["a"], md, model_args={"max_length": 250}, limit=1)


@pytest.mark.integration
def test_png_beside_saved_results_and_plot_script(model_dirs, docs, tmp_path):
    pytest.importorskip("matplotlib")
    from lm_eval.loggers import EvaluationTracker

    run = run_task(TASK, model_dirs["a"], {"data_files": docs[1], **MD}, limit=2)
    results = {k: v for k, v in run.items() if k != "samples"}
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    tracker.save_results_aggregated(results=json.loads(json.dumps(results, default=str)), samples=None)
    [saved] = list((tmp_path / "out" / "tiny").glob("results_*.json"))
    png = saved.with_name(f"{saved.stem}_{TASK}.png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    m = map_from_results(json.loads(saved.read_text()))
    assert m.lengths.tolist() == MD["context_lengths"] and m.depths.tolist() == MD["depths"]
    # the results JSON says beside each effective length whether it only bounds the reach from below
    written = json.loads(saved.read_text())["longctx_bounds"][TASK]
    for metric in ("effective_length", "effective_length_abs"):
        value = run["results"][TASK][f"{metric},none"]
        assert written[metric] == {
            "value": value, "longest_tested": max(MD["context_lengths"]),
            "lower_bound": value >= max(MD["context_lengths"]),
        }  # fmt: skip
    assert m.gain[1, 2] == pytest.approx(run["results"][TASK]["gain@L00120_d100,none"])
    assert m.fraction == 0.5 and m.threshold == 0.5
    # what the evidence rests on, and the release that wrote the file (pip show's version)
    saved_data = json.loads(saved.read_text())
    assert saved_data["longctx_evidence"][TASK]["documents"] == 2
    assert saved_data["longctx_version"] == importlib.metadata.version("lm_eval_longctx") != "unknown"

    other = tmp_path / "other.json"
    synthetic = json.loads(saved.read_text())
    synthetic["model_name"] = "other-model"
    for k in list(synthetic["results"][TASK]):
        if k.startswith("gain@") and "stderr" not in k:
            synthetic["results"][TASK][k] = -synthetic["results"][TASK][k]
    other.write_text(json.dumps(synthetic))
    out = tmp_path / "two.png"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "plot_retrieval_gain_map.py"), str(saved), str(other), "-o", str(out)],
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.exists() and out.stat().st_size > 10_000


# ------------------------------------------------------------------ known answer


def known_answer_runs(root: Path, lengths=(256, 1024, 4096), depths=(0, 50, 90)):
    """The task through the harness on the untrained known-answer variants (steps 0: the copy circuit
    alone, built in seconds), on 2 embedded documents."""
    from lm_eval_longctx.data import embedded_corpus
    from lm_eval_longctx.demo import model

    texts = embedded_corpus.embedded_documents(chars_per_doc=30_000, n_docs=2)
    data_file = write_docs(root / "docs.jsonl", texts)
    runs = {}
    for name in model.VARIANT_ORDER:
        model.build_variant(name, root / name, steps=0, log=lambda *a: None)
        runs[name] = run_task(
            TASK,
            str(root / name),
            {"data_files": data_file, "context_lengths": list(lengths), "depths": list(depths)},
            log_samples=False,
        )
    return runs


@pytest.mark.integration
def test_known_answer_variants(tmp_path, first_model_variants):
    # The first demo model's untrained variants (rope_theta 1e6 / 1e4), whose copy reach is sharp: the shipped
    # recipe's untrained `short` (code band +6) keeps a gain of 1.87 nats at 4096 tokens against 6.86 at 256 (its
    # weak n-gram head, at a random LM's level of about 0, still finds three-token matches there). The trained
    # variants are validated in docs/demo-and-known-answer-validation.md.
    runs = known_answer_runs(tmp_path)
    r = {name: res["results"][TASK] for name, res in runs.items()}

    def per_length(name, L):
        return r[name][f"gain@L{L:05d},none"]

    # long: copies from everywhere in 4096 tokens; short: its gain collapses beyond its copy reach
    assert per_length("long", 4096) > 0.5 * per_length("long", 256) > 1.0
    assert per_length("short", 256) > 1.0 and per_length("short", 4096) < 0.25 * per_length("short", 256)
    # the collapse is a matter of distance: at 1024 the deepest cell (Q A ~100 tokens back) still copies,
    # the earliest one (~1000 tokens back) does not
    assert r["short"]["gain@L01024_d90,none"] > r["short"]["gain@L01024_d00,none"] + 2.0
    # none: no copy circuit, no gain anywhere
    cells = [v for k, v in r["none"].items() if k.startswith("gain@") and "stderr" not in k]
    assert len(cells) == 9 + 3 and max(abs(v) for v in cells) < 0.3
    for metric in ("effective_length", "effective_length_abs"):
        assert r["long"][f"{metric},none"] > r["short"][f"{metric},none"] > r["none"][f"{metric},none"], metric
    assert r["long"]["effective_length,none"] == 4096 and r["none"]["effective_length,none"] == 0
    # every depth is read: short's depth 0 at 1024 (about 1000 tokens back) has no gain, though its depth 90 does
    assert r["short"]["effective_length_abs,none"] == 256
