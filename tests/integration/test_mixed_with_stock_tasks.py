"""One run with a stock-like lm-eval task: a --metadata key meant for the other task is left to it (one log line),
a misspelling of one of our settings is still refused, and other_tasks_keys still silences the line."""

import contextvars
import json
import logging

import pytest

from lm_eval_longctx import errors
from lm_eval_longctx.settings import SettingsError
from tests.harness_utils import TASK_DIR

# runs the harness: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration

OURS = "forgetting_curve"
STOCK = "stock_like_choice"


@pytest.fixture(scope="module")
def stock_task_dir(tmp_path_factory):
    """A plain ConfigurableTask (no class of ours) over a local JSON file, loglikelihood with lm-eval's own `acc`:
    what RULER or any other suite's task looks like to the harness, without a download."""
    root = tmp_path_factory.mktemp("stock")
    rows = root / "rows.jsonl"
    with open(rows, "w", encoding="utf-8") as f:
        for q, a in (("the report of", "committee"), ("federal agency", "program"), ("audit office", "said")):
            f.write(json.dumps({"question": q, "answer": a}) + "\n")
    (root / f"{STOCK}.yaml").write_text(
        f"task: {STOCK}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        f"  data_files:\n    test: {rows}\n"
        "test_split: test\n"
        "output_type: loglikelihood\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_target: " {{answer}}"\n'
        "metric_list:\n  - metric: acc\n"
        "metadata:\n  version: 1\n",
        encoding="utf-8",
    )
    return str(root)


@pytest.fixture(scope="module")
def books(tmp_path_factory, corpus_texts):
    path = tmp_path_factory.mktemp("pg19") / "books.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(corpus_texts[:2]):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
    return str(path)


def run_both(model_dir, stock_task_dir, metadata):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    model_args = {"pretrained": model_dir, "dtype": "float32"}
    tm = TaskManager(
        include_defaults=False, include_path=[str(TASK_DIR), stock_task_dir], metadata={**model_args, **metadata}
    )
    return simple_evaluate(
        model="hf", model_args=model_args, tasks=[OURS, STOCK], task_manager=tm, device="cpu", bootstrap_iters=0
    )


def ours(books, **extra):
    return {"data_files": books, "lengths": [8], "samples_per_length": 1, "chunk_size": 16, **extra}


def test_a_key_for_the_other_task_is_left_to_it_with_one_line(model_dirs, stock_task_dir, books, caplog, monkeypatch):
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))  # nothing said yet
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        res = run_both(model_dirs["a"], stock_task_dir, ours(books, num_samples=500))
    assert set(res["results"]) == {OURS, STOCK}
    assert 0.0 <= res["results"][STOCK]["acc,none"] <= 1.0
    lines = [r.getMessage() for r in caplog.records if "num_samples" in r.getMessage()]
    assert len(lines) == 1 and "left to the other tasks of the run" in lines[0] and "other_tasks_keys" in lines[0]
    caplog.clear()
    # named in other_tasks_keys: accepted without the line
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))  # nothing said yet
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        run_both(model_dirs["a"], stock_task_dir, ours(books, num_samples=500, other_tasks_keys=["num_samples"]))
    assert not [r for r in caplog.records if "num_samples" in r.getMessage()]


def test_lm_evals_own_length_key_sizes_our_task_beside_the_other(model_dirs, stock_task_dir, books, caplog):
    """RULER's and BABILong's max_seq_lengths is a setting of every task of the suite: no line leaves it to the
    others, and it sets the copy lengths (2l + 3 fits each length)."""
    md = {k: v for k, v in ours(books, max_seq_lengths=[64, 128]).items() if k != "lengths"}
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        res = run_both(model_dirs["a"], stock_task_dir, md)
    assert not [r for r in caplog.records if "max_seq_lengths" in r.getMessage()]
    record = res["configs"][OURS]["metadata"]["longctx_settings"]
    assert record["lengths"] == [30, 62] and record["runtime"]["sizing"]["lengths_from"] == "max_seq_lengths"


def test_a_misspelling_of_our_setting_is_still_refused_in_a_mixed_run(model_dirs, stock_task_dir, books):
    with pytest.raises(SettingsError, match=r"unknown setting 'samples_per_lenght'.*Did you mean 'samples_per_length'"):
        run_both(model_dirs["a"], stock_task_dir, {**ours(books), "samples_per_lenght": 2})
