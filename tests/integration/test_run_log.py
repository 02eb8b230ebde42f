"""What a run says: the batch --batch_size auto chose, the --use_cache hits of our requests, and errors named by
their task."""

import json
import logging

import pytest

from lm_eval_longctx.engine import plans, scoring
from lm_eval_longctx.harness import request_type, serving
from lm_eval_longctx.keytokens import text_scoring
from tests.harness_utils import run_task, write_docs

FC = "forgetting_curve"
LONGPPL = "longppl_govreport"


@pytest.fixture
def lm_eval_log(caplog, monkeypatch):
    """caplog sees lm-eval's loggers (and ours under them) even after lm-eval's setup_logging stopped propagation."""
    monkeypatch.setattr(logging.getLogger("lm_eval"), "propagate", True)
    caplog.set_level(logging.INFO, logger="lm_eval")
    return caplog


@pytest.fixture(scope="module")
def books(tmp_path_factory, corpus_texts):
    path = tmp_path_factory.mktemp("pg19") / "books.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(corpus_texts[:2]):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("gov") / "docs.jsonl", [t[:1500] for t in corpus_texts[3:5]])


def messages(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# ------------------------------------------------------------------ --batch_size auto


@pytest.mark.integration
def test_batch_size_auto_takes_up_to_max_batch_size_says_so_and_records_it(model_dirs, books, lm_eval_log, monkeypatch):
    md = {"data_files": books, "lengths": [8, 20], "samples_per_length": 3, "chunk_size": 16}
    sizes: list[int] = []
    for plan_class in (plans.FullPlan, plans.ChunkedPlan):
        scores = plan_class.scores

        def spy(self, ids_dev, ids, first, scores=scores):
            sizes.append(int(ids_dev.shape[0]))  # sequences in one forward
            return scores(self, ids_dev, ids, first)

        monkeypatch.setattr(plan_class, "scores", spy)
    auto = run_task(FC, model_dirs["a"], md, batch_size="auto", max_batch_size=4, bootstrap_iters=0)
    # 3 samples x (copy, LM) = 6 sequences per length: 4 in a forward, then 2
    assert max(sizes) == 4 and sorted(set(sizes)) == [2, 4], sizes
    lines = messages(lm_eval_log, "--batch_size auto")
    assert lines == [
        "--batch_size auto: longctx_scores requests take up to 4 sequences per forward (--max_batch_size), fewer for "
        "a sequence length whose memory estimate does not fit the free memory (engine/memory.py), half as many after "
        "an out-of-memory"
    ]
    record = auto["configs"][FC]["metadata"]["longctx_settings"]["runtime"]["scoring"]["batch_size"]
    assert record["asked"] == "auto" and record["at_most"] == 4 and record["from"] == "--max_batch_size"
    one = run_task(FC, model_dirs["a"], md, batch_size=1, bootstrap_iters=0)
    assert auto["results"][FC] == one["results"][FC]
    assert one["configs"][FC]["metadata"]["longctx_settings"]["runtime"]["scoring"]["batch_size"] == {
        "asked": 1,
        "at_most": 1,
    }


def test_batch_size_auto_without_max_batch_size_starts_at_lm_evals_default():
    class Auto:
        batch_size = "auto"
        max_batch_size = None

    assert serving.serving_batch_size(Auto())[0] == serving.AUTO_BATCH_CEILING == 64


# ------------------------------------------------------------------ errors named by their task


def test_task_error_names_the_task_once_and_the_python_api_when_used():
    err = scoring.ScoringError(
        f"a 90-token sequence is longer than the model's maximum length 64. {text_scoring.MODEL_WAYS_OUT}"
    )
    cli = str(request_type.task_error(LONGPPL, err))
    assert cli.startswith(f"{LONGPPL}: a 90-token") and "--model_args max_length=N" in cli
    assert str(request_type.task_error(LONGPPL, scoring.ScoringError(cli))) == cli
    python = str(request_type.task_error(LONGPPL, err, python_api=True))
    assert "--model_args" not in python and "passed to simple_evaluate (Python API)" in python


@pytest.mark.integration
def test_longppl_length_error_starts_with_the_task_name(model_dirs, docs):
    # the paper's documents are read whole (by default they are cut at the model's window)
    md = {"data_files": docs, "trunc_len": 40, "sliding_window": 16, "evaluator": "self", "alpha": 0.5, "beta": -10.0}
    md["preset"] = "paper"
    with pytest.raises(
        scoring.ScoringError,
        match=rf"^{LONGPPL}: document \d+ makes a \d+-token sequence .* longer than the model's "
        "maximum length 64.*--model_args max_length=N",
    ):
        run_task(LONGPPL, model_dirs["a"], md, model_args={"max_length": 64})


# ------------------------------------------------------------------ --use_cache


@pytest.mark.integration
def test_use_cache_hits_of_our_requests_are_counted_in_the_log(model_dirs, docs, tmp_path, lm_eval_log):
    md = {"data_files": docs, "trunc_len": 40, "sliding_window": 16, "evaluator": "self", "alpha": 0.5, "beta": -10.0}
    run_task(LONGPPL, model_dirs["a"], md, use_cache=str(tmp_path / "cache"))
    # two documents, each scored as the model reads it and as the evaluator (itself) judges it
    assert messages(lm_eval_log, "longctx_scores: Cached requests") == [
        "longctx_scores: Cached requests: 0, Requests remaining: 4"
    ]
    lm_eval_log.clear()
    run_task(LONGPPL, model_dirs["a"], md, use_cache=str(tmp_path / "cache"))
    assert messages(lm_eval_log, "longctx_scores: Cached requests") == [
        "longctx_scores: Cached requests: 4, Requests remaining: 0"
    ]
