"""harness/serving.py: the request type served on the hf backend: evaluator 'self' against brute force, --use_cache
and --cache_requests, other backends, lengths, sharding, progress in tokens forwarded; the --use_cache database is an
optimisation the run goes on without."""

from __future__ import annotations

import logging
import math
import pickle
import sqlite3
import types
from dataclasses import dataclass

import pytest

from lm_eval_longctx.engine import scoring
from lm_eval_longctx.harness import evaluated_model, request_type, serving
from lm_eval_longctx.keytokens import text_scoring
from tests.brute_force import brute_force_doc
from tests.harness_utils import TASK_DIR, run_task, write_docs
from tests.tiny import load

# lm-eval's hf backend and whole runs: left out of the fast subset
pytestmark = pytest.mark.integration

# ------------------------------------------------------------------ the --use_cache database


@dataclass
class Echo:
    text: str

    def to_state(self) -> dict:
        return {"text": self.text}

    @classmethod
    def from_state(cls, state: dict) -> Echo:
        return cls(state["text"])


class FullDatabase(dict):
    def __setitem__(self, key, value):
        raise sqlite3.OperationalError("database or disk is full")


class DamagedDatabase(dict):
    def __contains__(self, key):
        raise sqlite3.DatabaseError("database disk image is malformed")


class DamagedEntries(dict):
    def __getitem__(self, key):
        raise pickle.UnpicklingError("invalid load key, '\\x00'")


def _serve(monkeypatch, database, n: int = 3) -> tuple[list, list[str]]:
    """Serve ``n`` requests of a kind that only echoes its text through ``longctx_scores`` with ``database`` as the
    --use_cache database; the results and the texts scored (not read from the database)."""
    from tests import tiny

    scored: list[str] = []

    def serve(ctx, items):
        scored.extend(text for text, _ in items)
        return [Echo(text) for text, _ in items]

    monkeypatch.setitem(
        request_type.REQUEST_KINDS, "echo", request_type.RequestKind("echo", serve, Echo.from_state, uses_model=False)
    )
    monkeypatch.setattr(serving, "model_identity", lambda lm: {"name": "a model"})
    lm = types.SimpleNamespace(
        cache_hook=types.SimpleNamespace(dbdict=database),
        batch_size=1,
        max_batch_size=None,
        max_length=None,
        rank=0,
        model=tiny.tiny_llama(),
        tokenizer=None,
    )
    requests = [types.SimpleNamespace(args=(f"text {k}", {"kind": "echo"}), task_name="t") for k in range(n)]
    return serving.serve_longctx_scores(lm, requests, disable_tqdm=True), scored


@pytest.mark.parametrize("database", [FullDatabase, DamagedDatabase])
def test_a_cache_database_that_fails_is_one_warning_and_the_run_goes_on(monkeypatch, caplog, database):
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        results, scored = _serve(monkeypatch, database())
    assert [r.text for r in results] == ["text 0", "text 1", "text 2"] and len(scored) == 3
    [warning] = [r.getMessage() for r in caplog.records if r.name == "lm_eval_longctx"]
    assert warning.startswith("--use_cache: the database cannot be") and "the run continues without" in warning


def test_a_damaged_cache_entry_is_a_miss(monkeypatch):
    database = DamagedEntries({"stale": b""})
    first, _ = _serve(monkeypatch, database)
    again, scored = _serve(monkeypatch, database)  # every entry is there, none can be read
    assert [r.text for r in again] == [r.text for r in first] and len(scored) == 3


# ------------------------------------------------------------------ progress in tokens forwarded


def test_a_tasks_progress_counts_tokens_against_its_plan_and_ends_at_what_ran():
    bar = serving.TokenProgress("longppl_govreport", planned=1000, n_requests=4, show=False)
    for n in (300, 300, 300):
        bar.tokens(n)
    bar.requests(2)
    assert (bar.n, bar.total, bar.updates, bar.requests_done) == (900, 1000, 3, 2)
    bar.tokens(400)  # past a short plan: the total grows, the bar never runs past its end
    assert bar.total == bar.n == 1300
    bar.revise(500)  # more to come (a revised plan), then less than what ran: never below it
    assert bar.total == 1800
    bar.revise(-10_000)
    assert bar.total == 1300
    bar.close()
    assert bar.total == 1300
    shown = serving.TokenProgress("t", planned=50, n_requests=1, show=True)
    shown.tokens(20)
    shown.close()
    assert shown.bar.total == 20 and shown.bar.n == 20 and shown.bar.unit == "tok"


def test_the_run_says_which_task_of_how_many_and_the_time_left_at_the_rate_so_far(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(serving.time, "perf_counter", lambda: clock[0])
    run = serving.RunProgress([6000, 3000, None])
    assert run.line(0, "a") == ("longctx_scores: task 1 of 3 (a); the time left is said from the second task on")
    clock[0] += 60.0  # 6,000 tokens in a minute: the 3,001 left take half a minute
    run.done(6000)
    assert run.line(1, "b") == "longctx_scores: task 2 of 3 (b); under a minute left for this and the 1 after it"
    clock[0] += 300.0  # 9,000 in 6 min: the last task's one token takes no time
    run.done(3000)
    assert run.line(2, "c").endswith("task 3 of 3 (c); under a minute left for this and the 0 after it")
    slow = serving.RunProgress([100, 1000])
    clock[0] += 120.0
    slow.done(100)
    assert slow.line(1, "b") == "longctx_scores: task 2 of 2 (b); about 20 min left for this and the 0 after it"
    assert serving.RunProgress([5]).line(0, "only") == "longctx_scores: task 1 of 1 (only)"


def test_each_task_of_a_run_is_announced_in_order(monkeypatch, caplog):
    monkeypatch.setitem(
        request_type.REQUEST_KINDS,
        "echo",
        request_type.RequestKind(
            "echo", lambda ctx, items: [Echo(t) for t, _ in items], Echo.from_state, uses_model=False
        ),
    )
    from tests import tiny

    lm = types.SimpleNamespace(
        batch_size=1, max_batch_size=None, max_length=None, rank=0, model=tiny.tiny_llama(), tokenizer=None
    )
    requests = [types.SimpleNamespace(args=(f"text {k}", {"kind": "echo"}), task_name=t) for k, t in enumerate("aab")]
    with caplog.at_level(logging.INFO, logger="lm_eval.lm_eval_longctx"):
        serving.serve_longctx_scores(lm, requests)
    lines = [r.getMessage() for r in caplog.records if "task " in r.getMessage()]
    assert [line.split(";")[0] for line in lines] == [
        "longctx_scores: task 1 of 2 (a)",
        "longctx_scores: task 2 of 2 (b)",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lm_eval.lm_eval_longctx"):
        serving.serve_longctx_scores(lm, requests, disable_tqdm=True)  # no bars (another rank, or asked): no lines
    assert not [r for r in caplog.records if "task " in r.getMessage()]


# ------------------------------------------------------------------ runs of longppl_govreport


TASK = "longppl_govreport"
K, D = 40, 16


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = [t[:1500] for t in corpus_texts[3:5]]
    return texts, write_docs(tmp_path_factory.mktemp("hdata") / "docs.jsonl", texts)


def md(docs, **kw):
    return {"data_files": docs[1], "trunc_len": K, "sliding_window": D, "alpha": 0.5, "beta": -10.0, **kw}


def test_evaluator_self_equals_brute_force(model_dirs, docs):
    res = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"))
    m = load(model_dirs["a"])
    rows = [brute_force_doc(t, m, m, K, D, 0.5, -10.0) for t in docs[0]]
    key_nll, n_key = sum(r[0] for r in rows), sum(r[1] for r in rows)
    assert n_key > 0
    r = res["results"][TASK]
    assert r["longppl,none"] == pytest.approx(math.exp(key_nll / n_key), rel=1e-5)
    assert r["ppl,none"] == pytest.approx(math.exp(sum(x[2] for x in rows) / sum(x[3] for x in rows)), rel=1e-5)
    assert res["configs"][TASK]["metadata"]["longctx_settings"]["key_source"] == "self"


def test_use_cache_serves_repeated_requests(model_dirs, docs, tmp_path, monkeypatch):
    first = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), use_cache=str(tmp_path / "cache"))

    def fail(*a, **k):
        raise AssertionError("scored again although --use_cache holds the result")

    monkeypatch.setattr(text_scoring, "score_text", fail)
    second = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), use_cache=str(tmp_path / "cache"))
    assert second["results"][TASK]["longppl,none"] == first["results"][TASK]["longppl,none"]
    assert second["results"][TASK]["ppl,none"] == first["results"][TASK]["ppl,none"]


def test_cache_requests_never_replays_other_settings(model_dirs, docs, tmp_path, monkeypatch):
    monkeypatch.setenv("LM_HARNESS_CACHE_PATH", str(tmp_path / "reqcache"))
    run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), cache_requests=True)
    other = run_task(TASK, model_dirs["a"], md(docs, evaluator="self", trunc_len=24), cache_requests=True)
    fresh = run_task(TASK, model_dirs["a"], md(docs, evaluator="self", trunc_len=24))
    assert other["results"][TASK]["longppl,none"] == fresh["results"][TASK]["longppl,none"]
    assert other["configs"][TASK]["metadata"]["longctx_settings"]["trunc_len"] == 24


def test_other_backends_get_an_error_naming_the_supported_ones(model_dirs, docs):
    with pytest.raises(evaluated_model.UnsupportedModelError, match="--model hf"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), model="dummy", model_args={})


def test_longer_than_the_model_maximum_is_an_error_unless_asked(model_dirs, docs):
    # the paper's documents are read whole (by default they are cut at the model's window, unless beyond is asked)
    with pytest.raises(scoring.ScoringError, match="longer than the model's maximum length 64"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self", preset="paper"), model_args={"max_length": 64})
    ok = run_task(
        TASK, model_dirs["a"], md(docs, evaluator="self", allow_beyond_max_length=True), model_args={"max_length": 64}
    )
    assert math.isfinite(ok["results"][TASK]["ppl,none"])


def test_each_rank_builds_only_its_shard(model_dirs, docs, tmp_path):
    """Under data parallelism a rank builds requests (and asks the evaluator) for its own docs only."""
    from lm_eval.tasks import TaskManager

    meta = md(docs, evaluator=model_dirs["b"], span_cache_dir=str(tmp_path / "spans"))
    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=meta)
    task = tm.load([TASK])["tasks"][TASK]
    task.build_all_requests(rank=1, world_size=2)
    assert [i.doc_id for i in task.instances] == [1]
    assert list(task._judgements) == [1]
    assert len(list((tmp_path / "spans").glob("*.spans.npz"))) == 1
