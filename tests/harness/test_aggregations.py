"""harness/aggregations.py: the named aggregations, the ones kept for a bootstrap stderr, and where it goes."""

from __future__ import annotations

import pickle

import pytest

from lm_eval_longctx.harness import aggregations, run_state
from lm_eval_longctx.metrics import bootstrap, per_token

ITEMS = [(2.0, 3), (5.0, 4), (1.0, 2), (7.5, 6)]


def test_an_aggregation_lm_eval_has_no_stderr_for_keeps_its_items_and_aggregates_as_the_plain_one():
    plain = aggregations.aggregation_fn("token_weighted_perplexity")
    kept = aggregations.for_task(plain, "t", "ppl")
    assert isinstance(kept, aggregations.BootstrappedAggregation)
    run = run_state.Evaluation()
    with run_state.running(run):
        assert kept(ITEMS) == plain(ITEMS) == per_token.token_weighted_perplexity(ITEMS)
    assert run.aggregated == {("t", "ppl"): (plain, ITEMS)}
    assert aggregations.for_task(aggregations.aggregation_fn("mean"), "t", "acc") is aggregations.aggregation_fn("mean")
    assert pickle.loads(pickle.dumps(kept)) == kept  # lm-eval may pickle a task's aggregations


def test_the_stderr_replaces_n_a_by_lm_eval_s_rules():
    fn = aggregations.AGGREGATIONS["corpus_ratio"]

    def results():
        return {"results": {"t": {"r,none": fn(ITEMS), "r_stderr,none": "N/A", "n_stderr,none": 0.5}}}

    out = results()
    aggregations.add_bootstrap_stderrs(out, {("t", "r"): (fn, ITEMS)}, 100000)
    assert out["results"]["t"]["r_stderr,none"] == pytest.approx(bootstrap.stderr(fn, ITEMS, n_resamples=1000))
    assert out["results"]["t"]["n_stderr,none"] == 0.5
    for iters, kept in (
        (0, {("t", "r"): (fn, ITEMS)}),
        (None, {("t", "r"): (fn, ITEMS)}),
        (10, {("t", "r"): (fn, ITEMS[:1])}),
    ):
        out = results()
        aggregations.add_bootstrap_stderrs(out, kept, iters)
        assert out["results"]["t"]["r_stderr,none"] == "N/A"
    out = results()
    aggregations.add_bootstrap_stderrs(out, {("other", "r"): (fn, ITEMS)}, 10)  # a task not in the results
    assert out == results()
    aggregations.add_bootstrap_stderrs(None, {("t", "r"): (fn, ITEMS)}, 10)  # a rank that returns no results
