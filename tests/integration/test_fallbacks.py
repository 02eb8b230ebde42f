"""The documented fallbacks finish a run with the numbers of a clean run and the plans recorded: ``long_pass:
chunked`` asked for, an out-of-memory error at every forward over a length (the planner falls back from one forward
to KV-cache chunks), and the forgetting curve's skip of a length that fits under no plan."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers.models.llama import modeling_llama

from tests import tiny
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration

TASKS = {
    "retrieval_gain": {"doc_tokens": 400, "query_tokens": 8, "answer_tokens": 6, "separator": "\n"},
    "longppl_govreport": {"evaluator": "self", "trunc_len": 128, "sliding_window": 64, "alpha": 0.5, "beta": -8.0},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, corpus_texts):
    """As many key/value heads as query heads: a forward with and one without a cache then run the same attention
    kernel, so their plans differ in the chunk size alone."""
    path = tmp_path_factory.mktemp("mha") / "model"
    return tiny.save_tiny_model(path, corpus_texts, vocab_size=300, seed=1, num_key_value_heads=4)


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("docs") / "docs.jsonl", [t[:2500] for t in corpus_texts[:3]])


@pytest.fixture(scope="module")
def clean_runs(model_dir, docs):
    return {task: run_task(task, model_dir, {"data_files": docs, **md}) for task, md in TASKS.items()}


def scoring_record(res, task) -> dict:
    return res["configs"][task]["metadata"]["longctx_settings"]["runtime"]["scoring"]


def assert_same_numbers(got: dict, want: dict, tol: float = 1e-4) -> None:
    assert got.keys() == want.keys()
    compared = 0
    for key, value in want.items():
        if isinstance(value, float) and not math.isnan(value):
            assert got[key] == pytest.approx(value, abs=tol), key
            compared += 1
        elif key != "alias":
            assert got[key] == value or (isinstance(value, float) and math.isnan(got[key])), key
    assert compared >= 3


def oom_over(monkeypatch, n_tokens: int, counting_cache: bool = False) -> list[int]:
    """Every decoder forward of more than ``n_tokens`` new positions (``counting_cache``: positions, the cached ones
    included) raises a CUDA out-of-memory error."""
    real = modeling_llama.LlamaModel.forward
    raised = []

    def forward(self, input_ids=None, *args, **kwargs):
        width = (input_ids if input_ids is not None else kwargs["inputs_embeds"]).shape[1]
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        if counting_cache and cache is not None:
            width += cache.get_seq_length()
        if width > n_tokens:
            raised.append(width)
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 9.00 GiB ({width} tokens, injected)")
        return real(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(modeling_llama.LlamaModel, "forward", forward)
    return raised


@pytest.mark.parametrize("task", sorted(TASKS))
def test_long_pass_chunked_gives_the_numbers_of_a_clean_run(task, model_dir, docs, clean_runs):
    md = {"data_files": docs, **TASKS[task], "long_pass": "chunked", "chunk_size": 64}
    res = run_task(task, model_dir, md)
    assert_same_numbers(res["results"][task], clean_runs[task]["results"][task])
    # the long context (a long pass, or the prefix the continuations read) in chunks; LongPPL's truncated windows
    # and retrieval gain's sequences without the document are separate sequences, outside long_pass
    long_plans = [p for p in scoring_record(res, task)["plans"] if p["pass"] != "separate_sequences"]
    assert long_plans and {(p["strategy"], p["chunk_size"]) for p in long_plans} == {("chunked", 64)}
    json.dumps(scoring_record(res, task))  # the record is plain JSON


@pytest.mark.parametrize("task", sorted(TASKS))
def test_out_of_memory_over_a_length_falls_back_to_chunks_with_the_same_numbers(
    task, model_dir, docs, clean_runs, monkeypatch
):
    raised = oom_over(monkeypatch, 300)
    res = run_task(task, model_dir, {"data_files": docs, **TASKS[task]})
    assert raised
    assert_same_numbers(res["results"][task], clean_runs[task]["results"][task])
    record = scoring_record(res, task)
    strategies = {p["strategy"] for p in record["plans"]}
    assert {"full", "chunked"} <= strategies
    assert record["retries"] and all("injected" in r["error"] for r in record["retries"])
    assert {r["failed"]["strategy"] for r in record["retries"]} >= {"full"}


FC = "forgetting_curve"
FC_LENGTHS = [8, 21, 50]


@pytest.fixture(scope="module")
def books(tmp_path_factory, corpus_texts):
    path = tmp_path_factory.mktemp("pg19") / "books.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(corpus_texts[:3]):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
    return str(path)


def test_the_forgetting_curve_skips_a_length_no_plan_fits_and_keeps_the_others(model_dir, books, monkeypatch):
    md = {"data_files": books, "lengths": FC_LENGTHS, "samples_per_length": 2, "chunk_size": 16, "batch_size": 2}
    clean = run_task(FC, model_dir, md)["results"][FC]
    raised = oom_over(monkeypatch, 2 * 21 + 3, counting_cache=True)  # no plan fits the 103-token samples
    res = run_task(FC, model_dir, md)
    assert raised
    r = res["results"][FC]
    assert math.isnan(r["copy_acc@00050,none"]) and r["n_failed_lengths,none"] == 1
    assert r["skipped_lengths,none"].startswith("50: out of memory at one sample per forward")
    for length in (8, 21):
        assert r[f"copy_acc@{length:05d},none"] == clean[f"copy_acc@{length:05d},none"]
        assert r[f"lm_acc@{length:05d},none"] == clean[f"lm_acc@{length:05d},none"]
    record = scoring_record(res, FC)
    assert {"full", "chunked"} <= {p["strategy"] for p in record["plans"]}


def test_a_curve_whose_every_length_fails_states_no_memory_length(model_dir, books, monkeypatch):
    from lm_eval_longctx.metrics import per_token

    md = {"data_files": books, "lengths": [21, 50], "samples_per_length": 2, "chunk_size": 16, "batch_size": 2}
    assert oom_over(monkeypatch, 8, counting_cache=True) is not None  # no plan fits any sample
    r = run_task(FC, model_dir, md)["results"][FC]
    assert r["n_failed_lengths,none"] == 2
    # never measured: the reason, not the 0 of a model that copies nothing
    assert r["fine_memory_length,none"] == per_token.NOT_MEASURED
    assert r["coarse_memory_length,none"] == per_token.NOT_MEASURED
