"""One length setting for the suite, defaults from the evaluated model's window, and the presets, through the
harness on every task of ``longctx`` at once (``tasks/sizing.py``, each task's ``settings_for_lengths``)."""

from __future__ import annotations

import shutil

import pytest
from transformers import AutoTokenizer

from lm_eval_longctx.data import embedded_corpus, retrieval_cases
from lm_eval_longctx.demo.model import packaged_model_dir
from lm_eval_longctx.tasks import base, run_options
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration

TASKS = tuple(sorted(base.suite_tasks()))  # every task of the suite, as `longctx` runs them
DOCUMENT_TASKS = ("forgetting_curve", "longppl_govreport", "retrieval_gain", "retrieval_gain_map")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def records(res: dict) -> dict:
    return {task: res["configs"][task]["metadata"]["longctx_settings"] for task in TASKS}


@pytest.fixture(scope="module")
def demo_chat_model(tmp_path_factory):
    """The packaged demo model with a chat template (it has none)."""
    folder = tmp_path_factory.mktemp("demo_chat") / "model"
    shutil.copytree(packaged_model_dir(), folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_the_ci_preset_and_the_chat_template_run_every_task_in_one_command(demo_chat_model):
    res = run_task("longctx", demo_chat_model, {"preset": "ci"}, apply_chat_template=True, bootstrap_iters=0)
    assert set(res["results"]) >= set(TASKS)
    rec = records(res)
    for task in TASKS:
        assert rec[task]["preset"] == "ci" and rec[task]["runtime"]["sizing"]["preset"] == "ci"
        assert rec[task]["runtime"]["sizing"]["lengths"] == [256, 512, 1024]
    # the embedded corpus, enough documents (cases, samples) for the gate's paired test
    for task in ("longppl_govreport", "retrieval_gain", "retrieval_gain_map"):
        assert rec[task]["data"]["source"] == embedded_corpus.SOURCE and rec[task]["data"]["n_docs"] == 10
        assert res["n-samples"][task]["effective"] == 10
    assert rec["forgetting_curve"]["data"]["source"] == embedded_corpus.SOURCE
    assert rec["forgetting_curve"]["lengths"] == [126, 254, 510] and rec["forgetting_curve"]["samples_per_length"] == 10
    assert rec["longeval_lines_acc"]["num_cases"] == rec["longeval_lines_ppl"]["num_cases"] == 10
    # LongPPL: the model judges itself, from the preset, and both are recorded; documents cut at 1024 tokens
    longppl = rec["longppl_govreport"]
    assert longppl["evaluator"] == "self" and longppl["key_source"] == "self" and longppl["cut_tokens"] == 1024
    assert longppl["runtime"]["sizing"]["settings_from"]["evaluator"] == "preset ci"
    assert longppl["trunc_len"] == 256 and longppl["sliding_window"] == 64
    assert rec["retrieval_gain"]["doc_tokens"] == 1024 - (1 + 24 + 24)
    assert rec["retrieval_gain_map"]["lengths_used"] == [207, 463, 975]
    # the chat template: applied to LongEval's prompts (sized with it), left out of the raw documents, recorded
    for task in DOCUMENT_TASKS:
        assert rec[task]["runtime"]["prompt_format"]["applied"] is False
        assert rec[task]["runtime"]["prompt_format"]["why"] == run_options.RAW_DOCUMENTS_WHY
    for task in ("longeval_lines_acc", "longeval_lines_ppl"):
        assert rec[task]["prompt_format"]["apply_chat_template"] is True
    prompt = res["samples"]["longeval_lines_acc"][0]["arguments"][0][0]
    assert prompt.startswith("<|user|>Below is a record") and prompt.endswith("<|assistant|>")
    acc = res["results"]["longeval_lines_acc"]
    for n in rec["longeval_lines_acc"]["num_lines"]:
        assert acc[f"prompt_tokens_{n:04d},none"] <= 1024 - 100


@pytest.fixture(scope="module")
def long_docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("sizing") / "docs.jsonl", corpus_texts[:2])


# settings that keep a run short and offline; no length among them
SMALL = {"evaluator": "self", "num_docs": 2, "samples_per_length": 1, "num_cases": 1}


def test_the_default_sizes_every_task_from_the_models_window(model_dirs, long_docs, caplog):
    res = run_task(
        "longctx",
        model_dirs["a"],
        {"data_files": long_docs, **SMALL},
        model_args={"max_length": 1200},
        bootstrap_iters=0,
        gen_kwargs="max_gen_toks=4",
    )
    rec = records(res)
    tokenizer = AutoTokenizer.from_pretrained(model_dirs["a"])
    for task in TASKS:
        sizing = rec[task]["runtime"]["sizing"]
        assert sizing["preset"] == "model" and sizing["window"]["tokens"] == 1200
        assert sizing["window"]["claimed"]["tokens"] == 4096 and sizing["window"]["max_length"] == 1200
    assert rec["longppl_govreport"]["cut_tokens"] == 1200 and rec["longppl_govreport"]["trunc_len"] == 300
    assert rec["longppl_govreport"]["data"]["cut"] == {"cut_tokens": 1200, "documents_cut": 2}
    extra = retrieval_cases.query_extra_tokens(
        tokenizer, {"separator": "", "bos": "auto", "query_tokens": 24, "answer_tokens": 24}
    )
    assert rec["retrieval_gain"]["doc_tokens"] == 1200 - extra
    assert rec["retrieval_gain_map"]["lengths_used"] == [n - extra for n in (150, 300, 600, 1200)]
    assert rec["forgetting_curve"]["lengths"][-1] == (1200 - 3) // 2 and len(rec["forgetting_curve"]["lengths"]) == 32
    # W/8 ... W less the answer's room: the shorter lengths hold no line of this tokenizer's prompts, and are noted
    lines = rec["longeval_lines_ppl"]["runtime"]["sizing"]
    assert rec["longeval_lines_ppl"]["num_lines"] == rec["longeval_lines_acc"]["num_lines"]
    assert len(rec["longeval_lines_ppl"]["num_lines"]) >= 1 and any("holds no line" in n for n in lines["notes"])
    # each size left out is recorded as dropped and said in one line when the task is built
    assert lines["dropped"] and all("holds no line" in n for n in lines["dropped"])
    said = [r.getMessage() for r in caplog.records if "runs fewer lengths than asked" in r.getMessage()]
    assert f"longeval_lines_ppl runs fewer lengths than asked: {lines['dropped'][0]}" in said
    for task in TASKS:
        assert set(res["results"][task]) > {"alias"}


def test_max_seq_lengths_sizes_every_task_and_a_tasks_own_setting_wins(model_dirs, long_docs):
    md = {"data_files": long_docs, **SMALL, "max_seq_lengths": [900, 1800], "doc_tokens": 500}
    res = run_task("longctx", model_dirs["a"], md, bootstrap_iters=0, gen_kwargs="max_gen_toks=4")
    rec = records(res)
    for task in TASKS:
        assert rec[task]["max_seq_lengths"] == [900, 1800]
        assert rec[task]["runtime"]["sizing"]["lengths_from"] == "max_seq_lengths"
    assert rec["retrieval_gain"]["doc_tokens"] == 500
    sizing = rec["retrieval_gain"]["runtime"]["sizing"]
    assert sizing["settings_from"]["doc_tokens"] == "given" and sizing["notes"] == [
        "doc_tokens given: wins over max_seq_lengths"
    ]
    assert rec["forgetting_curve"]["lengths"] == [448, 898]
    assert rec["longppl_govreport"]["cut_tokens"] == 1800
    assert [n + 49 for n in rec["retrieval_gain_map"]["lengths_used"]] == [900, 1800]
    assert len(rec["longeval_lines_acc"]["num_lines"]) == 2
