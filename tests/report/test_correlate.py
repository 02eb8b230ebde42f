"""The correlation check (``report/correlate.py``, ``lm-eval-longctx correlate``) on synthetic models and lm-eval
results files built by hand (``tests/report_fixtures.py``): a built metric is found and a shuffled one is not, the
skipped Spearman, the bootstrap and the permutation p-values against brute force, every model left out named."""

import copy
import json

import numpy as np
import pytest
from scipy import stats

from lm_eval_longctx.cli import main
from lm_eval_longctx.report import correlate
from tests.report_fixtures import results_json, write


def synthetic_models(n=15, seed=0):
    """Downstream benchmark scores (LongBench-like) and a LongPPL-like metric built to track them (the paper's
    finding: lower LongPPL <-> higher LongBench), plus the same metric shuffled across models."""
    rng = np.random.default_rng(seed)
    bench = rng.uniform(20, 50, n)
    longppl = 12.0 - 0.2 * bench + rng.normal(0, 0.6, n)
    models = [f"model_{i}" for i in range(n)]
    return models, bench, longppl, rng.permutation(longppl)


def test_correlation_detects_built_metric_and_not_a_shuffled_one():
    models, bench, longppl, shuffled = synthetic_models()
    b = dict(zip(models, bench))
    res = correlate.correlate(dict(zip(models, longppl)), b, n_resamples=2000, seed=1)
    assert res["spearman"]["rho"] < -0.8 and res["spearman"]["p"] < 0.01 and res["pearson"]["r"] < -0.8
    assert res["spearman_bootstrap_ci"]["high"] < 0  # CI excludes 0
    assert res["skipped_spearman"]["rho"] < -0.8
    assert res["spearman"]["rho"] == pytest.approx(stats.spearmanr(longppl, bench).statistic)
    null = correlate.correlate(dict(zip(models, shuffled)), b, n_resamples=2000, seed=1)
    assert null["spearman"]["p"] > 0.05
    assert null["spearman_bootstrap_ci"]["low"] < 0 < null["spearman_bootstrap_ci"]["high"]


def test_skipped_spearman_removes_a_gross_outlier():
    models, bench, longppl, _ = synthetic_models(seed=3)
    longppl = longppl.copy()
    longppl[0], bench[0] = 60.0, 80.0  # one broken model far from the cloud, against the trend
    res = correlate.correlate(dict(zip(models, longppl)), dict(zip(models, bench)), n_resamples=200)
    assert "model_0" in res["skipped_spearman"]["removed"]
    assert res["skipped_spearman"]["rho"] < res["spearman"]["rho"]  # stronger (more negative) without it
    # clean data: nothing removed
    x = np.arange(10.0)
    assert not correlate.projection_outliers(x, 2 * x + 1).any()
    # bivariate normal data: the default (boxplot) rule flags few points, about 4-5% (Wilcox's outpro default)
    rng = np.random.default_rng(0)
    rate = np.mean([correlate.projection_outliers(*rng.normal(size=(2, 15))).mean() for _ in range(100)])
    assert 0.0 < rate < 0.08
    assert correlate.projection_outliers(x, 2 * x + 1, rule="mad").shape == (10,)


def test_bootstrap_is_seeded_and_counts():
    x, y = np.arange(8.0), np.array([1, 3, 2, 5, 4, 7, 6, 8.0])
    a = correlate.bootstrap_spearman_ci(x, y, n_resamples=500, seed=7)
    assert a == correlate.bootstrap_spearman_ci(x, y, n_resamples=500, seed=7)
    assert a["n_resamples"] == 500 and -1 <= a["low"] <= a["high"] <= 1
    # the row-wise Spearman matches scipy's on each resample
    rng = np.random.default_rng(0)
    xs, ys = rng.normal(size=(5, 9)), rng.normal(size=(5, 9))
    ref = [stats.spearmanr(p, q).statistic for p, q in zip(xs, ys)]
    np.testing.assert_allclose(correlate._row_spearman(xs, ys), ref, atol=1e-12)


def test_correlate_cli_writes_submission_json(tmp_path, capsys):
    models, bench, longppl, _ = synthetic_models(n=8)
    for m, v in zip(models, longppl):
        write(tmp_path / "res" / m / "results_2026.json", results_json(model=m, longppl=float(v)))
    bench_csv = write(
        tmp_path / "longbench.csv",
        "model,LongBench,RULER\n" + "".join(f"{m},{b},{b / 2}\n" for m, b in zip(models, bench)),
    )
    out = tmp_path / "submission.json"
    assert (
        main(
            [
                "correlate",
                "--results",
                str(tmp_path / "res"),
                "--metric",
                "longppl_govreport/longppl",
                "--benchmark",
                str(bench_csv),
                "--benchmark-column",
                "LongBench",
                "--n-resamples",
                "300",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    sub = json.loads(out.read_text())
    assert sub["metric"] == "longppl_govreport/longppl" and sub["benchmark"] == "LongBench"
    assert sub["n_models"] == 8 and set(sub) >= {"pearson", "spearman", "skipped_spearman", "spearman_bootstrap_ci"}
    assert sub["spearman_bootstrap_ci"]["n_resamples"] == 300
    assert "Spearman rho" in capsys.readouterr().out
    # ambiguous benchmark column, too few models: exit 2 with a message
    assert (
        main(
            [
                "correlate",
                "--results",
                str(tmp_path / "res"),
                "--metric",
                "longppl_govreport/longppl",
                "--benchmark",
                str(bench_csv),
            ]
        )
        == 2
    )
    assert "several score columns" in capsys.readouterr().err
    few = write(tmp_path / "few.csv", "model,LongBench\nmodel_0,1\nmodel_1,2\n")
    assert (
        main(
            [
                "correlate",
                "--results",
                str(tmp_path / "res"),
                "--metric",
                "longppl_govreport/longppl",
                "--benchmark",
                str(few),
            ]
        )
        == 2
    )
    assert "at least 4 models" in capsys.readouterr().err


def _correlate_results(tmp_path, bench_csv, *extra):
    return main(
        ["correlate", "--results", str(tmp_path / "res"), "--metric", "longppl_govreport/longppl"]
        + ["--benchmark", str(bench_csv), "--n-resamples", "100", *extra]
    )


def test_correlate_names_every_model_it_leaves_out(tmp_path, capsys):
    models, bench, longppl, _ = synthetic_models(n=6)
    for m, v in zip(models, longppl):
        write(tmp_path / "res" / m / "results_2026.json", results_json(model=m, longppl=float(v)))
    # model_5's results lack the task; model_0 has another file without it too (not left out: it has the metric)
    lacking = results_json(model="model_5")
    del lacking["results"]["longppl_govreport"]
    lacking_file = write(tmp_path / "res" / "model_5" / "results_2026.json", lacking)
    other = copy.deepcopy(lacking)
    other["model_name"] = "model_0"
    write(tmp_path / "res" / "model_0" / "results_2027.json", other)
    # "extra" only in the benchmark CSV, model_4 without a benchmark score
    rows = [f"{m},{'' if m == 'model_4' else b}\n" for m, b in zip(models, bench)]
    bench_csv = write(tmp_path / "bench.csv", "model,LongBench\n" + "".join(rows) + "extra,40\n")
    out = tmp_path / "submission.json"
    assert _correlate_results(tmp_path, bench_csv, "--out", str(out)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "models: 4"
    left = [x for x in lines if x.startswith("left out: ")]
    assert left == [  # by model name
        "left out: extra (in none of the --results files)",
        "left out: model_4 (no score in the benchmark CSV)",
        f"left out: model_5 (no longppl_govreport/longppl in its results: {lacking_file})",
    ]
    sub = json.loads(out.read_text())
    assert sub["n_models"] == 4 and "model_5" not in sub["models"]
    assert set(sub["left_out"]) == {"model_5", "model_4", "extra"}
    # fewer than 4 left: refused, the left-out models named
    rows = [f"{m},{b if m in ('model_0', 'model_1', 'model_2') else ''}\n" for m, b in zip(models, bench)]
    few = write(tmp_path / "few.csv", "model,LongBench\n" + "".join(rows))
    assert _correlate_results(tmp_path, few) == 2
    err = capsys.readouterr().err
    assert "at least 4 models" in err and "got 3" in err
    assert "model_5 (no longppl_govreport/longppl in its results" in err and "model_3 (no score in the benchmark" in err


def test_correlate_names_a_model_only_in_the_benchmark(tmp_path, capsys):
    models, bench, longppl, _ = synthetic_models(n=5)
    scores = write(tmp_path / "s.csv", "model,longppl\n" + "".join(f"{m},{v}\n" for m, v in zip(models, longppl)))
    b = write(
        tmp_path / "b.csv",
        "model,LongBench\n" + "".join(f"{m},{v}\n" for m, v in zip(models, bench)) + "only_bench,33\n",
    )
    assert main(["correlate", "--scores", str(scores), "--benchmark", str(b), "--n-resamples", "100"]) == 0
    out = capsys.readouterr().out
    assert "models: 5\n" in out and f"left out: only_bench (no score in the --scores CSV {scores})" in out
    # the function itself names models of either set
    res = correlate.correlate(
        {**dict(zip(models, longppl)), "only_scores": 1.0}, {**dict(zip(models, bench)), "only_bench": 3.0}, 100
    )
    assert res["left_out"] == {"only_bench": "not in the scores", "only_scores": "no score in the benchmark CSV"}


def test_correlate_model_listed_twice_is_exit_2(tmp_path, capsys):
    scores = write(tmp_path / "scores.csv", "model,longppl\nm0,1\nm1,2\nm2,3\nm3,4\nm0,5\n")
    bench = write(tmp_path / "bench.csv", "model,LongBench\nm0,4\nm1,3\nm2,2\nm3,1\n")
    assert main(["correlate", "--scores", str(scores), "--benchmark", str(bench)]) == 2
    assert "model 'm0' is listed twice (also on line 2)" in capsys.readouterr().err
    assert main(["correlate", "--scores", str(bench), "--benchmark", str(scores)]) == 2


def test_correlate_csv_not_utf8_or_malformed_is_exit_2(tmp_path, capsys):
    bench = write(tmp_path / "bench.csv", "model,LongBench\nm0,4\nm1,3\nm2,2\nm3,1\n")
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("model,score\ncaf\u00e9,1\nb,2\nc,3\nd,4\n".encode("latin-1"))
    assert main(["correlate", "--scores", str(bad), "--benchmark", str(bench)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and err.count("\n") == 1
    extra = write(tmp_path / "extra.csv", "model,score\nm0,1,9\nm1,2\nm2,3\nm3,4\n")
    assert main(["correlate", "--scores", str(extra), "--benchmark", str(bench)]) == 2
    assert "more cells than columns" in capsys.readouterr().err
    # a byte-order mark (spreadsheet export) is fine
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffmodel,score\nm0,1\nm1,2\nm2,3\nm3,4\n".encode("utf-8"))
    assert (
        main(
            [
                "correlate",
                "--scores",
                str(bom),
                "--benchmark",
                str(bench),
                "--n-resamples",
                "50",
                "--out",
                str(tmp_path / "no" / "out.json"),
            ]
        )
        == 2
    )
    assert "cannot write the --out file" in capsys.readouterr().err


def brute_force_permutation_p(x, y, fn):
    import itertools

    obs = abs(fn(x, y))
    vals = [abs(fn(x, np.asarray(y)[list(p)])) for p in itertools.permutations(range(len(x)))]
    return np.mean([v >= obs - 1e-12 for v in vals])


def test_exact_permutation_p_values_with_few_models():
    rng = np.random.default_rng(5)
    for n in (4, 5, 6):
        x, y = rng.normal(size=n), rng.normal(size=n)
        y[0] = y[1]  # a tie in the ranks
        for stat, fn in (
            ("pearson", lambda a, b: stats.pearsonr(a, b).statistic),
            ("spearman", lambda a, b: stats.spearmanr(a, b).statistic),
        ):
            got = correlate.permutation_test(x, y, stat)
            assert got["method"].startswith("exact permutation")
            assert got["p"] == pytest.approx(brute_force_permutation_p(x, y, fn), abs=1e-12)
    # perfectly ordered, 5 models: exactly 2 of 120 pairings reach |rho| = 1 -> p = 1/60 (asymptotic p: ~1e-24)
    res = correlate.correlate(
        {f"m{i}": float(i) for i in range(5)}, {f"m{i}": -float(i) for i in range(5)}, n_resamples=200
    )
    assert res["spearman"]["rho"] == pytest.approx(-1.0) and res["spearman"]["p"] == pytest.approx(2 / 120)
    assert res["spearman"]["p_asymptotic"] < 1e-6
    assert res["spearman"]["n"] == res["pearson"]["n"] == res["spearman_bootstrap_ci"]["n"] == 5
    # many models: Monte Carlo permutations, seeded, close to the exact t-test p under normal data
    x, y = rng.normal(size=(2, 30))
    y = y + 0.5 * x
    mc = correlate.permutation_test(x, y, "pearson", seed=3)
    assert mc["method"].startswith("Monte Carlo") and mc == correlate.permutation_test(x, y, "pearson", seed=3)
    assert mc["p"] == pytest.approx(stats.pearsonr(x, y).pvalue, abs=0.01)


def test_correlate_prints_n_beside_every_statistic(tmp_path, capsys):
    models, bench, longppl, _ = synthetic_models(n=6)
    scores = write(tmp_path / "s.csv", "model,longppl\n" + "".join(f"{m},{v}\n" for m, v in zip(models, longppl)))
    b = write(tmp_path / "b.csv", "model,LongBench\n" + "".join(f"{m},{v}\n" for m, v in zip(models, bench)))
    assert main(["correlate", "--scores", str(scores), "--benchmark", str(b), "--n-resamples", "100"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "=" in x]
    assert len(lines) == 4 and all("n = " in x for x in lines)
    assert "exact permutation (all 720 pairings)" in lines[0]
