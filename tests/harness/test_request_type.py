"""harness/request_type.py: the request type, its kinds and their plans of the tokens they forward."""

from __future__ import annotations

import pytest

from lm_eval_longctx.engine import scoring
from lm_eval_longctx.harness import request_type
from lm_eval_longctx.keytokens import text_scoring


def test_a_plan_that_fails_or_is_missing_counts_one_token_a_request():
    def fails(ctx, items):
        raise ValueError("no tokenizer")

    ctx = request_type.ScoringContext(None, None, None, 1)
    assert (
        request_type.planned_tokens(
            request_type.RequestKind("k", lambda c, i: [], dict, planned_tokens=fails), ctx, [1, 2, 3]
        )
        == 3
    )
    assert request_type.planned_tokens(request_type.RequestKind("k", lambda c, i: [], dict), ctx, [1, 2]) == 2
    planned = request_type.RequestKind("k", lambda c, i: [], dict, planned_tokens=lambda c, items: 10 * len(items))
    assert request_type.planned_tokens(planned, ctx, [1, 2]) == 20


def test_a_task_s_error_starts_with_its_name_and_names_the_api_s_way_out():
    err = scoring.ScoringError(f"too long. {text_scoring.RAISE_MAX_LENGTH}")
    cli = request_type.task_error("retrieval_gain", err)
    assert str(cli).startswith("retrieval_gain: too long.") and text_scoring.RAISE_MAX_LENGTH in str(cli)
    api = request_type.task_error("retrieval_gain", err, python_api=True)
    assert request_type.PYTHON_RAISE_MAX_LENGTH in str(api) and text_scoring.RAISE_MAX_LENGTH not in str(api)
    assert str(request_type.task_error("retrieval_gain", cli)) == str(cli)  # named once


def test_serve_each_scores_in_order_and_counts_each_request():
    done = []
    ctx = request_type.ScoringContext(None, None, None, 1, progress=done.append)
    serve = request_type.serve_each(lambda ctx, text, spec: (text, spec["k"]))
    assert serve(ctx, [("a", {"k": 1}), ("b", {"k": 2})]) == [("a", 1), ("b", 2)]
    assert done == [1, 1]


def test_the_length_rule_follows_the_request_s_allowance():
    request_type.check_length(10, 10, {})
    with pytest.raises(scoring.ScoringError):
        request_type.check_length(11, 10, {})
    request_type.check_length(11, 10, {"allow_beyond_max_length": True})
