"""The start-up hook's check before the model (``harness/discovery.py``, ``check_before_model``): lm-eval 0.4.13
loads the model before it builds the tasks, so ``simple_evaluate`` asks each task of this package that the call
will build to check what needs no model first, found as lm-eval finds it and with its metadata merged as lm-eval
merges it."""

from __future__ import annotations

import pytest

from lm_eval_longctx.harness import discovery
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks.base import LongContextTask
from tests.harness_utils import TASK_DIR, refuse_model_loading

ALL_TASKS = [
    "forgetting_curve",
    "longeval_lines_acc",
    "longeval_lines_ppl",
    "longppl_govreport",
    "retrieval_gain",
    "retrieval_gain_map",
]


@pytest.fixture
def checked(monkeypatch):
    """(task name, config, arguments) of every task asked to check itself."""
    calls = []

    def record(cls, config, arguments):
        calls.append((config["task"], config, arguments))

    monkeypatch.setattr(LongContextTask, discovery.BEFORE_MODEL_CHECK, classmethod(record))
    return calls


def arguments(tasks, **extra) -> dict:
    return {"tasks": tasks, "task_manager": None, "model_args": "pretrained=some/model,dtype=float32", **extra}


def test_the_tasks_of_a_call_are_found_by_name_tag_and_group(checked):
    discovery.check_before_model(arguments(["longctx"], metadata={"num_cases": 3}))
    assert sorted(name for name, _, _ in checked) == ALL_TASKS
    for _, config, _ in checked:  # the YAML's metadata, the model_args and --metadata, as lm-eval merges them
        assert {"version": 1, "pretrained": "some/model", "dtype": "float32", "num_cases": 3}.items() <= (
            config["metadata"].items()
        )
    checked.clear()
    discovery.check_before_model(arguments(["longeval_lines", "forgetting_curve", "hellaswag", "no_such_task"]))
    assert sorted(name for name, _, _ in checked) == ["forgetting_curve", "longeval_lines_acc", "longeval_lines_ppl"]


def test_a_task_given_as_a_config_and_a_task_manager_s_metadata(checked):
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata={"seed": 4})
    spec = {"task": "forgetting_curve", "metadata": {"samples_per_length": 2}}
    discovery.check_before_model(arguments([spec], task_manager=manager, apply_chat_template=True))
    ((name, config, args),) = checked
    assert name == "forgetting_curve" and args["apply_chat_template"] is True
    assert config["metadata"]["seed"] == 4 and config["metadata"]["samples_per_length"] == 2


def test_the_hook_never_breaks_lm_eval(checked, monkeypatch):
    from lm_eval.tasks import _index

    def broken(*args, **kwargs):
        raise RuntimeError("an lm-eval without this index")

    monkeypatch.setattr(_index.TaskIndex, "build", broken)
    discovery.check_before_model(arguments(["longctx"]))  # nothing checked: the tasks check when built
    assert checked == []


def test_a_task_s_error_stops_the_call():
    with pytest.raises(SettingsError, match="'num_cases' = 'many' is not allowed"):
        discovery.check_before_model(arguments(["longeval_lines"], metadata={"num_cases": "many"}))


@pytest.mark.integration
def test_simple_evaluate_without_a_task_manager_checks_before_the_model(monkeypatch, model_dirs):
    """The Python API with no task manager: simple_evaluate builds one only after the model."""
    from lm_eval import simple_evaluate

    refuse_model_loading(monkeypatch)
    with pytest.raises(SettingsError, match="'samples_per_length' = 0 is not allowed"):
        simple_evaluate(
            model="hf",
            model_args={"pretrained": model_dirs["a"]},
            tasks=["hellaswag", "forgetting_curve"],
            metadata={"samples_per_length": 0},
            device="cpu",
        )
