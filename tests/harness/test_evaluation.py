"""harness/evaluation.py: the run state of a ``simple_evaluate`` call and the check before the model (lm-eval 0.4.13
loads the model before it builds the tasks, so the call asks each task of this package that it will build to check
what needs no model first, found as lm-eval finds it and with its metadata merged as lm-eval merges it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lm_eval_longctx.harness import aggregations, evaluation
from lm_eval_longctx.metrics import bootstrap, per_token
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import base
from lm_eval_longctx.tasks.base import LongContextTask
from tests.harness_utils import TASK_DIR, refuse_model_loading

ALL_TASKS = sorted(base.suite_tasks())  # every task class of the suite, by its suite name
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checked(monkeypatch):
    """(task name, config, arguments) of every task asked to check itself."""
    calls = []

    def record(cls, config, arguments):
        calls.append((config["task"], config, arguments))

    monkeypatch.setattr(LongContextTask, evaluation.BEFORE_MODEL_CHECK, classmethod(record))
    return calls


def arguments(tasks, **extra) -> dict:
    return {"tasks": tasks, "task_manager": None, "model_args": "pretrained=some/model,dtype=float32", **extra}


def test_the_tasks_of_a_call_are_found_by_name_tag_and_group(checked):
    evaluation.check_before_model(arguments(["longctx"], metadata={"num_cases": 3}))
    assert sorted(name for name, _, _ in checked) == ALL_TASKS
    for _, config, _ in checked:  # the YAML's metadata, the model_args and --metadata, as lm-eval merges them
        assert {"version": 1, "pretrained": "some/model", "dtype": "float32", "num_cases": 3}.items() <= (
            config["metadata"].items()
        )
    checked.clear()
    evaluation.check_before_model(arguments(["longeval_lines", "forgetting_curve", "hellaswag", "no_such_task"]))
    assert sorted(name for name, _, _ in checked) == ["forgetting_curve", "longeval_lines_acc", "longeval_lines_ppl"]


def test_a_task_given_as_a_config_and_a_task_manager_s_metadata(checked):
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata={"seed": 4})
    spec = {"task": "forgetting_curve", "metadata": {"samples_per_length": 2}}
    evaluation.check_before_model(arguments([spec], task_manager=manager, apply_chat_template=True))
    ((name, config, args),) = checked
    assert name == "forgetting_curve" and args["apply_chat_template"] is True
    assert config["metadata"]["seed"] == 4 and config["metadata"]["samples_per_length"] == 2


def test_the_hook_never_breaks_lm_eval(checked, monkeypatch):
    from lm_eval.tasks import _index

    def broken(*args, **kwargs):
        raise RuntimeError("an lm-eval without this index")

    monkeypatch.setattr(_index.TaskIndex, "build", broken)
    evaluation.check_before_model(arguments(["longctx"]))  # nothing checked: the tasks check when built
    assert checked == []


def test_a_task_s_error_stops_the_call():
    with pytest.raises(SettingsError, match="'num_cases' = 'many' is not allowed"):
        evaluation.check_before_model(arguments(["longeval_lines"], metadata={"num_cases": "many"}))


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


# ---------------------------------------------------------------- the run state while a call runs


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (contacts set there never leak); parse its last stdout line as JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LM_EVAL_LONGCTX_DISABLE_HOOK": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_lm_eval_still_has_what_the_run_state_relies_on():
    """lm-eval 0.4.13: simple_evaluate takes these parameters by these names, builds the model (an LM subclass whose
    __init__ runs LM.__init__) or takes the object passed before it loads the tasks, and is what
    `from lm_eval import simple_evaluate` resolves to. A change here must fail loudly, not make the tasks silently
    blind to the model."""
    import inspect

    import lm_eval
    import lm_eval.evaluator
    from lm_eval.models.huggingface import HFLM

    params = inspect.signature(lm_eval.evaluator.simple_evaluate).parameters
    assert set(evaluation.READ_ARGUMENTS) <= set(params), sorted(params)
    source = inspect.getsource(inspect.unwrap(lm_eval.evaluator.simple_evaluate))
    builds = [source.index(f".{name}(") for name in ("create_from_arg_obj", "create_from_arg_string")]
    assert max(builds) < source.index("task_manager.load(")
    assert "lm = model" in source and source.index("lm = model") < source.index("task_manager.load(")
    assert "super().__init__()" in inspect.getsource(HFLM.__init__)
    assert lm_eval.simple_evaluate is lm_eval.evaluator.simple_evaluate  # the package resolves it at call time


@pytest.mark.integration
def test_a_call_s_model_and_options_are_seen_while_it_runs_and_nothing_outside():
    """What a task sees when it is built inside simple_evaluate: the LM object passed in, or the one built from a
    registry name, the chat options, --gen_kwargs and --limit; nothing outside the call."""
    out = _run("""
        import json, types
        from lm_eval.api.model import LM
        from lm_eval_longctx.harness import discovery, evaluation

        discovery.set_contact(LM, "__init__", evaluation.lm_init)

        class Tiny(LM):
            def loglikelihood(self, requests): return []
            def loglikelihood_rolling(self, requests): return []
            def generate_until(self, requests): return []

        def simple_evaluate(model, model_args=None, tasks=None, apply_chat_template=False, system_instruction=None,
                            gen_kwargs=None, limit=None, samples=None, bootstrap_iters=100):
            lm = model if isinstance(model, LM) else Tiny.create_from_arg_string(model_args or "")
            seen = evaluation.evaluated_model()
            return {
                "same_object": seen is not None and seen.lm is lm,
                "python_api": seen.python_api if seen else None,
                "options": evaluation.prompt_options(),
                "gen": evaluation.generation_options(),
                "docs": evaluation.documents_evaluated(10, "t"),
            }

        module = types.SimpleNamespace(simple_evaluate=simple_evaluate)
        wrapper = module.simple_evaluate
        assert discovery.set_contact(module, "simple_evaluate", discovery.simple_evaluate)
        assert discovery.set_contact(module, "simple_evaluate", discovery.simple_evaluate)  # idempotent
        assert module.simple_evaluate is not wrapper
        print(json.dumps({
            "object": module.simple_evaluate(Tiny(), apply_chat_template=True, system_instruction="Be brief.", limit=3),
            "by_name": module.simple_evaluate("tiny", gen_kwargs="max_gen_toks=7", limit=0.25),
            "samples": module.simple_evaluate("tiny", samples={"t": [8, 2, 99]}),
            "outside": [evaluation.evaluated_model() is None, evaluation.prompt_options(), evaluation.documents_evaluated(3)],
        }))
    """)
    assert out["object"] == {
        "same_object": True,
        "python_api": True,
        "options": [True, "Be brief."],
        "gen": None,
        "docs": [0, 1, 2],
    }
    assert out["by_name"] == {
        "same_object": True,
        "python_api": False,
        "options": [False, None],
        "gen": {"max_gen_toks": 7},
        "docs": [0, 1, 2],
    }
    assert out["samples"]["docs"] == [2, 8]
    assert out["outside"] == [True, None, [0, 1, 2]]


def _perplexity_items(n: int) -> list:
    return [(float(k + 1), 3 + k) for k in range(n)]


def test_the_bootstrap_stderr_goes_where_lm_eval_left_n_a_after_the_call(monkeypatch):
    """lm-eval has no stderr for a token-weighted perplexity ("N/A"); the call puts the bootstrap estimate there, as
    metrics/bootstrap.py computes it on the items lm-eval aggregated, and leaves every other value as it is."""
    items = _perplexity_items(6)

    def simple_evaluate(tasks=None, bootstrap_iters=100000, model=None):
        aggregate = aggregations.for_task(aggregations.aggregation_fn("token_weighted_perplexity"), "t", "ppl")
        value = aggregate(items)
        return {
            "results": {"t": {"ppl,none": value, "ppl_stderr,none": "N/A", "acc,none": 0.5, "acc_stderr,none": 0.1}}
        }

    results = evaluation.evaluate(simple_evaluate, tasks=["t"])
    expected = bootstrap.stderr(aggregations.AGGREGATIONS["token_weighted_perplexity"], items, n_resamples=1000)
    assert results["results"]["t"]["ppl_stderr,none"] == pytest.approx(expected)
    assert isinstance(expected, float) and expected > 0
    assert results["results"]["t"]["ppl,none"] == pytest.approx(per_token.token_weighted_perplexity(items))
    assert results["results"]["t"]["acc_stderr,none"] == 0.1
    # lm-eval's own rules: no stderr asked for (bootstrap_iters=0), or one item
    assert (
        evaluation.evaluate(simple_evaluate, tasks=["t"], bootstrap_iters=0)["results"]["t"]["ppl_stderr,none"] == "N/A"
    )
    items[:] = items[:1]
    assert evaluation.evaluate(simple_evaluate, tasks=["t"])["results"]["t"]["ppl_stderr,none"] == "N/A"
    monkeypatch.setenv(aggregations.NO_STDERR_ENV, "1")
    items[:] = _perplexity_items(6)
    assert evaluation.evaluate(simple_evaluate, tasks=["t"])["results"]["t"]["ppl_stderr,none"] == "N/A"
    assert evaluation.in_progress() is None  # nothing left current after the calls


def test_each_call_has_its_own_state_and_a_nested_call_sees_its_own():
    seen = []

    def inner(tasks=None, model=None):
        seen.append(("inner", evaluation.current().arguments["tasks"]))
        return {}

    def outer(tasks=None, model=None):
        run = evaluation.current()
        run.note_scoring("t", {"passes": {"full": {"decoder": 1}}})
        evaluation.evaluate(inner, tasks=["b"])
        seen.append(("outer", evaluation.current().arguments["tasks"], evaluation.scoring_of("t")))
        return {}

    evaluation.evaluate(outer, tasks=["a"])
    assert seen == [("inner", ["b"]), ("outer", ["a"], {"passes": {"full": {"decoder": 1}}})]
    assert evaluation.in_progress() is None and evaluation.scoring_of("t") is None
