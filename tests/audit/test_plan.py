"""The audit's plan: the ladder relative to the claimed window, the lengths left out with why, the cost model."""

from __future__ import annotations

import pytest

from lm_eval_longctx.audit import plan
from lm_eval_longctx.engine.window import ClaimedWindow

CI = plan.BUDGETS["ci"]


def window(tokens: int) -> ClaimedWindow:
    return ClaimedWindow(tokens, "max_position_embeddings", {"max_position_embeddings": tokens})


@pytest.mark.parametrize(
    ("w", "beyond", "lengths"),
    [
        (8192, False, [1024, 2048, 4096, 8192]),
        (8192, True, [1024, 2048, 4096, 8192, 16384]),
        (32768, False, [4096, 8192, 16384, 32768]),
        (131072, False, [16384, 32768, 65536, 131072]),
        (1000, False, [250, 500, 1000]),  # 125 is below the shortest rung worth a stage
    ],
)
def test_the_ladder_is_relative_to_the_claimed_window(w, beyond, lengths):
    assert [length for length, _ in plan.ladder(w, CI, beyond)] == lengths


def test_the_full_budget_adds_rungs_and_beyond_fractions():
    assert [x for x, _ in plan.ladder(8192, plan.BUDGETS["full"], True)] == [
        512, 1024, 2048, 4096, 6144, 8192, 12288, 16384,
    ]  # fmt: skip


def test_lengths_the_documents_or_the_model_cannot_take_are_left_out_and_named():
    p = plan.plan_audit(window(8192), CI, [5000, 6000, 7000], 18000, 8192, None, beyond=True)
    assert [(r.length, r.context_length) for r in p.rungs] == [(1024, 975), (2048, 1999), (4096, 4047)]
    assert [x["length"] for x in p.left_out] == [8192, 16384]
    assert (
        "the shortest of the 3 documents holds 5000 tokens, fewer than the 8143-token context of a 8192-token "
        in (p.left_out[0]["why"])
    )
    table = plan.plan_audit(window(8192), CI, [40000] * 3, 120000, 2048, 2048)
    assert [r.length for r in table.rungs] == [1024, 2048]
    assert [x["length"] for x in table.left_out] == [4096, 8192]
    assert all("learned position table holds 2048 positions, fewer than" in x["why"] for x in table.left_out)


def test_a_stage_past_the_models_max_length_allows_it_and_a_stream_too_short_leaves_it_out():
    p = plan.plan_audit(window(32768), CI, [40000] * 3, 20000, 8192, None, lead_tokens=0)
    assert [(r.length, r.context_length, r.beyond_max_length) for r in p.rungs] == [
        (4096, 4048, False), (8192, 8144, False),
    ]  # fmt: skip
    assert [x["length"] for x in p.left_out] == [16384, 32768]
    assert "copy length 8190 needs a stream of 24570 tokens" in p.left_out[0]["why"]
    beyond = plan.plan_audit(window(8192), CI, [40000] * 3, 120000, 8192, None, beyond=True)
    assert [(r.length, r.beyond_max_length) for r in beyond.rungs][-2:] == [(8192, False), (16384, True)]


def test_nothing_to_test_is_an_error_naming_each_length():
    with pytest.raises(plan.AuditPlanError, match=r"no context length of the ladder can be tested \(1024: "):
        plan.plan_audit(window(8192), CI, [500] * 3, 1500, 8192, None)


def test_copy_length_fills_the_context_length():
    assert plan.copy_length_for(8192) == 4094 and 2 * plan.copy_length_for(8192) + 3 <= 8192


def test_the_time_model_goes_through_two_measured_points():
    m = plan.fit_time_model([(512, 1.0), (2048, 6.0)])
    assert m.seconds(512) == pytest.approx(1.0) and m.seconds(2048) == pytest.approx(6.0)
    flat = plan.fit_time_model([(512, 1.0), (2048, 2.0)])  # shorter per token at length: noise, linear
    assert flat.per_token_squared == 0.0 and flat.seconds(4096) == pytest.approx(4.0)


def test_stage_tokens_count_the_map_and_the_curve():
    p = plan.plan_audit(window(1024), CI, [2000] * 3, 6000, 1024, None)
    rung = p.rungs[-1]
    cells = len(CI.depths) * CI.anchors_per_cell
    expected = 3 * (1024 - 49 + 2 * cells * 49) + 2 * CI.samples_per_length * (2 * rung.copy_length + 3)
    assert plan.stage_tokens(rung, p) == expected


def test_a_model_that_cannot_share_the_prefix_pays_each_cell_as_a_whole_sequence():
    p = plan.plan_audit(window(1024), CI, [2000] * 3, 6000, 1024, None)
    rung = p.rungs[-1]
    shared = plan.stage_tokens(rung, p)
    p.shares_prefix = False
    cells = len(CI.depths) * CI.anchors_per_cell
    assert plan.stage_tokens(rung, p) - shared == 3 * cells * rung.context_length - 3 * rung.context_length


def test_the_docstring_examples_run():
    import doctest

    assert doctest.testmod(plan).failed == 0
