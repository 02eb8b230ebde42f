"""Regression gate, leaderboard and correlation check on synthetic lm-eval results files.

The files have the shape lm-eval 0.4.13 writes with --output_path (see tests/test_cli_command.py for a real one):
"results" {task: {"metric,none": v, "metric_stderr,none": se | "N/A", "alias": task}}, "higher_is_better",
"configs" {task: {"metadata": {"longctx_settings": {...}}}}, "versions", "n-samples", "config", "model_name".
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from lm_eval_longctx import reporting
from lm_eval_longctx.cli import main

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {
    "longppl_govreport": {"trunc_len": 4096, "sliding_window": 1024, "alpha": 2.0, "beta": -2.0,
                          "evaluator": "Qwen/Qwen2-72B-Instruct", "data": {"dataset": "emozilla/govreport-test",
                                                                          "texts_sha256": "abc123"}},
    "forgetting_curve": {"lengths": [64, 128, 256], "fine_threshold": 0.99, "coarse_margin": 0.1,
                         "tokenizer": "/ckpt/step-1000", "data": {"revision": "r1"}},
}


def results_json(model="ckpt", longppl=5.0, longppl_se=0.05, copy_acc=0.80, copy_se=0.01, settings=None,
                 n_effective=50):
    settings = copy.deepcopy(settings or SETTINGS)
    return {
        "results": {
            "longppl_govreport": {"alias": "longppl_govreport", "longppl,none": longppl,
                                  "longppl_stderr,none": longppl_se, "ppl,none": 8.0, "ppl_stderr,none": "N/A"},
            "forgetting_curve": {"alias": "forgetting_curve", "copy_acc,none": copy_acc,
                                 "copy_acc_stderr,none": copy_se, "n_tokens,none": 1000,
                                 "n_tokens_stderr,none": "N/A"},
        },
        "higher_is_better": {"longppl_govreport": {"longppl": False, "ppl": False},
                             "forgetting_curve": {"copy_acc": True, "n_tokens": None}},
        "configs": {t: {"task": t, "metadata": {"pretrained": model, "longctx_settings": s}}
                    for t, s in settings.items()},
        "versions": {"longppl_govreport": 1.0, "forgetting_curve": 1.0},
        "n-samples": {t: {"original": 100, "effective": n_effective} for t in settings},
        "config": {"model": "hf", "model_args": f"pretrained={model},dtype=bfloat16"},
        "model_name": model,
    }


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def gate(tmp_path, run, base, *extra, capsys=None):
    r = write(tmp_path / "run" / "results_2026-01-02T00-00-00.json", run)
    b = write(tmp_path / "base" / "results_2026-01-01T00-00-00.json", base)
    return main(["gate", str(r), "--baseline", str(b), *extra])


# ------------------------------------------------------------------------------------------------ gate


def test_identical_and_improved_pass(tmp_path, capsys):
    assert gate(tmp_path, results_json(), results_json()) == 0
    # lower longppl and higher copy_acc, both far beyond the noise: improvements, exit 0
    assert gate(tmp_path, results_json(longppl=4.0, copy_acc=0.95), results_json()) == 0
    out = capsys.readouterr().out
    assert "**PASS**" in out and out.count("improved") == 2


def test_regression_fails_in_either_direction(tmp_path, capsys):
    assert gate(tmp_path, results_json(longppl=6.0), results_json()) == 1  # lower is better: up = worse
    out = capsys.readouterr().out
    assert "**FAIL**" in out and "| `longppl_govreport/longppl` (lower better)" in out and "regressed" in out
    assert gate(tmp_path, results_json(copy_acc=0.70), results_json()) == 1  # higher is better: down = worse


def test_within_stderr_passes_and_z_is_the_threshold(tmp_path):
    # worse by 0.1 with se 0.05 on both sides: combined se = 0.0707; 0.1 < 1.96 * 0.0707 = 0.139 -> ok
    assert gate(tmp_path, results_json(longppl=5.1), results_json()) == 0
    assert gate(tmp_path, results_json(longppl=5.1), results_json(), "--z", "1") == 1  # 0.1 > 0.0707
    # a missing stderr ("N/A") counts as 0: 0.1 is then beyond the noise
    assert gate(tmp_path, results_json(longppl=5.1, longppl_se="N/A"), results_json(longppl_se="N/A")) == 1


def test_tolerance_must_also_be_exceeded(tmp_path):
    cfg_yaml = write(tmp_path / "gate.yaml", "z: 0\nmetrics:\n  longppl_govreport/longppl: {rel: 0.05}\n")
    cfg_json = write(tmp_path / "gate.json", {"z": 0, "metrics": {"longppl_govreport/*": {"abs": 0.2}}})
    for cfg in (cfg_yaml, cfg_json):
        # tolerance 0.25 (5% of 5.0) / 0.2 absolute: +0.15 passes, +0.3 fails
        assert gate(tmp_path, results_json(longppl=5.15), results_json(), "--config", str(cfg)) == 0
        assert gate(tmp_path, results_json(longppl=5.3), results_json(), "--config", str(cfg)) == 1
    # the default tolerance applies to the other metrics: copy_acc down 0.02 > z*se = 0 -> regression
    assert gate(tmp_path, results_json(copy_acc=0.78), results_json(), "--config", str(cfg_yaml)) == 1


def test_tolerance_semantics_unit():
    cfg = reporting.parse_gate_config({"z": 1.0, "default": {"abs": 0.01, "rel": 0.1}})
    base = reporting.Run({"t/m": reporting.Metric(1.0, 0.0, True)}, {}, {}, {}, "b")
    for value, status in [(0.95, "ok"), (0.89, "regressed"), (1.05, "ok"), (1.11, "improved")]:
        run = reporting.Run({"t/m": reporting.Metric(value, 0.0, True)}, {}, {}, {}, "r")
        assert reporting.compare(run, base, cfg).rows[0].status == status, value
    # informational metric (no direction) is never gated, whatever it does
    base = reporting.Run({"t/n": reporting.Metric(1.0, None, None)}, {}, {}, {}, "b")
    run = reporting.Run({"t/n": reporting.Metric(100.0, None, None)}, {}, {}, {}, "r")
    assert reporting.compare(run, base).rows[0].status == "not gated"


def test_mismatched_settings_refuse(tmp_path, capsys):
    other = copy.deepcopy(SETTINGS)
    other["longppl_govreport"]["evaluator"] = "meta-llama/Llama-3.1-8B"
    other["longppl_govreport"]["data"]["texts_sha256"] = "zzz"
    other["forgetting_curve"]["fine_threshold"] = 0.9
    assert gate(tmp_path, results_json(settings=other), results_json()) == 2
    err = capsys.readouterr().err
    assert "refusing" in err and "data.texts_sha256" in err and "evaluator" in err and "fine_threshold" in err
    # --limit changes which documents are scored: refused too
    assert gate(tmp_path, results_json(n_effective=10), results_json()) == 2
    assert "n-samples" in capsys.readouterr().err


def test_ignore_setting(tmp_path):
    other = copy.deepcopy(SETTINGS)
    other["forgetting_curve"]["tokenizer"] = "/ckpt/step-2000"  # the checkpoint path, same tokenizer
    assert gate(tmp_path, results_json(settings=other), results_json()) == 2
    assert gate(tmp_path, results_json(settings=other), results_json(), "--ignore-setting", "tokenizer") == 0
    cfg = write(tmp_path / "g.yaml", "ignore_settings: [tokenizer]\n")
    assert gate(tmp_path, results_json(settings=other), results_json(), "--config", str(cfg)) == 0


def test_missing_metric_and_malformed_input_exit_2(tmp_path, capsys):
    run = results_json()
    del run["results"]["forgetting_curve"]["copy_acc,none"]
    assert gate(tmp_path, run, results_json()) == 2
    assert "missing from the run: forgetting_curve/copy_acc" in capsys.readouterr().err

    assert gate(tmp_path, '{"results": {', results_json()) == 2
    assert "malformed JSON" in capsys.readouterr().err
    assert gate(tmp_path, {"no": "results"}, results_json()) == 2
    assert "no top-level 'results'" in capsys.readouterr().err
    assert main(["gate", str(tmp_path / "nope.json"), "--baseline", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad_cfg = write(tmp_path / "bad.yaml", "metrics:\n  x: {abs: -1}\n")
    assert gate(tmp_path, results_json(), results_json(), "--config", str(bad_cfg)) == 2
    assert "abs must be a number >= 0" in capsys.readouterr().err
    typo_cfg = write(tmp_path / "typo.yaml", "tolerance: 1\n")
    assert gate(tmp_path, results_json(), results_json(), "--config", str(typo_cfg)) == 2
    assert "unknown keys ['tolerance']" in capsys.readouterr().err


def test_folder_input_summary_file_and_script(tmp_path):
    run_dir = tmp_path / "run" / "org__model"
    # two tasks in two files of one run folder (lm_eval called once per task), merged per task
    full = results_json(longppl=6.0)
    a = copy.deepcopy(full)
    del a["results"]["forgetting_curve"]
    b = copy.deepcopy(full)
    del b["results"]["longppl_govreport"]
    write(run_dir / "results_2026-01-02T00-00-00.json", a)
    write(run_dir / "results_2026-01-03T00-00-00.json", b)
    base = write(tmp_path / "base.json", results_json())
    summary = tmp_path / "summary.md"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "regression_gate.py"), str(tmp_path / "run"),
                           "--baseline", str(base), "--summary", str(summary)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "regressed" in summary.read_text() and summary.read_text().strip() in proc.stdout


# ------------------------------------------------------------------------------------------------ leaderboard


def test_leaderboard_markdown_and_csv(tmp_path, capsys):
    for i, name in enumerate(["org/a", "org/b", "org/c"]):
        write(tmp_path / name.replace("/", "__") / "results_2026.json", results_json(model=name, longppl=5.0 + i))
    out_csv = tmp_path / "board.csv"
    assert main(["leaderboard", str(tmp_path), "--metric", "*/longppl", "--metric", "*/copy_acc",
                 "--csv", str(out_csv)]) == 0
    md = capsys.readouterr().out
    assert "| model | forgetting_curve/copy_acc ↑ | longppl_govreport/longppl ↓ |" in md
    assert "| org/c | 0.8 ± 0.01 | 7 ± 0.05 |" in md
    rows = list(__import__("csv").DictReader(out_csv.read_text().splitlines()))
    assert [r["model"] for r in rows] == ["org/a", "org/b", "org/c"]
    assert float(rows[1]["longppl_govreport/longppl"]) == 6.0
    assert float(rows[1]["longppl_govreport/longppl_stderr"]) == 0.05
    assert main(["leaderboard", str(tmp_path), "--metric", "nothing/*"]) == 2


# ------------------------------------------------------------------------------------------------ correlation


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
    res = reporting.correlate(dict(zip(models, longppl)), b, n_resamples=2000, seed=1)
    assert res["spearman"]["rho"] < -0.8 and res["spearman"]["p"] < 0.01 and res["pearson"]["r"] < -0.8
    assert res["spearman_bootstrap_ci"]["high"] < 0  # CI excludes 0
    assert res["skipped_spearman"]["rho"] < -0.8
    assert res["spearman"]["rho"] == pytest.approx(stats.spearmanr(longppl, bench).statistic)
    null = reporting.correlate(dict(zip(models, shuffled)), b, n_resamples=2000, seed=1)
    assert null["spearman"]["p"] > 0.05
    assert null["spearman_bootstrap_ci"]["low"] < 0 < null["spearman_bootstrap_ci"]["high"]


def test_skipped_spearman_removes_a_gross_outlier():
    models, bench, longppl, _ = synthetic_models(seed=3)
    longppl = longppl.copy()
    longppl[0], bench[0] = 60.0, 80.0  # one broken model far from the cloud, against the trend
    res = reporting.correlate(dict(zip(models, longppl)), dict(zip(models, bench)), n_resamples=200)
    assert "model_0" in res["skipped_spearman"]["removed"]
    assert res["skipped_spearman"]["rho"] < res["spearman"]["rho"]  # stronger (more negative) without it
    # clean data: nothing removed
    x = np.arange(10.0)
    assert not reporting.projection_outliers(x, 2 * x + 1).any()
    # bivariate normal data: the default (boxplot) rule flags few points, about 4-5% (Wilcox's outpro default)
    rng = np.random.default_rng(0)
    rate = np.mean([reporting.projection_outliers(*rng.normal(size=(2, 15))).mean() for _ in range(100)])
    assert 0.0 < rate < 0.08
    assert reporting.projection_outliers(x, 2 * x + 1, rule="mad").shape == (10,)


def test_bootstrap_is_seeded_and_counts():
    x, y = np.arange(8.0), np.array([1, 3, 2, 5, 4, 7, 6, 8.0])
    a = reporting.bootstrap_spearman_ci(x, y, n_resamples=500, seed=7)
    assert a == reporting.bootstrap_spearman_ci(x, y, n_resamples=500, seed=7)
    assert a["n_resamples"] == 500 and -1 <= a["low"] <= a["high"] <= 1
    # the row-wise Spearman matches scipy's on each resample
    rng = np.random.default_rng(0)
    xs, ys = rng.normal(size=(5, 9)), rng.normal(size=(5, 9))
    ref = [stats.spearmanr(p, q).statistic for p, q in zip(xs, ys)]
    np.testing.assert_allclose(reporting._row_spearman(xs, ys), ref, atol=1e-12)


def test_correlate_cli_writes_submission_json(tmp_path, capsys):
    models, bench, longppl, _ = synthetic_models(n=8)
    for m, v in zip(models, longppl):
        write(tmp_path / "res" / m / "results_2026.json", results_json(model=m, longppl=float(v)))
    bench_csv = write(tmp_path / "longbench.csv",
                      "model,LongBench,RULER\n" + "".join(f"{m},{b},{b / 2}\n" for m, b in zip(models, bench)))
    out = tmp_path / "submission.json"
    assert main(["correlate", "--results", str(tmp_path / "res"), "--metric", "longppl_govreport/longppl",
                 "--benchmark", str(bench_csv), "--benchmark-column", "LongBench", "--n-resamples", "300",
                 "--out", str(out)]) == 0
    sub = json.loads(out.read_text())
    assert sub["metric"] == "longppl_govreport/longppl" and sub["benchmark"] == "LongBench"
    assert sub["n_models"] == 8 and set(sub) >= {"pearson", "spearman", "skipped_spearman", "spearman_bootstrap_ci"}
    assert sub["spearman_bootstrap_ci"]["n_resamples"] == 300
    assert "Spearman rho" in capsys.readouterr().out
    # ambiguous benchmark column, too few models: exit 2 with a message
    assert main(["correlate", "--results", str(tmp_path / "res"), "--metric", "longppl_govreport/longppl",
                 "--benchmark", str(bench_csv)]) == 2
    assert "several score columns" in capsys.readouterr().err
    few = write(tmp_path / "few.csv", "model,LongBench\nmodel_0,1\nmodel_1,2\n")
    assert main(["correlate", "--results", str(tmp_path / "res"), "--metric", "longppl_govreport/longppl",
                 "--benchmark", str(few)]) == 2
    assert "at least 4 models" in capsys.readouterr().err
