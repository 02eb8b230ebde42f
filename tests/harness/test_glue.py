"""The harness glue (``harness/glue.py``): evaluator 'self' against brute force, --use_cache and --cache_requests,
other backends, lengths, registrations, sharding; and what it does when a file system fails under it: lm-eval's
saves of the results and samples leave the old file or nothing and fail in one line naming the file and the cause;
a picture that cannot be drawn beside the results is one warning; the --use_cache database is an optimisation the
run goes on without."""

from __future__ import annotations

import copy
import errno
import logging
import math
import os
import pathlib
import pickle
import sqlite3
import types
from dataclasses import dataclass

import pytest

from lm_eval_longctx.engine import scoring
from lm_eval_longctx.harness import glue
from lm_eval_longctx.keytokens import text_scoring
from tests.brute_force import brute_force_doc
from tests.harness_utils import TASK_DIR, run_task, write_docs
from tests.tiny import load

# lm-eval's own results tracker (and its import): left out of the fast subset, as its other save tests are
pytestmark = pytest.mark.integration
SAMPLE = {"arguments": [["a prompt"]], "resps": [["x"]], "filtered_resps": ["x"], "target": 0, "doc": {"t": "y" * 300}}
NO_SPACE = os.strerror(errno.ENOSPC).lower()


def _tracker(folder: pathlib.Path):
    from lm_eval.loggers import EvaluationTracker

    glue.install()
    tracker = EvaluationTracker(output_path=str(folder / "results.json"))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    return tracker


def _samples(n: int = 3) -> list[dict]:
    return [copy.deepcopy(SAMPLE) for _ in range(n)]


class _FillingFile:
    """A file on a file system with ``room`` bytes left: what does not fit raises ENOSPC, what did stays."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data):
        self.f.write(data[: self.room])
        self.f.flush()
        self.room -= min(self.room, len(data))
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _disk_fills_at(monkeypatch, room: int) -> None:
    """lm-eval's samples file (opened for appending) meets a full file system after ``room`` bytes."""
    from lm_eval.loggers import evaluation_tracker

    def filling_open(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return _FillingFile(f, room) if "a" in mode else f

    monkeypatch.setattr(evaluation_tracker, "open", filling_open, raising=False)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text
    return text


def test_a_results_file_cut_short_by_a_full_disk_is_not_left_and_the_cause_is_named(tmp_path, monkeypatch):
    write_text = pathlib.Path.write_text

    def filling_write_text(self, data, *args, **kwargs):
        if not self.name.startswith("results_"):
            return write_text(self, data, *args, **kwargs)
        write_text(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_text", filling_write_text)
    tracker = _tracker(tmp_path)
    with pytest.raises(glue.ResultsNotSavedError) as caught:
        tracker.save_results_aggregated(results={"results": {"t": {"x": 1.0}}}, samples=None)
    message = _one_line(caught.value)
    assert "results_" in message and NO_SPACE in message and "nothing was saved" in message
    assert not list(tmp_path.glob("results_*.json"))


@pytest.mark.parametrize("room", [0, 200])
def test_samples_that_do_not_fit_leave_no_part_and_name_the_cause(tmp_path, monkeypatch, room):
    """The reported run: its results JSON saved, then a 0-byte (or cut) samples file and exit 2."""
    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {"t": {"x": 1.0}}}, samples=None)
    [results_file] = tmp_path.glob("results_*.json")
    _disk_fills_at(monkeypatch, room)
    with pytest.raises(glue.ResultsNotSavedError) as caught:
        tracker.save_results_samples(task_name="t", samples=_samples())
    message = _one_line(caught.value)
    assert f"samples_t_{tracker.date_id}.jsonl" in message and NO_SPACE in message
    assert not list(tmp_path.glob("samples_*.jsonl"))
    assert glue._whole_results_file(results_file)  # what was saved whole stays


def test_samples_appended_to_a_file_put_the_file_back(tmp_path, monkeypatch):
    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {}}, samples=None)
    tracker.save_results_samples(task_name="t", samples=_samples(2))
    [samples_file] = tmp_path.glob("samples_*.jsonl")
    before = samples_file.read_bytes()
    _disk_fills_at(monkeypatch, 150)
    with pytest.raises(glue.ResultsNotSavedError, match=NO_SPACE):
        tracker.save_results_samples(task_name="t", samples=_samples(2))
    assert samples_file.read_bytes() == before


def test_samples_on_a_read_only_file_system_name_it(tmp_path, monkeypatch):
    from lm_eval.loggers import evaluation_tracker

    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {}}, samples=None)

    def refused_open(path, mode="r", *args, **kwargs):
        if "a" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(evaluation_tracker, "open", refused_open, raising=False)
    with pytest.raises(glue.ResultsNotSavedError) as caught:
        tracker.save_results_samples(task_name="t", samples=_samples())
    assert "read-only file system" in _one_line(caught.value)
    assert not list(tmp_path.glob("samples_*.jsonl"))


def test_a_picture_that_cannot_be_written_is_one_warning_line(tmp_path, monkeypatch, caplog):
    def full_disk_picture(results, results_file):
        png = pathlib.Path(results_file).with_suffix(".png")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(png))

    monkeypatch.setitem(glue.RESULTS_SAVED_CALLBACKS, "a_picture", full_disk_picture)
    tracker = _tracker(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        tracker.save_results_aggregated(results={"results": {}}, samples=None)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "lm_eval_longctx"]
    assert "\n" not in warning and "a_picture" in warning and "the results are saved" in warning
    assert f".png: {NO_SPACE}" in warning


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

    monkeypatch.setitem(glue.REQUEST_KINDS, "echo", glue.RequestKind(serve, Echo.from_state, uses_model=False))
    lm = types.SimpleNamespace(
        cache_hook=types.SimpleNamespace(dbdict=database),
        _longctx_identity={"name": "a model"},
        batch_size=1,
        max_batch_size=None,
        max_length=None,
        rank=0,
        model=tiny.tiny_llama(),
        tokenizer=None,
    )
    requests = [types.SimpleNamespace(args=(f"text {k}", {"kind": "echo"}), task_name="t") for k in range(n)]
    return glue._hflm_longctx_scores(lm, requests, disable_tqdm=True), scored


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
    bar = glue.TokenProgress("longppl_govreport", planned=1000, n_requests=4, show=False)
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
    shown = glue.TokenProgress("t", planned=50, n_requests=1, show=True)
    shown.tokens(20)
    shown.close()
    assert shown.bar.total == 20 and shown.bar.n == 20 and shown.bar.unit == "tok"


def test_a_plan_that_fails_or_is_missing_counts_one_token_a_request():
    def fails(ctx, items):
        raise ValueError("no tokenizer")

    ctx = glue.ScoringContext(None, None, None, 1)
    assert glue.planned_tokens(glue.RequestKind(lambda c, i: [], dict, planned_tokens=fails), ctx, [1, 2, 3]) == 3
    assert glue.planned_tokens(glue.RequestKind(lambda c, i: [], dict), ctx, [1, 2]) == 2
    planned = glue.RequestKind(lambda c, i: [], dict, planned_tokens=lambda c, items: 10 * len(items))
    assert glue.planned_tokens(planned, ctx, [1, 2]) == 20


# ------------------------------------------------------------------ runs of longppl_govreport through the glue


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
    with pytest.raises(glue.UnsupportedModelError, match="--model hf"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), model="dummy", model_args={})


def test_longer_than_the_model_maximum_is_an_error_unless_asked(model_dirs, docs):
    # the paper's documents are read whole (by default they are cut at the model's window, unless beyond is asked)
    with pytest.raises(scoring.ScoringError, match="longer than the model's maximum length 64"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self", preset="paper"), model_args={"max_length": 64})
    ok = run_task(
        TASK, model_dirs["a"], md(docs, evaluator="self", allow_beyond_max_length=True), model_args={"max_length": 64}
    )
    assert math.isfinite(ok["results"][TASK]["ppl,none"])


def test_registrations_are_idempotent_and_keep_builtins():
    from lm_eval import evaluator_utils
    from lm_eval.api.registry import get_aggregation, get_metric
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker
    from lm_eval.models.huggingface import HFLM

    glue.install()
    patched = (HFLM.longctx_scores, evaluator_utils.stderr_for_metric, EvaluationTracker.save_results_aggregated)
    glue.install()
    assert (
        HFLM.longctx_scores,
        evaluator_utils.stderr_for_metric,
        EvaluationTracker.save_results_aggregated,
    ) == patched
    assert get_metric("acc") is not None and get_metric("perplexity") is not None
    assert get_aggregation("mean") is not None
    assert get_aggregation("token_weighted_perplexity") is glue.AGGREGATIONS["token_weighted_perplexity"]


def test_importing_the_tasks_changes_nothing_in_lm_eval_building_one_does():
    """lm-eval is patched in one function, install(), which building a task of the suite calls; importing the
    modules (as a script or the docs tables do) leaves lm-eval as it is."""
    import subprocess
    import sys

    probe = (
        "from lm_eval import evaluator_utils\n"
        "from lm_eval.models.huggingface import HFLM\n"
        "before = evaluator_utils.stderr_for_metric\n"
        "import lm_eval_longctx.suite, lm_eval_longctx.tasks.longppl, lm_eval_longctx.tasks.forgetting_curve\n"
        "print(hasattr(HFLM, 'longctx_scores'), evaluator_utils.stderr_for_metric is before)\n"
        "from lm_eval_longctx.harness import glue\n"
        "glue.install()\n"
        "print(hasattr(HFLM, 'longctx_scores'), evaluator_utils.stderr_for_metric is before)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", "True", "False"]


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
