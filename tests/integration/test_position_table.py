"""A model whose learned position table cannot extend (GPT-2 with 256 positions) is refused when the task is built,
naming the table's size, whatever allow_beyond_max_length or --model_args max_length say: never an IndexError
after the model has run."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lm_eval_longctx.demo.offline import train_tokenizer
from lm_eval_longctx.engine import passes
from lm_eval_longctx.settings import SettingsError
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration

TABLE = 256


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, corpus_texts):
    path = tmp_path_factory.mktemp("gpt2") / "model"
    tokenizer = train_tokenizer(corpus_texts, vocab_size=300)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=TABLE,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory, corpus_texts):
    folder = tmp_path_factory.mktemp("data")
    books = folder / "books.jsonl"
    books.write_text("".join(json.dumps({"short_book_title": "b", "text": t}) + "\n" for t in corpus_texts[:2]))
    return {"docs": write_docs(folder / "docs.jsonl", corpus_texts[:2]), "books": str(books)}


def no_scoring(monkeypatch):
    """Any request scored fails the test: the refusal must come before work."""
    for name in ("score_long_batch", "score_sequence_ends", "score_prefix_ladder"):
        monkeypatch.setattr(passes, name, lambda *a, **k: pytest.fail("scored before the refusal"))


CASES = {
    "forgetting_curve": ("books", {"lengths": [50, 200]}),
    "retrieval_gain": ("docs", {"doc_tokens": 400, "query_tokens": 8, "answer_tokens": 6}),
    "retrieval_gain_map": ("docs", {"context_lengths": [128, 512], "query_tokens": 8, "answer_tokens": 6}),
    "longppl_govreport": ("docs", {"evaluator": "self", "trunc_len": 64, "sliding_window": 32}),
}


@pytest.mark.parametrize("task", sorted(CASES))
def test_allow_beyond_max_length_does_not_lift_a_learned_table(task, gpt2_dir, data, monkeypatch):
    source, md = CASES[task]
    no_scoring(monkeypatch)
    with pytest.raises((ValueError, SettingsError), match=r"learned position table \(256 positions"):
        run_task(task, gpt2_dir, {"data_files": data[source], **md, "allow_beyond_max_length": True})


def test_a_max_length_beyond_the_table_is_refused_when_the_task_is_built(gpt2_dir, data, monkeypatch):
    no_scoring(monkeypatch)
    with pytest.raises(SettingsError, match=r"maximum length 4096 .* beyond the model's learned position table"):
        run_task("forgetting_curve", gpt2_dir, {"data_files": data["books"]}, model_args={"max_length": 4096})
