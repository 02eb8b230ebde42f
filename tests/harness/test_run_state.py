"""harness/run_state.py: one Evaluation per simple_evaluate call, current in its block only."""

from __future__ import annotations

from lm_eval_longctx.harness import run_state


def test_the_current_evaluation_is_the_innermost_block_s_and_outside_is_outside():
    outer, inner = run_state.Evaluation({"tasks": ["a"]}), run_state.Evaluation({"tasks": ["b"]})
    assert run_state.in_progress() is None and run_state.current() is run_state.OUTSIDE
    with run_state.running(outer):
        with run_state.running(inner):
            assert run_state.current() is inner
        assert run_state.current() is outer and run_state.in_progress() is outer
    assert run_state.in_progress() is None


def test_scoring_records_add_up_per_task_and_a_new_build_starts_empty():
    run = run_state.Evaluation()
    run.note_scoring("t", {"passes": {"long": {"full": 2}}, "dtype": "float32"})
    run.note_scoring("t", {"passes": {"long": {"full": 1, "chunked": 1}, "short": {"full": 3}}, "dtype": "float32"})
    assert run.scoring["t"]["passes"] == {"long": {"full": 3, "chunked": 1}, "short": {"full": 3}}
    run.served_tokenizer["t"] = {"name": "tok"}
    run.forget_task("t")
    assert run.scoring == {} and run.served_tokenizer == {}


def test_the_call_s_model_args_and_which_api_named_the_model():
    by_name = run_state.Evaluation({"model": "hf", "model_args": "pretrained=x,dtype=float32"})
    assert by_name.model_args() == {"pretrained": "x", "dtype": "float32"} and not by_name.python_api
    as_object = run_state.Evaluation({"model": object(), "model_args": {"max_length": 64}})
    assert as_object.model_args() == {"max_length": 64} and as_object.python_api
    assert run_state.Evaluation().model_args() == {} and not run_state.Evaluation().python_api
    assert run_state.Evaluation().evaluated_model() is None
