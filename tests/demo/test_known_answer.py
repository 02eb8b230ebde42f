"""Known-answer validation (``lm_eval_longctx.demo.known_answer``): the paired bootstrap against independent
computations, the metrics recomputed from samples against ``metrics``, the ordering verdict, reading the
harness's files, and the whole pipeline on untrained (steps=0) variants through the harness."""

import dataclasses
import json
import math
import os
import time

import numpy as np
import pytest
from scipy import stats

from lm_eval_longctx.demo import known_answer
from lm_eval_longctx.demo.known_answer import MetricSpec, Units
from lm_eval_longctx.metrics import per_token

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


PPL = MetricSpec("x", "x", "t", "f", "perplexity", False, "orders")
MEAN = MetricSpec("x", "x", "t", "f", "mean", True, "orders")
FINE = MetricSpec("x", "x", "t", "f", "fine", True, "orders")
COARSE = MetricSpec("x", "x", "t", "f", "coarse", True, "orders")


def _ppl_units(rng, n, scale=1.0):
    tokens = rng.integers(0, 60, n).astype(float)  # some units without tokens
    nll = tokens * rng.uniform(0.5, 3.0, n) * scale
    return Units(list(range(n)), np.column_stack([nll, tokens]), [None] * n)


def _curve_units(rng, n, lengths, copy_p, lm_p, params):
    """n samples: per length a copy and LM accuracy (multiples of 1/16, as teacher-forced hits are)."""
    copy = rng.binomial(16, np.broadcast_to(copy_p, (n, len(lengths)))) / 16
    lm = rng.binomial(16, np.broadcast_to(lm_p, (n, len(lengths)))) / 16
    return Units(list(range(n)), np.stack([copy, lm], axis=-1), [None] * n, np.asarray(lengths), params)


# ----------------------------------------------------------------------------------------------- metric values


def test_perplexity_and_mean_match_metrics_for_every_resample():
    rng = np.random.default_rng(1)
    u = _ppl_units(rng, 9)
    assert known_answer.metric_value(PPL, u) == pytest.approx(
        per_token.token_weighted_perplexity([tuple(r) for r in u.values]), rel=1e-12
    )
    idx = rng.integers(0, 9, (50, 9))
    vec = known_answer.metric_value(PPL, u, idx)
    loop = [per_token.token_weighted_perplexity([tuple(u.values[i]) for i in row]) for row in idx]
    np.testing.assert_allclose(vec, loop, rtol=1e-12)  # NaN where a resample has no tokens, in both
    m = Units(list(range(9)), rng.normal(size=9), [None] * 9)
    np.testing.assert_allclose(known_answer.metric_value(MEAN, m, idx), [m.values[r].mean() for r in idx])


@pytest.mark.parametrize("spec", [FINE, COARSE])
def test_memory_lengths_match_the_task_aggregation(spec):
    """Against per_token.*_memory_length_from_samples over raw (length, copy, lm) items, as the task aggregates."""
    rng = np.random.default_rng(2)
    lengths = [8, 32, 128, 512]
    params = {"threshold": 0.9, "rule": "largest"} if spec is FINE else {"margin": 0.01, "rule": "contiguous"}
    u = _curve_units(rng, 6, lengths, [0.97, 0.9, 0.6, 0.1], [0.05, 0.05, 0.05, 0.05], params)
    u.values[2, 3, 0] = np.nan  # a failed sample: its length fails

    def from_items(rows):
        items = [(lengths[j], u.values[k, j, 0], u.values[k, j, 1]) for k in rows for j in range(len(lengths))]
        if spec is FINE:
            return per_token.fine_memory_length_from_samples(items, params["threshold"], params["rule"])
        return per_token.coarse_memory_length_from_samples(items, params["margin"], params["rule"])

    assert known_answer.metric_value(spec, u) == from_items(range(6))
    idx = rng.integers(0, 6, (40, 6))
    np.testing.assert_array_equal(known_answer.metric_value(spec, u, idx), [from_items(r) for r in idx])


def test_effective_length_matches_the_task_aggregation():
    """Against gain_map.effective_length_from_docs over per-document items of gains per length and depth, as the task
    aggregates."""
    from lm_eval_longctx.metrics import gain_map

    rng = np.random.default_rng(3)
    lengths = [128, 512, 2048]
    params = {"fraction": 0.5, "base_minimum": 0.5, "rule": "contiguous", "depths": [10, 90]}
    values = rng.normal([[3.0, 3.2], [1.7, 2.4], [0.4, 1.9]], 0.8, (7, 3, 2))  # the far depth (10) falls first
    u = Units(list(range(7)), values, [None] * 7, np.asarray(lengths), params)
    spec = MetricSpec("x", "x", "t", "f", "effective", True, "orders")

    def from_items(rows):
        items = [tuple(tuple(cell) for cell in values[k]) for k in rows]
        return gain_map.effective_length_from_docs(
            items, lengths=tuple(lengths), fraction=0.5, rule="contiguous", base_minimum=0.5
        )

    assert known_answer.metric_value(spec, u) == from_items(range(7))
    idx = rng.integers(0, 7, (60, 7))
    got = known_answer.metric_value(spec, u, idx)
    np.testing.assert_array_equal(got, [from_items(r) for r in idx])
    assert len(set(got.tolist())) > 1  # the resamples do not all agree: not a vacuous comparison


# ----------------------------------------------------------------------------------------------- bootstrap


def test_paired_bootstrap_of_means_is_the_bootstrap_of_per_unit_differences():
    """Pairing: resampling units for both models at once = resampling the per-unit differences."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=25)
    b = a + rng.normal(0.3, 0.2, size=25)
    ua, ub = (Units(list(range(25)), x, [None] * 25) for x in (a, b))
    ci = known_answer.paired_bootstrap_difference(
        lambda i: known_answer.metric_value(MEAN, ua, i),
        lambda i: known_answer.metric_value(MEAN, ub, i),
        25,
        n_resamples=3000,
        seed=7,
    )
    ref = stats.bootstrap(
        (a - b,), np.mean, n_resamples=3000, method="percentile", rng=np.random.default_rng(7)
    ).confidence_interval
    assert ci["difference"] == pytest.approx(np.mean(a - b))
    assert ci["low"] == pytest.approx(ref.low, rel=1e-9) and ci["high"] == pytest.approx(ref.high, rel=1e-9)
    # correlated models: the paired CI is far narrower than one that resamples the models independently
    unpaired = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
        n_resamples=3000,
        method="percentile",
        rng=np.random.default_rng(7),
    ).confidence_interval
    assert (ci["high"] - ci["low"]) < 0.5 * (unpaired.high - unpaired.low)


def test_paired_bootstrap_of_a_ratio_statistic_matches_a_slow_loop():
    """Perplexity difference: percentile CI from an independent loop over explicit resamples (own RNG, more
    resamples) agrees within Monte Carlo error."""
    rng = np.random.default_rng(4)
    ua = _ppl_units(rng, 30)
    ua.values[:, 1] += 1  # every unit has tokens: every resample is defined
    vb = ua.values.copy()
    vb[:, 0] = 1.3 * vb[:, 0] + rng.normal(0, 5, 30)  # the other model: worse, with per-unit noise
    ub = Units(ua.ids, vb, ua.hashes)
    ci = known_answer.paired_bootstrap_difference(
        lambda i: known_answer.metric_value(PPL, ua, i),
        lambda i: known_answer.metric_value(PPL, ub, i),
        30,
        n_resamples=4000,
        seed=0,
    )
    loop_rng = np.random.default_rng(12345)
    diffs = []
    for _ in range(8000):
        i = loop_rng.integers(0, 30, 30)
        pa = math.exp(ua.values[i, 0].sum() / ua.values[i, 1].sum())
        pb = math.exp(ub.values[i, 0].sum() / ub.values[i, 1].sum())
        diffs.append(pa - pb)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    width = hi - lo
    assert ci["difference"] == pytest.approx(known_answer.metric_value(PPL, ua) - known_answer.metric_value(PPL, ub))
    assert abs(ci["low"] - lo) < 0.08 * width and abs(ci["high"] - hi) < 0.08 * width
    assert ci["bootstrap_se"] == pytest.approx(np.std(diffs, ddof=1), rel=0.1)


def test_bootstrap_is_seeded_and_degenerate_data_give_a_point():
    u = Units([0, 1, 2], np.array([1.0, 2.0, 3.0]), [None] * 3)
    v = Units([0, 1, 2], np.array([0.0, 1.0, 2.0]), [None] * 3)
    f = (lambda i: known_answer.metric_value(MEAN, u, i), lambda i: known_answer.metric_value(MEAN, v, i))
    one = known_answer.paired_bootstrap_difference(*f, 3, n_resamples=200, seed=5)
    assert one == known_answer.paired_bootstrap_difference(*f, 3, n_resamples=200, seed=5)
    # a constant per-unit difference: every resample gives it
    assert one["low"] == pytest.approx(1.0) and one["high"] == pytest.approx(1.0) and one["difference"] == 1.0


# ----------------------------------------------------------------------------------------------- verdict


def _ci(lo, hi):
    return {"low": lo, "high": hi}


@pytest.mark.parametrize(
    "values, cis, hib, verdict, rev",
    [
        ([3, 2, 1], [_ci(0.5, 1.5), _ci(0.2, 1.8)], True, "yes", False),
        ([3, 2, 1], [_ci(0.5, 1.5), _ci(-0.2, 1.8)], True, "yes, not separated", False),
        ([3, 3, 1], [_ci(0, 0), _ci(1, 3)], True, "no (tie)", False),
        ([3, 4, 1], [_ci(-2, -0.5), _ci(1, 5)], True, "no", True),
        ([1, 2, 3], [_ci(-1.5, -0.5), _ci(-1.8, -0.2)], False, "yes", False),  # lower is better (perplexity)
        ([1, 2, 3], [_ci(-1.5, -0.5), _ci(-1.8, -0.2)], True, "no", True),
        ([1, float("nan"), 3], [_ci(-1, 1), _ci(-1, 1)], False, "undefined", False),
    ],
)
def test_ordering_verdict(values, cis, hib, verdict, rev):
    v = known_answer.ordering_verdict(values, cis, hib)
    assert v["verdict"] == verdict and v["reversed"] == rev
    assert v["separated"] == (verdict == "yes") and v["ordered"] == verdict.startswith("yes")


def test_ordering_verdict_checks_its_input():
    with pytest.raises(ValueError):
        known_answer.ordering_verdict([1, 2, 3], [_ci(0, 1)], True)


# ----------------------------------------------------------------------------------------------- files


def _write_run(root, name, per_doc, curve, task_hash_salt=""):
    """A results JSON and samples files shaped as lm-eval writes them (only the fields read here)."""
    d = root / name
    d.mkdir(parents=True)
    stamp = "2026-01-01T00-00-00.000000"
    results = {
        "results": {"longppl_govreport": {"longppl,none": 0.0}, "forgetting_curve": {}},
        "configs": {
            "forgetting_curve": {
                "metadata": {
                    "longctx_settings": {
                        "fine_threshold": 0.9,
                        "coarse_margin": 0.01,
                        "fine_rule": "largest",
                        "coarse_rule": "contiguous",
                    }
                }
            }
        },
    }
    (d / f"results_{stamp}.json").write_text(json.dumps(results))
    with open(d / f"samples_longppl_govreport_{stamp}.jsonl", "w") as f:
        for i, (nll, n) in enumerate(per_doc):
            f.write(
                json.dumps(
                    {"doc_id": i, "doc_hash": f"h{i}{task_hash_salt}", "longppl": [nll, n], "ppl": [nll * 2, n * 10]}
                )
                + "\n"
            )
    with open(d / f"samples_forgetting_curve_{stamp}.jsonl", "w") as f:
        doc_id = 0
        for k, row in enumerate(curve):  # sample-major
            for length, (c, m) in row.items():
                f.write(
                    json.dumps(
                        {
                            "doc_id": doc_id,
                            "doc": {"sample": k, "length": length},
                            "doc_hash": f"c{doc_id}",
                            "fine_memory_length": [length, c, m],
                            "coarse_memory_length": [length, c, m],
                        }
                    )
                    + "\n"
                )
                doc_id += 1
    return d / f"results_{stamp}.json"


def test_read_run_units_and_pairing(tmp_path):
    curve = [{8: (1.0, 0.1), 64: (0.5, 0.1)}, {8: (0.95, 0.0), 64: (0.4, 0.2)}]
    fa = _write_run(tmp_path, "a", [(2.0, 4), (1.0, 2), (0.0, 0)], curve)
    fb = _write_run(tmp_path, "b", [(8.0, 4), (3.0, 2)], curve)  # one document fewer
    runs = {"a": known_answer.read_run(fa), "b": known_answer.read_run(fb)}
    assert set(runs["a"].samples) == {"longppl_govreport", "forgetting_curve"}
    spec = known_answer.SPECS_BY_KEY["longppl"]
    units = known_answer.paired_units(spec, runs)
    assert units["a"].ids == units["b"].ids == [0, 1]  # only the documents both have
    assert known_answer.metric_value(spec, units["a"]) == pytest.approx(math.exp(3.0 / 6))
    cu = known_answer.paired_units(known_answer.SPECS_BY_KEY["coarse_memory_length"], runs)["a"]
    assert cu.values.shape == (2, 2, 2) and list(cu.lengths) == [8, 64]
    assert known_answer.metric_value(known_answer.SPECS_BY_KEY["coarse_memory_length"], cu) == 64
    fine = known_answer.SPECS_BY_KEY["fine_memory_length"]
    fu = known_answer.paired_units(fine, runs)["a"]
    assert fu.params == {"threshold": 0.9, "rule": "largest"}
    assert known_answer.metric_value(fine, fu) == 8  # mean copy accuracy 0.975 > 0.9 at 8, 0.45 at 64
    # a diagnostic threshold replaces the run's own; the harness's aggregate (at the run's) is not compared
    diag = dataclasses.replace(fine, key="diag", threshold=0.4)
    du = known_answer.paired_units(diag, runs)["a"]
    assert du.params == {"threshold": 0.4, "rule": "largest"}
    assert known_answer.metric_value(diag, du) == 64
    row = known_answer.validate(runs, ["a", "b"], [diag], n_resamples=200)[0]
    assert row["harness_values"] == {"a": None, "b": None} and not known_answer.check_against_harness([row])
    assert known_answer.SPECS_BY_KEY["fine_memory_length@0.5"].threshold == known_answer.FINE_DIAGNOSTIC_THRESHOLD

    fc = _write_run(tmp_path, "c", [(2.0, 4), (1.0, 2)], curve, task_hash_salt="x")
    with pytest.raises(known_answer.ValidationError, match="different documents"):
        known_answer.paired_units(spec, {"a": runs["a"], "c": known_answer.read_run(fc)})


def _write_map_run(root, name, gains, by_depth=True):
    """A results JSON and a retrieval_gain_map samples file of ``gains`` [documents, lengths, depths]: each document's
    item per length and depth, or (``by_depth`` False: as runs logged before) one mean per length, beside its cells."""
    lengths, depths = [256, 1024], [10, 90]
    d = root / name
    d.mkdir(parents=True)
    stamp = "2026-01-01T00-00-00.000000"
    settings = {
        "lengths_used": lengths,
        "depths": depths,
        "effective_fraction": 0.5,
        "effective_threshold": 0.5,
        "effective_rule": "contiguous",
    }
    results = {
        "results": {"retrieval_gain_map": {"effective_length,none": 0.0}},
        "configs": {"retrieval_gain_map": {"metadata": {"longctx_settings": settings}}},
    }
    (d / f"results_{stamp}.json").write_text(json.dumps(results))
    with open(d / f"samples_retrieval_gain_map_{stamp}.jsonl", "w") as f:
        for i, doc in enumerate(gains):
            item = doc.tolist() if by_depth else doc.mean(axis=1).tolist()
            cells = {
                f"gain@L{L:05d}_d{p:02d}": float(doc[a, b]) for a, L in enumerate(lengths) for b, p in enumerate(depths)
            }
            f.write(json.dumps({"doc_id": i, "doc_hash": f"h{i}", "effective_length": item, **cells}) + "\n")
    return d / f"results_{stamp}.json"


def test_the_maps_units_hold_the_gain_of_each_depth(tmp_path):
    """The map's units are [documents, lengths, depths], from the item, or from the cells in runs whose item held one
    mean per length; the effective length reads the weakest depth (at 1024 the far depth has no gain)."""
    gains = np.array([[[3.0, 3.2], [0.1, 3.0]], [[2.8, 3.0], [-0.1, 3.1]], [[3.1, 2.9], [0.0, 2.9]]])
    spec = known_answer.SPECS_BY_KEY["gain_map_effective_length"]
    for by_depth in (True, False):
        run = known_answer.read_run(_write_map_run(tmp_path, f"m{by_depth}", gains, by_depth))
        units = known_answer.unit_data(spec, run)
        np.testing.assert_allclose(units.values, gains)
        assert units.params["depths"] == [10, 90] and list(units.lengths) == [256, 1024]
        assert known_answer.metric_value(spec, units) == 256  # the mean over depths (1.5 at 1024) would pass 1024


def test_validate_and_table_on_synthetic_runs(tmp_path):
    rng = np.random.default_rng(0)
    n = 12
    tokens = rng.integers(20, 40, n)
    curve = [{8: (1.0, 0.0), 64: (1.0, 0.0)} for _ in range(4)]
    files = {
        name: _write_run(tmp_path, name, [(float(t) * s * rng.uniform(0.9, 1.1), int(t)) for t in tokens], curve)
        for name, s in (("long", 1.0), ("short", 2.0), ("none", 3.0))
    }
    runs = {k: known_answer.read_run(f) for k, f in files.items()}
    specs = [known_answer.SPECS_BY_KEY[k] for k in ("longppl", "ppl", "coarse_memory_length")]
    rows = known_answer.validate(runs, ["long", "short", "none"], specs, n_resamples=500)
    by = {r["metric"]: r for r in rows}
    assert by["longppl"]["verdict"] == "yes" and by["longppl"]["n_units"] == n
    assert by["coarse_memory_length"]["verdict"] == "no (tie)"
    assert [p["a"] + ">" + p["b"] for p in by["longppl"]["differences"]] == ["long>short", "short>none"]
    table = known_answer.format_table(rows, ["long", "short", "none"])
    assert table.count("\n") == 2 + len(specs)
    assert "| LongPPL (`longppl_govreport/longppl`) | lower |" in table
    # the harness value recorded in this fake results file is 0.0: a mismatch is reported
    assert any(m.startswith("longppl/") for m in known_answer.check_against_harness(rows))


def test_validation_settings_are_task_settings():
    """Every key the validation adds to --metadata is a setting some task reads (a typo would be ignored)."""
    from lm_eval_longctx.tasks import forgetting_curve, longeval, longppl, retrieval_gain, retrieval_gain_map

    known = (
        set(longppl.DEFAULTS)
        | set(forgetting_curve.DEFAULTS)
        | set(retrieval_gain.DEFAULTS)
        | set(retrieval_gain_map.DEFAULTS)
        | set(longeval.DEFAULTS)
    )
    for budget, md in known_answer.VALIDATION_METADATA.items():
        assert set(md) <= known, (budget, set(md) - known)


def test_variants_are_built_once_and_reused(tmp_path):
    dirs = known_answer.build_models(tmp_path, ["none"], steps=0, log_fn=lambda *a: None)
    weights = dirs["none"] / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert known_answer.build_models(tmp_path, ["none"], steps=0, log_fn=lambda *a: None) == dirs
    assert weights.stat().st_mtime_ns == stamp  # same recipe: reused
    assert not known_answer._variant_dir_is_current(dirs["none"], "none", steps=1)  # another recipe: rebuilt
    other = tmp_path / "other_tokenizer"
    other.mkdir()
    (other / "tokenizer.json").write_text("{}")
    assert not known_answer._variant_dir_is_current(dirs["none"], "none", 0, tokenizer_dir=other)  # another tokenizer


def test_unmet_expectations_and_plot_command():
    report = {
        "metrics": [
            {"metric": "a", "expected": "orders", "verdict": "yes"},
            {"metric": "b", "expected": "orders", "verdict": "yes, not separated"},
            {"metric": "c", "expected": "no clear separation", "verdict": "yes"},
        ],
        "order": ["long", "none"],
        "labels": {"long": "long (x)", "none": "none"},
        "results_files": {"long": "/r/l.json", "none": "/r/n.json"},
    }
    assert known_answer.unmet_expectations(report) == ["b: yes, not separated"]
    assert known_answer.plot_command(report, "f.png") == (
        "python scripts/plot_forgetting_curve.py /r/l.json /r/n.json --label 'long (x)' --label none -o f.png"
    )


# ----------------------------------------------------------------------------------------------- whole pipeline


# What is robust on the untrained construction (steps=0) at the ci budget, where the copy circuit alone decides:
# * ordered, with every neighbours' CI excluding 0: LongPPL (K = 128) and retrieval gain;
# * ordered (point values): coarse memory length (1024 / 512 / 0), LongEval answer-token PPL (8 cases: wide CIs) and
#   the retrieval-gain map's effective context length (2048 / 128 / 0).
# Not asserted: fine memory length (the circuit never copies > 99% beyond the shortest lengths: long = short),
# LongEval accuracy (0 for every variant: random weights outside the circuit never write the answer), and plain
# PPL (it does order untrained models, whose only predictive part is the circuit; not a property to test).
SEPARATED_CI = ("longppl", "retrieval_gain")
ORDERED_CI = ("coarse_memory_length", "answer_ppl", "gain_map_effective_length")


def test_known_answer_models_are_ordered_by_the_metrics(tmp_path, first_model_variants):
    # On the first demo model's untrained variants (rope_theta 1e6 / 1e4), for which the figures above were
    # measured: the shipped recipe's untrained `short` (code band +6) copies above a random LM's level of about 0
    # up to 1024 tokens (its weak n-gram head finds three-token matches anywhere), so at the ci budget's longest
    # length long and short tie on coarse memory length (1024 / 1024 / 0). Its trained variants are validated
    # at the full budget in docs/demo-and-known-answer-validation.md.
    t0 = time.perf_counter()
    report = known_answer.run_validation(tmp_path / "val", budget="ci", steps=0, n_resamples=1000, echo=False)
    wall = time.perf_counter() - t0
    by = {r["metric"]: r for r in report["metrics"]}
    assert report["order"] == ["long", "short", "none"]
    assert not report["harness_mismatches"], report["harness_mismatches"]
    for key in SEPARATED_CI:
        assert by[key]["verdict"] == "yes", (key, by[key]["values"], by[key]["differences"])
    for key in ORDERED_CI:
        assert by[key]["ordered"], (key, by[key]["values"])
    # one evaluator for every model: the same key tokens, so the same key-token count
    counts = {m: _result(report, m, "longppl_govreport", "n_key_tokens") for m in report["order"]}
    assert len(set(counts.values())) == 1 and next(iter(counts.values())) > 0, counts
    assert (tmp_path / "val" / known_answer.VALIDATION_MD).read_text().count("| LongPPL") == 1
    if report["figure"] is not None:
        assert os.path.getsize(report["figure"]) > 10_000
    print(f"\nknown-answer validation, ci budget: {wall:.1f} s\n{report['table_markdown']}")


def _result(report, model, task, metric):
    with open(report["results_files"][model], encoding="utf-8") as f:
        return json.load(f)["results"][task][f"{metric},none"]
