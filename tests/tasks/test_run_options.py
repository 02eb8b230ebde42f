"""lm-eval's run options (``tasks/run_options.py``) do what they say for these tasks, or are refused before any
request is sent: --predict_only (samples, no metrics), --num_fewshot (refused), --apply_chat_template /
--system_instruction (left out of the document tasks' raw documents, as in lm-eval's own loglikelihood_rolling
tasks, said once per task and recorded as such; applied and recorded by LongEval), the request type in the results'
configs, and --seed (the tasks draw with their own seed, and say so)."""

from __future__ import annotations

import contextvars
import logging

import pytest
import yaml

from lm_eval_longctx import errors
from lm_eval_longctx.harness import request_type
from lm_eval_longctx.keytokens import text_scoring
from lm_eval_longctx.tasks import base, longeval, run_options
from lm_eval_longctx.tasks.run_options import UnsupportedOptionError
from tests.harness_utils import TASK_DIR, run_task, write_docs
from tests.tiny import load


def test_chat_options_are_not_applied_to_raw_documents_said_once_and_recorded(caplog, monkeypatch):
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))  # nothing said yet
    assert run_options.prompt_options_not_applied("retrieval_gain", False, None) is None
    assert run_options.prompt_options_not_applied("retrieval_gain", False, "") is None  # an empty one changes nothing
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        for _ in range(3):
            record = run_options.prompt_options_not_applied("retrieval_gain", True, "Be brief.")
    assert record == {
        "given": ["--apply_chat_template", "--system_instruction"],
        "applied": False,
        "why": run_options.RAW_DOCUMENTS_WHY,
    }
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(
        "retrieval_gain: --apply_chat_template and --system_instruction not applied to its documents, which are "
        "scored raw (recorded in the results)"
    )


PER_TOKEN = "longppl_govreport"
LINES = {"num_lines": [3], "num_cases": 2}


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("optdata") / "docs.jsonl", [t[:800] for t in corpus_texts[3:5]])


def longppl_md(docs):
    return {"data_files": docs, "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10.0, "evaluator": "self"}


@pytest.fixture
def nothing_scored(monkeypatch):
    """Any request scored (a document, a LongEval answer or prompt) fails the test: refusals come first."""

    def fail(*args, **kwargs):
        raise AssertionError("a request was scored although the option was to be refused first")

    for module, name in ((text_scoring, "score_text"), (longeval, "score_answer"), (longeval, "prompt_length")):
        monkeypatch.setattr(module, name, fail)


def yaml_metadata(task: str) -> dict:
    loader = yaml.SafeLoader
    loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    with open(TASK_DIR / f"{task}.yaml", encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)["metadata"]


def metric_keys(res: dict, task: str) -> set:
    return {k for k in res["results"][task] if "," in k}  # "metric,filter" (besides alias, name, sample_len)


# ------------------------------------------------------------------ request type (no harness run)


def test_each_yaml_states_the_request_type_its_class_records():
    from lm_eval_longctx import suite

    classes = {
        "longppl_govreport": suite.LongPPLTask,
        "forgetting_curve": suite.ForgettingCurveTask,
        "retrieval_gain": suite.RetrievalGainTask,
        "retrieval_gain_map": suite.RetrievalGainMapTask,
        "longeval_lines_ppl": suite.LongEvalLinesPPLTask,
        "longeval_lines_acc": suite.LongEvalLinesAccTask,
    }
    for task, cls in classes.items():
        assert yaml_metadata(task)["request_type"] == cls.REQUEST_TYPE_NOTE, task
        assert cls.REQUEST_TYPE_NOTE.startswith(request_type.REQUEST_TYPE)


def test_a_yaml_num_fewshot_is_refused_when_the_task_is_built():
    config = {
        "task": "t",
        "test_split": "test",
        "output_type": "generate_until",
        "generation_kwargs": {"until": [], "max_gen_toks": 100},
        "metadata": LINES,
    }
    with pytest.raises(UnsupportedOptionError, match=r"--num_fewshot 2 does not apply: the prompt is LongChat's"):
        longeval.LongEvalLinesAccTask(config={**config, "num_fewshot": 2})
    task = longeval.LongEvalLinesAccTask(config={**config, "num_fewshot": 0})
    assert task.config.metadata["request_type"] == longeval.LongEvalLinesAccTask.REQUEST_TYPE_NOTE


# ------------------------------------------------------------------ through lm_eval.simple_evaluate


@pytest.mark.integration
def test_predict_only_writes_samples_and_no_metrics(model_dirs, docs, tmp_path):
    export = tmp_path / "export"
    md = {**longppl_md(docs), "export_tokens": str(export)}
    res = run_task(PER_TOKEN, model_dirs["a"], md, predict_only=True, log_samples=False)
    assert metric_keys(res, PER_TOKEN) == {"bypass,none", "bypass_stderr,none"}
    samples = res["samples"][PER_TOKEN]
    assert len(samples) == 2 and all(s["metrics"] == ["bypass"] and s["resps"] for s in samples)
    assert res["higher_is_better"][PER_TOKEN] == {"bypass": True}
    assert len(list(export.rglob("doc_*.npz"))) == 2  # the per-token export is written all the same
    meta = res["configs"][PER_TOKEN]["metadata"]
    assert meta["request_type"] == base.PER_TOKEN_REQUESTS and meta["longctx_settings"]["trunc_len"] == 40

    acc = run_task(
        "longeval_lines_acc", model_dirs["a"], LINES, predict_only=True, num_fewshot=0, gen_kwargs="max_gen_toks=2"
    )
    assert metric_keys(acc, "longeval_lines_acc") == {"bypass,none", "bypass_stderr,none"}
    samples = acc["samples"]["longeval_lines_acc"]
    assert len(samples) == 2 and all(isinstance(s["filtered_resps"][0].text, str) for s in samples)
    assert acc["n-shot"]["longeval_lines_acc"] == 0  # --num_fewshot 0 is what the task does
    meta = acc["configs"]["longeval_lines_acc"]["metadata"]
    assert meta["request_type"] == longeval.LongEvalLinesAccTask.REQUEST_TYPE_NOTE
    assert "prompt_format" not in meta["longctx_settings"]


@pytest.mark.integration
def test_num_fewshot_is_refused_before_any_request(model_dirs, docs, nothing_scored):
    with pytest.raises(UnsupportedOptionError, match=r"--num_fewshot 2 does not apply: the task scores whole"):
        run_task(PER_TOKEN, model_dirs["a"], longppl_md(docs), num_fewshot=2)
    with pytest.raises(UnsupportedOptionError, match=r"--num_fewshot 2 .*LongChat's.*Leave --num_fewshot out"):
        run_task("longeval_lines_acc", model_dirs["a"], LINES, num_fewshot=2)


@pytest.mark.integration
def test_chat_options_leave_the_documents_raw_and_are_recorded_as_not_applied(model_dirs, docs):
    """As lm-eval's own loglikelihood_rolling tasks: the document tasks score the same raw text, the same numbers,
    with or without --apply_chat_template and --system_instruction; their results say the options were not applied."""
    plain = run_task(PER_TOKEN, model_dirs["a"], longppl_md(docs))
    chat = run_task(PER_TOKEN, model_dirs["a"], longppl_md(docs), system_instruction="Be brief.")
    assert chat["results"][PER_TOKEN] == plain["results"][PER_TOKEN]
    runtime = chat["configs"][PER_TOKEN]["metadata"]["longctx_settings"]["runtime"]
    assert runtime["prompt_format"] == {
        "given": ["--system_instruction"],
        "applied": False,
        "why": run_options.RAW_DOCUMENTS_WHY,
    }
    assert "prompt_format" not in plain["configs"][PER_TOKEN]["metadata"]["longctx_settings"]["runtime"]


@pytest.mark.integration
def test_longeval_applies_and_records_chat_template_and_system_instruction(model_dirs, tmp_path):
    from lm_eval.loggers import EvaluationTracker

    model, tok = load(model_dirs["a"])
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    chat_dir = tmp_path / "chat_model"
    model.save_pretrained(chat_dir)
    tok.save_pretrained(chat_dir)
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    res = run_task(
        "longeval_lines",
        str(chat_dir),
        {"num_lines": [3], "num_cases": 1},
        apply_chat_template=True,
        system_instruction="Answer with the number.",
        gen_kwargs="max_gen_toks=2",
        evaluation_tracker=tracker,
    )
    prompt = res["samples"]["longeval_lines_acc"][0]["arguments"][0][0]
    assert prompt.startswith("<|system|>Answer with the number.<|user|>Below is a record")
    text, _spec = res["samples"]["longeval_lines_ppl"][0]["arguments"][0]
    assert text.startswith(prompt)
    for task in ("longeval_lines_acc", "longeval_lines_ppl"):
        assert res["configs"][task]["metadata"]["longctx_settings"]["prompt_format"] == {
            "apply_chat_template": True,
            "system_instruction": "Answer with the number.",
        }
    # lm-eval's own record, as --output_path writes it
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    import json

    saved = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    assert saved["system_instruction"] == "Answer with the number." and "<|assistant|>" in saved["chat_template"]


@pytest.mark.integration
def test_lm_eval_seed_leaves_the_task_seed_in_charge_and_says_so(model_dirs, caplog):
    md = {"num_lines": [3], "num_cases": 1}
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        res = run_task("longeval_lines_ppl", model_dirs["a"], {**md, "seed": 3}, fewshot_random_seed=7)
    notes = [r.getMessage() for r in caplog.records if "does not change this task's samples" in r.getMessage()]
    assert notes == [
        "longeval_lines_ppl: lm-eval's --seed (fewshot seed 7) does not change this task's samples: they are drawn "
        "with the task's own seed 3 (recorded in the results' longctx_settings); change it with --metadata "
        "'{\"seed\": N}'."
    ]
    record = res["configs"]["longeval_lines_ppl"]["metadata"]["longctx_settings"]
    assert record["seed"] == 3 and record["source"]["seed"] == 3
    same = run_task("longeval_lines_ppl", model_dirs["a"], {**md, "seed": 3}, random_seed=99)
    assert same["samples"]["longeval_lines_ppl"][0]["doc"] == res["samples"]["longeval_lines_ppl"][0]["doc"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        run_task("longeval_lines_ppl", model_dirs["a"], md)  # lm-eval's default seeds: nothing to say
    assert not [r for r in caplog.records if "does not change this task's samples" in r.getMessage()]
