"""No setting, file or cache can silently change a number: each input tried wrong, as a new user would."""

from __future__ import annotations

import contextvars
import json
import multiprocessing
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import errors, output_dirs
from lm_eval_longctx.engine.scoring import SequenceScores, TokenLogprobs
from lm_eval_longctx.harness import contacts, evaluated_model, serving
from lm_eval_longctx.keytokens import span_files, spans_to_tokens
from lm_eval_longctx.keytokens.cache import SpanCache
from lm_eval_longctx.keytokens.evaluator import (
    EvaluatorJudgement,
    evaluator_identity,
    evaluator_max_length,
    evaluator_request,
    judge_from_scores,
)
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import declarations, forgetting_curve, longeval, longppl, retrieval_gain
from tests import tiny
from tests.harness_utils import run_task, write_docs

ROOT = Path(__file__).resolve().parents[2]
LONGPPL = "longppl_govreport"
K, D = 48, 20


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = [t[:2500] for t in corpus_texts[:3]]
    return texts, write_docs(tmp_path_factory.mktemp("trustdata") / "docs.jsonl", texts)


def _md(docs, **kw):
    return {"data_files": docs[1], "trunc_len": K, "sliding_window": D, "alpha": 0.5, "beta": -10.0, **kw}


@pytest.fixture
def no_evaluator(monkeypatch):
    """Fail if any evaluator is loaded: errors must come before a model runs."""

    def refuse(*a, **k):
        raise AssertionError("an evaluator was loaded")

    monkeypatch.setattr("lm_eval_longctx.keytokens.evaluator.load_evaluator", refuse)


# ------------------------------------------------------------------ 1. settings


def test_unknown_key_names_it_and_suggests_the_closest():
    contacts.install()
    with pytest.raises(SettingsError, match=r"unknown setting 'trunc_lenn'.*Did you mean 'trunc_len'\?"):
        longppl.SETTINGS.parse({"trunc_lenn": 64})
    with pytest.raises(SettingsError, match="unknown setting 'smaples_per_length'.*samples_per_length"):
        forgetting_curve.SETTINGS.parse({"smaples_per_length": 3})


def test_keys_lm_eval_puts_into_the_metadata_are_allowed():
    contacts.install()
    md = {
        "pretrained": "x",
        "dtype": "float32",
        "max_length": 128,
        "version": 1,
        "config_source": "y.yaml",
        "trust_remote_code": False,
        "parallelize": True,
    }
    assert longppl.SETTINGS.parse(md)["alpha"] == 2.0
    # a setting of another task of the suite (one --metadata reaches every task of a run)
    assert longppl.SETTINGS.parse({"lengths": [8, 16]})["alpha"] == 2.0
    # a key for another suite's task is left to it (a log line), or named in other_tasks_keys (no line)
    assert longppl.SETTINGS.parse({"num_samples": 5})["alpha"] == 2.0
    longppl.SETTINGS.parse({"num_samples": 5, "other_tasks_keys": ["num_samples"]})
    # lm-eval's own length key (RULER, BABILong) is every task's
    assert longppl.SETTINGS.parse({"max_seq_lengths": [4096]})["max_seq_lengths"] == [4096]


@pytest.mark.parametrize(
    "typo, meant",
    [
        ("trunc_lenn", "trunc_len"),
        ("aplha", "alpha"),
        ("max_lenght", "max_length"),
        ("evaluater", "evaluator"),
        ("trunc_length", "trunc_len"),
        ("Trunc-Len", "trunc_len"),
        ("betta", "beta"),
        ("other_task_keys", "other_tasks_keys"),
    ],
)
def test_a_misspelling_of_our_key_is_refused_naming_the_key_meant(typo, meant):
    contacts.install()
    with pytest.raises(SettingsError, match=rf"unknown setting '{typo}'.*Did you mean '{meant}'\?.*other_tasks_keys"):
        longppl.SETTINGS.parse({typo: 1})


# keys of other suites' tasks (RULER, lm-eval's own YAMLs): none is close to one of ours
OTHER_SUITES_KEYS = [
    "num_samples",
    "canonical_task",
    "task_pretty_name",
    "description",
    "sampler",
    "samples",
    "ignore_case",
    "num_fewshot",
    "qa_split",
    "dataset_name",
    "chat_template",
    "max_new_tokens",
    "seq_lengths",
]


def test_keys_of_other_suites_are_left_to_their_tasks_with_one_line(caplog, monkeypatch):
    contacts.install()
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))  # nothing said yet
    md = {k: 1 for k in OTHER_SUITES_KEYS} | {"tokenizer": "x", "pretrained": "y"}
    with caplog.at_level("WARNING", logger="lm_eval_longctx"):
        longppl.SETTINGS.parse(md)
        forgetting_curve.SETTINGS.parse(md)  # a second task of the run: no second line
    lines = [r.getMessage() for r in caplog.records if "left to the other tasks" in r.getMessage()]
    assert len(lines) == 1 and all(k in lines[0] for k in OTHER_SUITES_KEYS)
    assert "tokenizer" not in lines[0] and "pretrained" not in lines[0]


BAD_VALUES = [
    (longppl.SETTINGS, "num_docs", -1),
    (longppl.SETTINGS, "num_docs", 0),
    (longppl.SETTINGS, "num_docs", 2.5),
    (longppl.SETTINGS, "num_docs", True),
    (longppl.SETTINGS, "num_docs", "ten"),
    (longppl.SETTINGS, "max_tokens", -1),
    (longppl.SETTINGS, "soft_gamma", 0),
    (longppl.SETTINGS, "soft_gamma", -5),
    (longppl.SETTINGS, "soft_gamma", "nan"),
    (longppl.SETTINGS, "soft_gamma", float("nan")),
    (longppl.SETTINGS, "alpha", float("inf")),
    (longppl.SETTINGS, "beta", "-inf"),
    (longppl.SETTINGS, "trunc_len", "4k"),
    (longppl.SETTINGS, "chunk_size", 0),
    (longppl.SETTINGS, "evaluator_dtype", "fp8"),
    (longppl.SETTINGS, "allow_beyond_max_length", "ture"),
    (longppl.SETTINGS, "evaluator_max_memory", "70GiB"),
    (forgetting_curve.SETTINGS, "fine_threshold", float("nan")),
    (forgetting_curve.SETTINGS, "fine_threshold", 1.5),
    (forgetting_curve.SETTINGS, "coarse_margin", "inf"),
    (forgetting_curve.SETTINGS, "lengths", [8, 0]),
    (forgetting_curve.SETTINGS, "lengths", "8,x"),
    (forgetting_curve.SETTINGS, "samples_per_length", 0),
    (forgetting_curve.SETTINGS, "spacing", "cubic"),
    (forgetting_curve.SETTINGS, "bos_token_id", -1),
    (forgetting_curve.SETTINGS, "seed", -3),
    (retrieval_gain.SETTINGS, "anchor_min", 1.5),
    (retrieval_gain.SETTINGS, "bos", "maybe"),
    (retrieval_gain.SETTINGS, "n_queries", 0),
    (retrieval_gain.SETTINGS, "separator", 3),
    (longeval.SETTINGS, "num_lines", [0, 200]),
    (longeval.SETTINGS, "over_length", "ignore"),
    (longeval.SETTINGS, "num_cases", 1e9 + 0.5),
]


@pytest.mark.parametrize("declaration,key,value", BAD_VALUES, ids=[f"{d.owner}.{k}={v!r}" for d, k, v in BAD_VALUES])
def test_wrong_type_or_range_is_an_error_naming_key_value_and_what_is_allowed(declaration, key, value):
    with pytest.raises(SettingsError) as err:
        declaration.parse({key: value})
    msg = str(err.value)
    assert f"'{key}'" in msg and repr(value) in msg and "must be" in msg


LOCATION_KEYS = [
    (declaration, key)
    for declaration in declarations.task_declarations().values()
    for key in (
        "dataset_path",
        "decode_tokenizer",
        "data_files",
        "evaluator",
        "key_spans_dir",
        "span_cache_dir",
        "tokenizer",
        "testcases",
        "export_tokens",
    )
    if key in declaration.by_name
]


@pytest.mark.parametrize("declaration,key", LOCATION_KEYS, ids=[f"{d.owner}.{k}" for d, k in LOCATION_KEYS])
def test_a_path_too_long_for_the_file_system_is_an_error_naming_the_key(declaration, key):
    for value in ("x" * 5000, "dir/" + "é" * 128, "a\x00b", ""):  # whole > 4096 bytes; a part > 255; NUL; empty
        if value == "" and declaration.by_name[key].optional:
            continue  # "" is null there
        with pytest.raises(SettingsError, match=f"'{key}' = .* it must be .*255 bytes"):
            declaration.parse({key: value})
    with pytest.raises(SettingsError, match=f"'{key}' = .*5002 characters"):  # the value is not shown whole
        declaration.parse({key: "x" * 5000})
    long_but_valid = "/".join(["d" * 255] * 16)  # 4095 bytes
    assert declaration.parse({key: long_but_valid})[key] == long_but_valid
    if key == "testcases":
        assert declaration.parse({key: ["a.jsonl", "b.jsonl"]})[key] == ["a.jsonl", "b.jsonl"]
        with pytest.raises(SettingsError, match="'testcases'"):
            declaration.parse({key: ["a.jsonl", "x" * 5000]})


def test_values_given_as_strings_or_whole_floats_mean_the_same():
    s = longppl.SETTINGS.parse(
        {"num_docs": "3", "trunc_len": 64.0, "allow_beyond_max_length": "true", "soft_gamma": "5"}
    )
    assert (s["num_docs"], s["trunc_len"], s["allow_beyond_max_length"], s["soft_gamma"]) == (3, 64, True, 5.0)
    assert s.explicit == {"num_docs", "trunc_len", "allow_beyond_max_length", "soft_gamma"}
    assert forgetting_curve.SETTINGS.parse({"spacing": "log", "lengths": "64,8,8"})["lengths"] == [8, 64]
    assert retrieval_gain.SETTINGS.parse({"bos": False})["bos"] == "never"


@pytest.mark.integration
def test_a_typo_through_the_harness_fails_before_any_model_runs(docs, model_dirs, no_evaluator):
    with pytest.raises(SettingsError, match="Did you mean 'trunc_len'"):
        run_task(LONGPPL, model_dirs["a"], {**_md(docs, evaluator=model_dirs["b"]), "trunc_lenn": 64})
    with pytest.raises(SettingsError, match="'num_docs' = -1"):
        run_task(LONGPPL, model_dirs["a"], _md(docs, evaluator=model_dirs["b"], num_docs=-1))


@pytest.mark.integration
def test_token_ids_outside_the_vocabulary_fail_when_the_task_is_built(model_dirs, tmp_path):
    corpus = write_docs(tmp_path / "books.jsonl", tiny.corpus_texts(2, 400))
    with pytest.raises(SettingsError, match="bos_token_id.*outside the tokenizer's vocabulary"):
        run_task(
            "forgetting_curve",
            model_dirs["a"],
            {"data_files": corpus, "lengths": [8], "samples_per_length": 1, "bos_token_id": 10**6},
        )


def test_the_docs_settings_tables_are_the_declarations():
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # as scripts/settings_tables.py
    for path in documents:
        text = path.read_text(encoding="utf-8")
        assert declarations.render_settings_tables(text) == text, f"{path}: run python scripts/settings_tables.py"
    pages = "".join(p.read_text(encoding="utf-8") for p in documents)
    for owner in declarations.all_declarations():  # every declaration has its table somewhere
        assert f"<!-- settings: {owner} -->" in pages, owner
    # the check can fail: a changed default shows
    page = (ROOT / "docs" / "tasks" / "longppl_govreport.md").read_text(encoding="utf-8")
    stale = re.sub(r"(\| `alpha` \|[^|]*\| )`2.0`", r"\1`3.0`", page)
    assert stale != page and declarations.render_settings_tables(stale) != stale


# ------------------------------------------------------------------ 2. key spans: files and caches


@pytest.fixture(scope="module")
def evaluated_spans(docs, model_dirs):
    """Key spans of the docs as the evaluator judges them (K, D, alpha 0.5, beta -10)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dirs["b"]).eval()
    tok = AutoTokenizer.from_pretrained(model_dirs["b"])
    from lm_eval_longctx.keytokens import text_scoring

    request = evaluator_request(K, D)
    return [judge_from_scores(text_scoring.score_text(model, tok, t, request, None), 0.5, -10.0).spans for t in docs[0]]


def _span_folder(path, docs, spans, **manifest):
    span_files.write_span_dir(
        path,
        spans,
        docs[0],
        {"evaluator": "some/evaluator", "trunc_len": K, "sliding_window": D, "alpha": 0.5, "beta": -10.0, **manifest},
    )
    return str(path)


@pytest.mark.integration
def test_manifest_supplies_the_settings_and_a_contradiction_is_an_error(docs, model_dirs, evaluated_spans, tmp_path):
    folder = _span_folder(tmp_path / "spans", docs, evaluated_spans)
    res = run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": folder})
    rec = res["configs"][LONGPPL]["metadata"]["longctx_settings"]
    assert (rec["trunc_len"], rec["sliding_window"], rec["alpha"], rec["evaluator"]) == (K, D, 0.5, "some/evaluator")
    assert rec["key_spans_verified"] is True
    with pytest.raises(SettingsError, match="trunc_len = 4096.*computed with trunc_len = 48"):
        run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": folder, "trunc_len": 4096})
    with pytest.raises(SettingsError, match="evaluator"):
        run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": folder, "evaluator": "self"})
    # the same value is no contradiction
    run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": folder, "trunc_len": K})


def test_a_mixed_or_changed_span_folder_is_refused(docs, evaluated_spans, tmp_path):
    a = Path(_span_folder(tmp_path / "a", docs, evaluated_spans))
    b = Path(_span_folder(tmp_path / "b", docs, [s[: len(s) // 2] for s in evaluated_spans], alpha=1.0))
    (a / "slice_1.txt").write_bytes((b / "slice_1.txt").read_bytes())  # one file from another folder
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match="slice_1.txt does not match the checksum"):
        span_files.read_span_dir(a, docs[0])
    assert span_files.read_span_dir(b, docs[0]).verified


def test_span_files_are_checked_against_their_texts(docs, evaluated_spans, tmp_path):
    folder = tmp_path / "plain"
    for i, s in enumerate(evaluated_spans):
        span_files.write_span_file(folder / f"slice_{i}.txt", s)
    with pytest.warns(UserWarning, match="no key_spans.json"):
        assert span_files.read_span_dir(folder, docs[0]).verified is False
    (folder / "slice_2.txt").write_text(f"[0, 5];[10, {len(docs[0][2]) + 1}]")
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match=r"slice_2.txt: item 1 .* ends beyond the document"):
        span_files.read_span_dir(folder, docs[0])
    (folder / "slice_2.txt").write_text("[10, 12];[3, 5]")
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match="sorted by start"):
        span_files.read_span_dir(folder, docs[0])
    (folder / "slice_2.txt").write_bytes(b"[1, 2]\xff\xfe")
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match="slice_2.txt: not UTF-8"):
        span_files.read_span_dir(folder, docs[0])
    (folder / span_files.MANIFEST).write_text("{not json")
    with pytest.raises(spans_to_tokens.KeySpanFormatError, match="key_spans.json: not a JSON manifest"):
        span_files.read_span_dir(folder, docs[0])


@pytest.mark.integration
def test_a_folder_without_manifest_is_recorded_as_unverified(docs, model_dirs, evaluated_spans, tmp_path):
    folder = tmp_path / "reference_layout"
    for i, s in enumerate(evaluated_spans):
        span_files.write_span_file(folder / f"slice_{i}.txt", s)
    with pytest.warns(UserWarning, match="key_spans_verified: false"):
        res = run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "key_spans_dir": str(folder)})
    rec = res["configs"][LONGPPL]["metadata"]["longctx_settings"]
    assert rec["key_spans_verified"] is False and rec["trunc_len"] is None and rec["evaluator"] is None


def _judgement(rng, n=50):
    offsets = np.cumsum(rng.integers(1, 5, size=(n, 2)), axis=0).astype(np.int64)
    offsets[:, 1] = offsets[:, 0] + 1
    lsd = rng.normal(size=n - 1).astype(np.float32)
    return EvaluatorJudgement([(int(a), int(b)) for a, b in offsets[::7]], offsets, lsd)


def test_a_tampered_or_truncated_cache_entry_is_a_miss_never_a_value(tmp_path):
    cache = SpanCache(tmp_path)
    j = _judgement(np.random.default_rng(0))
    key = cache.key("text", {"k": 1})
    cache.put(key, j, {"k": 1})
    got = cache.get(key)
    assert got.spans == j.spans and np.array_equal(got.lsd, j.lsd)
    path = cache.path(key)
    good = path.read_bytes()
    # same size, other content: a flipped byte inside the arrays
    with np.load(path) as z:
        arrays = dict(z)
    arrays["spans"] = arrays["spans"] + 1
    np.savez(path, **arrays)
    with pytest.warns(UserWarning, match="unusable.*checksum"):
        assert cache.get(key) is None
    path.write_bytes(good[: len(good) // 2])
    with pytest.warns(UserWarning, match="unusable"):
        assert cache.get(key) is None
    path.write_bytes(b"")
    with pytest.warns(UserWarning, match="unusable"):
        assert cache.get(key) is None
    # an entry copied under another key is refused too
    path.write_bytes(good)
    other = cache.key("other text", {"k": 1})
    cache.path(other).write_bytes(good)
    with pytest.warns(UserWarning, match="unusable"):
        assert cache.get(other) is None
    assert cache.get(key) is not None


def _hammer(directory: str, seed: int, rounds: int) -> int:
    """Write and read the same few keys over and over; return how many reads were wrong."""
    cache = SpanCache(directory)
    rng = np.random.default_rng(seed)
    wrong = 0
    for r in range(rounds):
        k = int(rng.integers(0, 4))
        j = _judgement(np.random.default_rng(k))  # the value of key k is always the same
        key = cache.key(f"text {k}", {})
        if r % 2:
            cache.put(key, j, {})
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a torn read would warn: count it
                try:
                    got = cache.get(key)
                except UserWarning:
                    wrong += 1
                    continue
            if got is not None and (got.spans != j.spans or not np.array_equal(got.lsd, j.lsd)):
                wrong += 1
    return wrong


@pytest.mark.integration
def test_two_processes_hammering_the_same_keys_never_read_a_torn_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        wrong = pool.starmap(_hammer, [(str(tmp_path), 1, 300), (str(tmp_path), 2, 300)])
    assert wrong == [0, 0]
    assert not list(tmp_path.glob("*.tmp"))  # no temporary file left behind
    assert len(list(tmp_path.glob("*.spans.npz"))) == 4


def test_a_changed_evaluator_folder_is_another_evaluator(model_dirs, tmp_path):
    import shutil

    copy = tmp_path / "evaluator"
    shutil.copytree(model_dirs["b"], copy)
    before = evaluator_identity(str(copy), memo_dir=tmp_path / "memo")
    assert before == evaluator_identity(str(copy), memo_dir=tmp_path / "memo")  # memoised, same
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    after = evaluator_identity(str(copy), memo_dir=tmp_path / "memo")
    assert after["files_sha256"] != before["files_sha256"] and after["path"] == before["path"]


def _fake_hub_repo(root: Path, repo: str, model_dir: str, commits: list[str]) -> Path:
    """A hub cache as huggingface_hub lays it out: refs/main -> snapshots/<commit>/..."""
    import shutil

    base = root / f"models--{repo.replace('/', '--')}"
    for c in commits:
        shutil.copytree(model_dir, base / "snapshots" / c)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commits[0])
    return base


def test_a_moved_hub_revision_is_another_evaluator_offline_too(model_dirs, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    a, b = "a" * 40, "b" * 40
    base = _fake_hub_repo(tmp_path / "hub", "org/evaluator", model_dirs["b"], [a, b])
    first = evaluator_identity("org/evaluator")
    assert first == {"name": "org/evaluator", "source": "hub", "revision": None, "commit": a}
    assert evaluator_max_length(first) == 4096
    (base / "refs" / "main").write_text(b)  # the branch moved
    second = evaluator_identity("org/evaluator")
    assert second["commit"] == b
    cache = SpanCache(tmp_path)
    assert cache.key("t", {"evaluator": first}) != cache.key("t", {"evaluator": second})
    assert evaluator_identity("org/evaluator", revision=a)["commit"] == a


@pytest.mark.integration
def test_the_identity_is_recorded_on_cache_misses_and_hits_alike(docs, model_dirs, tmp_path):
    md = _md(docs, evaluator=model_dirs["b"], span_cache_dir=str(tmp_path / "cache"))
    miss = run_task(LONGPPL, model_dirs["a"], md)
    hit = run_task(LONGPPL, model_dirs["a"], md)
    rec1, rec2 = (r["configs"][LONGPPL]["metadata"]["longctx_settings"] for r in (miss, hit))
    # how the evaluator scored is recorded where it ran: on the miss; the hit read its spans from the cache
    assert rec1["runtime"].pop("evaluator_scoring")["passes"]["long"] == {"full": len(docs[0])}
    assert rec2["runtime"].pop("evaluator_scoring").startswith("no text judged in this run")
    assert rec1 == rec2 and rec1["evaluator_identity"]["source"] == "local"
    assert len(rec1["evaluator_identity"]["files_sha256"]) == 64
    assert miss["results"][LONGPPL]["longppl,none"] == hit["results"][LONGPPL]["longppl,none"]


@pytest.mark.integration
def test_an_evaluator_shorter_than_the_documents_is_an_error_on_misses_and_hits(docs, corpus_texts, tmp_path):
    short = tiny.save_tiny_model(
        tmp_path / "short_evaluator",
        corpus_texts,
        kind="wordpiece",
        vocab_size=400,
        seed=2,
        max_position_embeddings=128,
    )
    evaluated = tiny.save_tiny_model(tmp_path / "evaluated", corpus_texts, seed=1)
    md = _md(docs, evaluator=short, span_cache_dir=str(tmp_path / "cache"))
    from lm_eval_longctx.engine.scoring import ScoringError

    with pytest.raises(ScoringError, match="longer than its maximum length 128"):
        run_task(LONGPPL, evaluated, md)
    run_task(LONGPPL, evaluated, {**md, "allow_beyond_max_length": True})  # fills the cache
    with pytest.raises(ScoringError, match="longer than its maximum length 128"):
        run_task(LONGPPL, evaluated, md)  # a cache hit is checked too


# ------------------------------------------------------------------ 4. the harness's cache


@pytest.mark.integration
def test_a_use_cache_db_shared_by_two_models_never_replays_the_other(docs, model_dirs, tmp_path):
    md = {"data_files": docs[1], "evaluator": "self", "trunc_len": K, "sliding_window": D}
    db = str(tmp_path / "shared")
    plain = {m: run_task(LONGPPL, model_dirs[m], md)["results"][LONGPPL]["ppl,none"] for m in ("a", "b")}
    assert plain["a"] != plain["b"]
    cached = {m: run_task(LONGPPL, model_dirs[m], md, use_cache=db)["results"][LONGPPL]["ppl,none"] for m in ("a", "b")}
    again = {m: run_task(LONGPPL, model_dirs[m], md, use_cache=db)["results"][LONGPPL]["ppl,none"] for m in ("a", "b")}
    assert cached == plain and again == plain


def _lm_with_a_cache(model_dir: str, max_length: int):
    """What the harness reads of an HFLM: rank, batch size, maximum length, model, tokenizer, and a --use_cache dict."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class Stub:
        rank, batch_size = 0, 1
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)

        class cache_hook:
            dbdict: dict = {}

    Stub.max_length = max_length
    return Stub


def test_the_length_check_runs_on_cache_hits(model_dirs):
    from lm_eval.api.instance import Instance

    from lm_eval_longctx.engine.scoring import ScoringError

    Stub = _lm_with_a_cache(model_dirs["a"], max_length=16)
    spec = {"add_special_tokens": False, "chunk_size": 64}
    text = "word " * 20
    key = serving._spec_key(text, spec, serving.model_identity(Stub))
    long = TokenLogprobs(np.zeros(39, np.float32), np.zeros(39, bool))
    Stub.cache_hook.dbdict[key] = SequenceScores(np.arange(40), None, long).to_state()
    req = Instance("longctx_scores", {}, (text, spec), 0)
    with pytest.raises(ScoringError, match="40-token sequence is longer than the model's maximum length 16"):
        serving.serve_longctx_scores(Stub, [req], disable_tqdm=True)


def test_a_cached_result_of_another_layout_is_scored_again_and_rewritten(model_dirs):
    """A --use_cache entry written by another version (another layout of the result record) is a cache miss."""
    from lm_eval.api.instance import Instance

    Stub = _lm_with_a_cache(model_dirs["a"], max_length=4096)
    spec = {"add_special_tokens": False, "chunk_size": 64}
    text = "word " * 20
    key = serving._spec_key(text, spec, serving.model_identity(Stub))
    Stub.cache_hook.dbdict[key] = {"an_older_field": [1, 2, 3]}
    (result,) = serving.serve_longctx_scores(Stub, [Instance("longctx_scores", {}, (text, spec), 0)], True)
    assert isinstance(result, SequenceScores) and len(result.token_ids) > 1
    rewritten = SequenceScores.from_state(Stub.cache_hook.dbdict[key])
    np.testing.assert_array_equal(rewritten.long.logprob, result.long.logprob)


# ------------------------------------------------------------------ 5. fail early, say what to do


@pytest.mark.integration
def test_an_unsupported_backend_is_refused_when_the_task_is_built(docs, no_evaluator):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from tests.harness_utils import TASK_DIR

    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=_md(docs, evaluator="x/y"))
    with pytest.raises(evaluated_model.UnsupportedModelError, match="DummyLM backend.*--model hf"):
        simple_evaluate(model="dummy", tasks=[LONGPPL], task_manager=tm)


@pytest.mark.integration
def test_an_evaluator_that_cannot_be_had_gives_one_clear_message(docs, model_dirs):
    from lm_eval_longctx.errors import ResourceUnavailableError

    with pytest.raises(ResourceUnavailableError) as err:
        run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1]})  # the default evaluator, offline
    msg = str(err.value)
    assert "meta-llama/Llama-3.1-8B' (the default evaluator) cannot be loaded" in msg
    for way_out in ("key_spans_dir", '"evaluator": "self"', "lm-eval-longctx demo", "gated"):
        assert way_out in msg
    with pytest.raises(ResourceUnavailableError, match="'no-org/no-model' cannot be loaded"):
        run_task(LONGPPL, model_dirs["a"], {"data_files": docs[1], "evaluator": "no-org/no-model"})


@pytest.mark.integration
def test_a_dataset_that_cannot_be_had_names_it_and_the_ways_out(model_dirs):
    from lm_eval_longctx.errors import ResourceUnavailableError

    with pytest.raises(ResourceUnavailableError, match=r"(?s)emozilla/govreport-test-tokenized.*data_files"):
        run_task("retrieval_gain", model_dirs["a"], {})


@pytest.mark.parametrize(
    "content,expected",
    [
        (b'{"text": "caf\xe9"}\n', "not UTF-8"),
        (b'{"text": "a"}\n{"text": \n', "line 2: not JSON"),
        (b'["a", "b"]', "item 0 is not a JSON object"),
        (b'{"body": "a"}\n', "columns \\['body'\\]"),
    ],
)
@pytest.mark.integration
def test_bad_data_files_name_the_file_and_what_was_expected(model_dirs, tmp_path, content, expected):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=expected) as err:
        run_task("retrieval_gain", model_dirs["a"], {"data_files": str(path), "doc_tokens": 64})
    assert str(path) in str(err.value)


@pytest.mark.integration
def test_a_tokenizer_whose_offsets_do_not_fit_the_text_stops_the_run(docs, model_dirs, monkeypatch):
    """Custom tokenizer code with all-(0, 0) offsets: the run stops naming the tokenizer, no NaN LongPPL."""
    from transformers import AutoTokenizer

    tokenizer_class = type(AutoTokenizer.from_pretrained(model_dirs["a"]))
    real_call = tokenizer_class.__call__

    def zero_offsets(self, *args, **kwargs):
        enc = real_call(self, *args, **kwargs)
        if enc.get("offset_mapping") is not None:
            enc["offset_mapping"] = [(0, 0)] * len(enc["offset_mapping"])
        return enc

    monkeypatch.setattr(tokenizer_class, "__call__", zero_offsets)
    with pytest.raises(spans_to_tokens.OffsetsError, match=f"tokenizer {model_dirs['a']} does not fit.*character 0"):
        run_task(LONGPPL, model_dirs["a"], _md(docs, evaluator="self", num_docs=1))


# ------------------------------------------------------------------ 6. nothing is lost


@pytest.mark.integration
def test_commands_refuse_a_non_empty_folder_they_did_not_create(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(output_dirs.ForeignFolderError, match="not empty and was not created"):
        output_dirs.claim(foreign, "the demo")
    ours = output_dirs.claim(tmp_path / "new", "the demo")
    (ours / "results.json").write_text("{}")
    assert output_dirs.claim(ours, "the demo") == ours  # its own folder is reused
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for argv in (
        ["-m", "lm_eval_longctx", "demo", "--budget", "ci", "--out", str(foreign)],
        ["-m", "lm_eval_longctx", "validate", str(foreign), "--budget", "ci", "--steps", "0"],
        [str(ROOT / "scripts" / "make_demo_model.py"), str(foreign), "--steps", "0"],
    ):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode != 0 and "not empty" in proc.stderr, (argv, proc.stderr[-2000:])
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]
    assert (foreign / "thesis.tex").read_text() == "precious"


@pytest.mark.integration
def test_the_real_command_line_refuses_an_unsupported_backend_before_any_evaluator(docs, tmp_path):
    """lm-eval's CLI builds the model before it loads the tasks: the refusal still comes at task build,
    before the (here unavailable) evaluator is looked up."""
    md = json.dumps({"data_files": docs[1], "evaluator": "no-org/no-model"})
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--tasks", LONGPPL, "--model", "dummy", "--metadata", md, "--limit", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "longppl_govreport needs per-token scores" in proc.stderr and "DummyLM" in proc.stderr, proc.stderr[-3000:]
    assert "no-org/no-model" not in proc.stderr
