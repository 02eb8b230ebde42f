"""Per-token export (``export_tokens``): written through the harness, compared with the task's own numbers and with
slow per-token forwards of the tiny models; folders it did not create are never written into."""

import json
import math

import numpy as np
import pytest
import torch

from lm_eval_longctx.data import export_files
from lm_eval_longctx.report import gate, results, viewer
from lm_eval_longctx.tasks import longppl
from tests.brute_force import brute_force_doc
from tests.harness_utils import run_task, write_docs
from tests.tiny import load

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


K, D, ALPHA, BETA = 48, 20, 0.5, -10.0
TASK = "longppl_govreport"


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = [t[:2500] for t in corpus_texts[:3]] + ["short document."]
    return texts, write_docs(tmp_path_factory.mktemp("data") / "docs.jsonl", texts)


def _md(docs, model_dirs, cache, **extra):
    return {
        "data_files": docs[1],
        "evaluator": model_dirs["b"],
        "trunc_len": K,
        "sliding_window": D,
        "alpha": ALPHA,
        "beta": BETA,
        "span_cache_dir": str(cache),
        "soft_gamma": 5,
        **extra,
    }


@pytest.fixture(scope="module")
def exported(model_dirs, docs, tmp_path_factory):
    root = tmp_path_factory.mktemp("exp")
    cache = root / "spancache"
    export = root / "tokens"
    with pytest.warns(UserWarning, match="no key tokens"):
        res = run_task(TASK, model_dirs["a"], _md(docs, model_dirs, cache, export_tokens=str(export)))
    return res, export, cache


def test_export_round_trips_the_task_numbers(exported, docs):
    res, export, _ = exported
    folder = export / TASK
    files = export_files.document_files(folder)
    assert [f.name for f in files] == [f"doc_{i:05d}.npz" for i in range(len(docs[0]))]
    samples = {s["doc_id"]: s for s in res["samples"][TASK]}
    for f in files:
        d = export_files.load_document(f)
        s = samples[d["doc_id"]]
        assert d["text"] == docs[0][d["doc_id"]]
        # the task's own per-document pairs, exactly, and recomputed from the per-token columns
        assert (d["key_nll_sum"], d["n_key"]) == tuple(s["longppl"]) and (d["nll_sum"], d["n_targets"]) == tuple(
            s["ppl"]
        )
        lp = d["logprob"][1:].astype(np.float64)
        assert -lp[d["key"][1:]].sum() == pytest.approx(d["key_nll_sum"], rel=1e-12)
        assert int(d["key"].sum()) == d["n_key"] and not d["key"][0] and np.isnan(d["logprob"][0])
        np.testing.assert_array_equal(d["nll"], -d["logprob"])
    r = res["results"][TASK]
    again = viewer.longppl_from_export(export)
    assert again["longppl"] == r["longppl,none"] and again["ppl"] == r["ppl,none"] and again["n_docs"] == 4
    # LongPPL-soft from the exported weights
    num = den = 0.0
    for d in export_files.iter_documents(folder):
        num += float(np.sum(d["soft_weight"][1:] * d["nll"][1:].astype(np.float64)))
        den += float(np.sum(d["soft_weight"][1:]))
    assert math.exp(num / den) == pytest.approx(r["longppl_soft,none"], rel=1e-6)


def test_exported_columns_equal_slow_per_token_forwards(exported, docs, model_dirs):
    _, export, _ = exported
    (ev_model, ev_tok), (model, tok) = load(model_dirs["b"]), load(model_dirs["a"])
    n_key_total = 0
    for i, text in enumerate(docs[0][:3]):
        d = export_files.load_document(export / TASK / f"doc_{i:05d}.npz")
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        np.testing.assert_array_equal(d["token_id"], enc["input_ids"])
        np.testing.assert_array_equal(np.stack([d["char_start"], d["char_end"]], 1), enc["offset_mapping"])
        with torch.no_grad():
            full = torch.log_softmax(model(torch.tensor([enc["input_ids"]])).logits[0].float(), -1)
        ids = torch.tensor(enc["input_ids"])
        want = full[:-1].gather(1, ids[1:, None])[:, 0].numpy()
        np.testing.assert_allclose(d["logprob"][1:], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(d["greedy"][1:], full[:-1].argmax(-1).numpy() == ids[1:].numpy())
        assert d["greedy"].any()  # not vacuous
        # key flags: the brute-force key tokens of the LongPPL test
        kn, kc, *_ = brute_force_doc(text, (ev_model, ev_tok), (model, tok), K, D, ALPHA, BETA)
        assert int(d["key"].sum()) == kc
        n_key_total += kc
        # evaluator columns: its own tokenization (with BOS), long pass and LSD
        ev = ev_tok(text, return_offsets_mapping=True)
        np.testing.assert_array_equal(d["evaluator_token_id"], ev["input_ids"])
        np.testing.assert_array_equal(
            np.stack([d["evaluator_char_start"], d["evaluator_char_end"]], 1), ev["offset_mapping"]
        )
        with torch.no_grad():
            efull = torch.log_softmax(ev_model(torch.tensor([ev["input_ids"]])).logits[0].float(), -1)
        eids = torch.tensor(ev["input_ids"])
        np.testing.assert_allclose(
            d["evaluator_logprob_long"][1:], efull[:-1].gather(1, eids[1:, None])[:, 0].numpy(), rtol=1e-5, atol=1e-5
        )
        short = d["evaluator_logprob_short"]
        assert np.isnan(short[:K]).all() and not np.isnan(short[K:]).any()  # token t >= K has a window
        np.testing.assert_allclose(d["evaluator_lsd"], d["evaluator_logprob_long"] - short, atol=1e-5, equal_nan=True)
        with np.errstate(invalid="ignore"):
            want_key = (d["evaluator_lsd"] > ALPHA) & (d["evaluator_logprob_long"] > BETA)
        np.testing.assert_array_equal(d["evaluator_key"], want_key)
        # per evaluated token: the LSD / LCL of the evaluator token holding its last character (slow loop)
        for t in range(len(d["token_id"])):
            last = max(d["char_end"][t] - 1, d["char_start"][t])
            j = max(k for k in range(len(eids)) if d["evaluator_char_start"][k] <= last)
            np.testing.assert_equal(d["lsd"][t], d["evaluator_lsd"][j])
            np.testing.assert_equal(
                d["lcl"][t], np.nan if np.isnan(d["evaluator_lsd"][j]) else d["evaluator_logprob_long"][j]
            )
    assert n_key_total > 10


def test_manifest_and_settings_record_the_path_only(exported, docs):
    res, export, _ = exported
    rec = res["configs"][TASK]["metadata"]["longctx_settings"]
    assert rec["export_tokens"] == str(export.resolve())
    m = export_files.read_manifest(export / TASK)
    assert m["format"] == export_files.FORMAT and m["task"] == TASK
    assert m["settings"]["data"]["texts_sha256"] == rec["data"]["texts_sha256"]
    # the results add, under runtime, how the requests were scored (known once they are)
    runtime = dict(rec["runtime"])
    assert runtime.pop("scoring")["model_type"] == "llama" and runtime.pop("evaluator_scoring")
    assert {k: v for k, v in m["settings"].items()} == json.loads(json.dumps({**rec, "runtime": runtime}, default=str))
    assert set(m["columns"]) >= {"token_id", "key", "lsd", "evaluator_lsd"}


def test_export_changes_no_number_and_reads_cached_judgements(exported, docs, model_dirs, tmp_path):
    res, export, cache = exported
    # the second run reads the span cache (written by the first): the same arrays, evaluator columns included
    with pytest.warns(UserWarning, match="no key tokens"):
        plain = run_task(TASK, model_dirs["a"], _md(docs, model_dirs, cache))
        again = run_task(TASK, model_dirs["a"], _md(docs, model_dirs, cache, export_tokens=str(tmp_path / "t2")))
    for name in ("longppl,none", "ppl,none", "longppl_soft,none", "key_token_fraction,none"):
        assert plain["results"][TASK][name] == res["results"][TASK][name] == again["results"][TASK][name]
    assert "export_tokens" not in plain["configs"][TASK]["metadata"]["longctx_settings"]
    for f in export_files.document_files(export / TASK):
        a, b = export_files.load_document(f), export_files.load_document(tmp_path / "t2" / TASK / f.name)
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    # a run with an export and one without are comparable by the regression gate
    runs = [
        results.Run(
            metrics={},
            settings={TASK: r["configs"][TASK]["metadata"]["longctx_settings"]},
            versions={TASK: 1},
            n_samples={TASK: 4},
            model="m",
        )
        for r in (plain, again)
    ]
    assert gate.settings_differences(runs[0], runs[1], [TASK]) == {}


def test_self_evaluator_export(model_dirs, docs, tmp_path):
    res = run_task(
        TASK,
        model_dirs["a"],
        {
            "data_files": docs[1],
            "evaluator": "self",
            "trunc_len": K,
            "sliding_window": D,
            "alpha": ALPHA,
            "beta": BETA,
            "export_tokens": str(tmp_path),
        },
    )
    again = viewer.longppl_from_export(tmp_path)
    assert again["longppl"] == res["results"][TASK]["longppl,none"]
    d = export_files.load_document(tmp_path / TASK / "doc_00000.npz")
    # the evaluated model judges itself: its evaluator pass (with BOS) is a second tokenization of the same text
    assert "evaluator_logprob_long" in d and len(d["evaluator_char_start"]) >= len(d["token_id"])


def test_folders_the_task_did_not_create_are_refused(model_dirs, docs, tmp_path):
    foreign = tmp_path / "mine"
    (foreign / TASK).mkdir(parents=True)
    (foreign / TASK / "notes.txt").write_text("keep me")
    with pytest.raises(export_files.ExportFolderError, match="not empty and was not created by a token export"):
        run_task(
            TASK,
            model_dirs["a"],
            {
                "data_files": docs[1],
                "evaluator": "self",
                "trunc_len": K,
                "sliding_window": D,
                "export_tokens": str(foreign),
            },
        )
    assert [p.name for p in (foreign / TASK).iterdir()] == ["notes.txt"]
    # an earlier export is not overwritten either
    earlier = tmp_path / "earlier" / TASK
    earlier.mkdir(parents=True)
    (earlier / export_files.MANIFEST).write_text(json.dumps({"format": export_files.FORMAT, "created": "x"}))
    with pytest.raises(export_files.ExportFolderError, match="already holds a token export"):
        export_files.check_folder(earlier)
    # a file where the folder should be
    (tmp_path / "file").write_text("")
    with pytest.raises(export_files.ExportFolderError, match="not a folder"):
        export_files.check_folder(tmp_path / "file")
    # an empty folder, or none, is fine; the root may hold other things (each task writes its own subfolder)
    (tmp_path / "empty").mkdir()
    export_files.check_folder(tmp_path / "empty")
    export_files.check_folder(tmp_path / "absent")


def test_ranks_of_one_launch_share_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    ex = export_files.TokenExport(tmp_path, TASK)
    ex.write(0, {"x": np.arange(3)}, {"k": 1})
    export_files.TokenExport(tmp_path, TASK).write(1, {"x": np.arange(2)}, {"k": 1})  # the other rank
    assert sorted(p.name for p in (tmp_path / TASK).iterdir()) == ["doc_00000.npz", "doc_00001.npz", "manifest.json"]
    monkeypatch.setenv("MASTER_PORT", "29501")  # another launch
    with pytest.raises(export_files.ExportFolderError, match="already holds"):
        export_files.TokenExport(tmp_path, TASK)


def test_setting_parsing():
    assert export_files.parse_setting(None) is None and export_files.parse_setting("none") is None
    assert export_files.parse_setting("") is None
    assert export_files.parse_setting("x/y").endswith("x/y")
    with pytest.raises(ValueError, match="export_tokens must be a folder path"):
        export_files.parse_setting(3)


def test_validation_gives_each_variant_its_own_export(tmp_path, monkeypatch):
    from lm_eval_longctx.demo import known_answer, run

    seen = []

    class Enough(Exception):
        pass

    def fake_run_demo(out, model_dir, budget, extra_metadata, echo):
        seen.append(extra_metadata["export_tokens"])
        if len(seen) == 2:
            raise Enough
        return {"files": {"results_json": None}}

    monkeypatch.setattr(run, "run_demo", fake_run_demo)
    monkeypatch.setattr(known_answer, "read_run", lambda path: None)
    with pytest.raises(Enough):
        known_answer.run_validation(
            tmp_path / "val",
            budget="ci",
            steps=0,
            variants=["long", "none"],
            echo=False,
            extra_metadata={"export_tokens": str(tmp_path / "tokens")},
            log_fn=lambda *a: None,
        )
    assert seen == [str(tmp_path / "tokens" / "long"), str(tmp_path / "tokens" / "none")]


def _scored(text, rng):
    from lm_eval_longctx.engine import scoring

    words = text.split(" ")
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    offsets = np.stack([starts, starts + np.array([len(w) for w in words])], 1)
    n = len(words)
    lp = -rng.random(n - 1).astype(np.float32) * 5
    return scoring.SequenceScores(np.arange(n), offsets, scoring.TokenLogprobs(lp, rng.random(n - 1) < 0.3))


def test_judgements_without_per_token_numbers(tmp_path):
    """Key spans from files carry no evaluator numbers; older cache entries carry LSD but no LCL: the export
    keeps what there is, and the key flags still come from the spans."""
    from lm_eval_longctx.keytokens import evaluator, spans_to_tokens
    from lm_eval_longctx.report import viewer

    rng = np.random.default_rng(0)
    text = " ".join(f"w{i}" for i in range(40))
    scored = _scored(text, rng)
    spans = [
        (int(scored.offsets[5, 0]), int(scored.offsets[7, 1])),
        (int(scored.offsets[20, 0]), int(scored.offsets[20, 1])),
    ]
    key_idx = spans_to_tokens.key_target_indices(scored.offsets, spans)
    doc = {"doc_id": 0, "text": text}
    from_files = longppl.longppl_arrays(doc, scored, evaluator.EvaluatorJudgement(spans), key_idx, 2.0, -2.0)
    assert not any(k.startswith("evaluator_") for k in from_files)
    assert np.isnan(from_files["lsd"]).all() and np.isnan(from_files["lcl"]).all()
    assert np.flatnonzero(from_files["key"]).tolist() == [5, 6, 7, 20]
    # an older cache entry: the evaluator's offsets (here: one BOS, then the same words) and LSD, no LCL
    ev_offsets = np.concatenate([[[0, 0]], scored.offsets])
    lsd = np.where(np.arange(len(ev_offsets) - 1) < 10, np.nan, rng.normal(0, 2, len(ev_offsets) - 1)).astype(
        np.float32
    )
    cached = evaluator.EvaluatorJudgement(spans, ev_offsets, lsd)
    arrays = longppl.longppl_arrays(doc, scored, cached, key_idx, 2.0, -2.0)
    assert "evaluator_logprob_long" not in arrays and np.isnan(arrays["lcl"]).all()
    np.testing.assert_array_equal(arrays["lsd"], np.concatenate([[np.nan], lsd])[1:])  # token i is evaluator token i+1
    assert np.flatnonzero(arrays["evaluator_key"]).tolist() == [6, 7, 8, 21]
    # the viewer draws such an export: flags from the spans, no shading where there is no LSD
    ex = export_files.TokenExport(tmp_path, TASK)
    ex.write(0, from_files, {"alpha": 2.0, "beta": -2.0})
    info = viewer.build_page([tmp_path], tmp_path / "p.html")
    assert info["n_key"] == [4] and info["n_tokens"] == [40]
