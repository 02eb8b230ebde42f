"""A model object passed to simple_evaluate (the Python API) is served like the command line's model: the tasks
build their samples with its tokenizer, take its max_length and its batch size, and their errors speak of that API."""

import json

import pytest

from lm_eval_longctx.data import documents
from lm_eval_longctx.engine import scoring
from lm_eval_longctx.tasks.base import SequenceTooLongError
from tests.harness_utils import TASK_DIR, run_task, write_docs

# runs the harness: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration

FC = "forgetting_curve"
MAP = "retrieval_gain_map"


@pytest.fixture(scope="module")
def books(tmp_path_factory, corpus_texts):
    path = tmp_path_factory.mktemp("pg19") / "books.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(corpus_texts[:3]):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("gov") / "docs.jsonl", corpus_texts[:3])


def hflm(model_dir, **kwargs):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model_dir, dtype="float32", device="cpu", **kwargs)


def evaluate(lm, task, metadata, **kwargs):
    """simple_evaluate(model=<object>): no model_args, so the metadata holds no `pretrained` or `max_length`."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=metadata)
    return simple_evaluate(model=lm, tasks=[task], task_manager=tm, bootstrap_iters=0, **kwargs)


def res_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def refuse(what):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} although the model object gives it")

    return fail


def test_forgetting_curve_takes_the_tokenizer_max_length_and_batch_size_of_the_object(model_dirs, books, monkeypatch):
    md = {"data_files": books, "lengths": [8, 40], "samples_per_length": 2, "chunk_size": 16}
    monkeypatch.setattr(documents, "load_tokenizer", refuse("a tokenizer was loaded by name"))
    res = evaluate(hflm(model_dirs["a"], max_length=100, batch_size=3), FC, md)
    rec = res["configs"][FC]["metadata"]["longctx_settings"]
    assert rec["model_max_length"] == 100 and rec["tokenizer"]["name_or_path"] == model_dirs["a"]
    assert rec["samples_tokenizer"] == rec["tokenizer"]  # the samples are built with the model's own
    assert rec["runtime"]["scoring"]["batch_size"] == {"asked": 3, "at_most": 3}
    # the same numbers as the command line's model (built from model_args)
    cli = run_task(FC, model_dirs["a"], md, model_args={"max_length": 100}, batch_size=3, bootstrap_iters=0)
    assert res["results"][FC] == cli["results"][FC]
    assert cli["configs"][FC]["metadata"]["longctx_settings"]["model_max_length"] == 100


def test_forgetting_curve_refuses_a_length_beyond_the_objects_max_length_before_work(model_dirs, books, monkeypatch):
    md = {"data_files": books, "lengths": [8, 40], "samples_per_length": 1}
    monkeypatch.setattr(scoring, "score_long_batch", refuse("scored"))
    # 2 * 40 + 3 = 83 tokens > 64; the model's config allows 4096, the object does not
    with pytest.raises(
        ValueError,
        match=r"copy lengths \[40\].*maximum length 64 \(the max_length of the HFLM object "
        r"passed to simple_evaluate \(Python API\); build it with HFLM\(\.\.\., max_length=N\)",
    ):
        evaluate(hflm(model_dirs["a"], max_length=64), FC, md)


def test_gain_map_ladder_from_the_objects_tokenizer_and_max_length(model_dirs, docs, monkeypatch):
    md = {
        "data_files": docs,
        "depths": [0, 100],
        "query_tokens": 6,
        "answer_tokens": 5,
        "separator": "\n",
        "min_context": 50,
        "chunk_size": 32,
    }
    monkeypatch.setattr(documents, "load_tokenizer", refuse("a tokenizer was loaded by name"))
    lm = hflm(model_dirs["a"], max_length=300)
    res = evaluate(lm, MAP, md, limit=1)
    rec = res["configs"][MAP]["metadata"]["longctx_settings"]
    tok = lm.tokenizer
    shortest = min(len(tok(t, add_special_tokens=False)["input_ids"]) for t in res_texts(docs))
    cap = min(shortest, 300 - (1 + len(tok("\n", add_special_tokens=False)["input_ids"]) + 6 + 5))
    assert rec["model_max_length"] == 300
    assert rec["lengths_used"] == [50 * 2**k for k in range(10) if 50 * 2**k <= cap]


def test_gain_map_refuses_a_ladder_beyond_the_objects_max_length_before_work(model_dirs, docs, monkeypatch):
    md = {
        "data_files": docs,
        "context_lengths": [60, 240],
        "depths": [0, 100],
        "query_tokens": 6,
        "answer_tokens": 5,
        "separator": "\n",
    }
    monkeypatch.setattr(scoring, "score_prefix_ladder", refuse("scored"))
    monkeypatch.setattr(scoring, "score_sequence_ends", refuse("scored"))
    # refused when the task is built, naming the longest of the documents --limit evaluates
    with pytest.raises(
        SequenceTooLongError,
        match=r"^retrieval_gain_map: document 0 makes a 253-token sequence \(the longest; 1 of the 1 evaluated is "
        r"over 250\), longer than the model's maximum length 250 \(the max_length of the HFLM object passed to "
        r"simple_evaluate \(Python API\); build it with HFLM\(\.\.\., max_length=N\)",
    ):
        evaluate(hflm(model_dirs["a"], max_length=250), MAP, md, limit=1)


def test_another_backend_object_is_refused_in_the_words_of_the_python_api(books):
    from lm_eval.models.dummy import DummyLM

    from lm_eval_longctx.harness import evaluated_model

    with pytest.raises(
        evaluated_model.UnsupportedModelError, match="DummyLM backend.*Pass an lm_eval.models.huggingface.HFLM"
    ):
        evaluate(DummyLM(), FC, {"data_files": books, "lengths": [8]})
