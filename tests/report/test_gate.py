"""The regression gate (``report/gate.py``, ``lm-eval-longctx gate``) on synthetic lm-eval results files built by
hand (``tests/report_fixtures.py``): improvements and regressions, stderr and tolerances, settings that must match,
directions, lower bounds compared as bounds, and no wrong verdict from a malformed or non-finite input."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx.cli import main
from lm_eval_longctx.report.gate import compare, identified_by_content, parse_gate_config
from lm_eval_longctx.report.results import Metric, Run, flatten
from tests.report_fixtures import SETTINGS, read_page, results_json, suite_results_json, write

ROOT = Path(__file__).resolve().parents[2]


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
    cfg = parse_gate_config({"z": 1.0, "default": {"abs": 0.01, "rel": 0.1}})
    base = Run({"t/m": Metric(1.0, 0.0, True)}, {}, {}, {}, "b")
    for value, status in [(0.95, "ok"), (0.89, "regressed"), (1.05, "ok"), (1.11, "improved")]:
        run = Run({"t/m": Metric(value, 0.0, True)}, {}, {}, {}, "r")
        assert compare(run, base, cfg).rows[0].status == status, value
    # informational metric (no direction) is never gated, whatever it does
    base = Run({"t/n": Metric(1.0, None, None)}, {}, {}, {}, "b")
    run = Run({"t/n": Metric(100.0, None, None)}, {}, {}, {}, "r")
    assert compare(run, base).rows[0].status == "not gated"


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
    assert "abs must be a finite number >= 0" in capsys.readouterr().err
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval_longctx",
            "gate",
            str(tmp_path / "run"),
            "--baseline",
            str(base),
            "--summary",
            str(summary),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert "regressed" in summary.read_text() and summary.read_text().strip() in proc.stdout


# ------------------------------------------------------------------------------------------------ no wrong verdict


@pytest.mark.parametrize("z", ["nan", "inf", "-1", "-inf"])
def test_non_finite_or_negative_z_is_exit_2(tmp_path, capsys, z):
    assert gate(tmp_path, results_json(longppl=9.0), results_json(), f"--z={z}") == 2
    assert "--z must be a finite number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,what",
    [
        ("z: .nan\n", "z must be a finite number"),
        ("z: .inf\n", "z must be a finite number"),
        ("default: {abs: .nan}\n", "default.abs must be a finite number"),
        ("default: {rel: .inf}\n", "default.rel must be a finite number"),
        ("metrics:\n  '*': {rel: .nan}\n", "rel must be a finite number"),
        ("metrics:\n  '*': {skip: 'yes'}\n", "skip must be true or false"),
        ("n_resamples: 10\n", "n_resamples must be an integer >= 100"),
        ("paired: 1\n", "paired must be true or false"),
    ],
)
def test_non_finite_config_values_are_exit_2(tmp_path, capsys, text, what):
    cfg = write(tmp_path / "gate.yaml", text)
    # the run is far worse: a silently ignored NaN tolerance would let it pass or fail for the wrong reason
    assert gate(tmp_path, results_json(longppl=9.0), results_json(), "--config", str(cfg)) == 2
    assert what in capsys.readouterr().err


@pytest.mark.parametrize("bad", [None, "5.0", float("nan"), float("inf"), [5.0]])
def test_baseline_metric_that_is_not_a_finite_number_is_exit_2(tmp_path, capsys, bad):
    base = results_json()
    base["results"]["longppl_govreport"]["longppl,none"] = bad
    # the run regressed on copy_acc too: before, the bad baseline metric was dropped and this passed or failed
    # on the other metrics alone
    assert gate(tmp_path, results_json(longppl=9.0), base) == 2
    err = capsys.readouterr().err
    assert "longppl_govreport/longppl: the baseline's value is" in err and err.count("\n") == 1
    # the same in the run
    assert gate(tmp_path, base, results_json()) == 2
    assert "longppl_govreport/longppl: the run's value is" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field,value,what",
    [
        ("longppl_stderr,none", "big", "not a stderr"),
        ("longppl_stderr,none", -0.1, "not a stderr"),
    ],
)
def test_malformed_stderr_is_exit_2(tmp_path, capsys, field, value, what):
    base = results_json()
    base["results"]["longppl_govreport"][field] = value
    assert gate(tmp_path, results_json(), base) == 2
    assert what in capsys.readouterr().err


def test_malformed_direction_is_exit_2(tmp_path, capsys):
    base = results_json()
    base["higher_is_better"]["longppl_govreport"]["longppl"] = "lower"
    assert gate(tmp_path, results_json(), base) == 2
    assert 'higher_is_better.longppl_govreport.longppl is "lower"' in capsys.readouterr().err


def test_failures_to_read_or_write_are_exit_2_with_one_line(tmp_path, capsys):
    # --summary into a folder that does not exist: the verdict was printed, the summary could not be written
    assert gate(tmp_path, results_json(), results_json(), "--summary", str(tmp_path / "no" / "summary.md")) == 2
    err = capsys.readouterr().err
    assert "cannot write the --summary file" in err and err.count("\n") == 1
    # a results file that is not UTF-8
    r = tmp_path / "latin1.json"
    r.write_bytes(json.dumps(results_json(model="caf\u00e9")).replace("\\u00e9", "\u00e9").encode("latin-1"))
    assert main(["gate", str(r), "--baseline", str(r)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    # a config that cannot be read
    assert gate(tmp_path, results_json(), results_json(), "--config", str(tmp_path / "missing.yaml")) == 2
    assert "no such gate config" in capsys.readouterr().err
    # leaderboard outputs into a missing folder
    write(tmp_path / "board" / "results_2026.json", results_json())
    for opt in ("--csv", "--markdown"):
        assert main(["leaderboard", str(tmp_path / "board"), opt, str(tmp_path / "no" / "x")]) == 2
        err = capsys.readouterr().err
        assert f"cannot write the {opt} file" in err and err.count("\n") == 1


def test_folder_with_two_models_is_exit_2(tmp_path, capsys):
    write(tmp_path / "run" / "results_2026-01-02T00-00-00.json", results_json(model="org/a"))
    write(tmp_path / "run" / "results_2026-01-03T00-00-00.json", results_json(model="org/b", longppl=9.0))
    base = write(tmp_path / "base.json", results_json(model="org/a"))
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(base)]) == 2
    err = capsys.readouterr().err
    assert "2 different models" in err and "'org/a'" in err and "'org/b'" in err


def test_paths_identified_by_content_hash_are_not_differences(tmp_path, capsys):
    def with_paths(data_files, spans_dir, texts_sha="abc123", manifest=None):
        s = copy.deepcopy(SETTINGS)
        s["longppl_govreport"]["data"] = {"data_files": data_files, "num_docs": 50, "texts_sha256": texts_sha}
        s["longppl_govreport"]["key_spans_dir"] = spans_dir
        s["longppl_govreport"]["key_spans_manifest"] = manifest
        return s

    man = {"evaluator": "meta-llama/Llama-3.1-8B", "trunc_len": 4096, "texts_sha256": "abc123"}
    here = with_paths("/ci/runner1/govreport.jsonl", "/ci/runner1/spans", manifest=man)
    there = with_paths("/home/me/govreport.jsonl", "/home/me/spans", manifest=dict(man))
    assert gate(tmp_path, results_json(settings=here), results_json(settings=there)) == 0
    # the same paths, other contents: refused, naming the hash
    other = with_paths("/home/me/govreport.jsonl", "/home/me/spans", texts_sha="zzz", manifest=dict(man))
    assert gate(tmp_path, results_json(settings=here), results_json(settings=other)) == 2
    assert "data.texts_sha256" in capsys.readouterr().err
    # span folders without a manifest: nothing but the path identifies them, so the path is compared
    bare_here = with_paths("/ci/runner1/govreport.jsonl", "/ci/runner1/spans")
    bare_there = with_paths("/home/me/govreport.jsonl", "/home/me/spans")
    assert gate(tmp_path, results_json(settings=bare_here), results_json(settings=bare_there)) == 2
    err = capsys.readouterr().err
    assert "key_spans_dir" in err and "data.data_files" not in err
    # a manifest that differs: refused on the manifest's key, and on the path
    man2 = {**man, "trunc_len": 2048}
    assert (
        gate(
            tmp_path,
            results_json(settings=here),
            results_json(settings=with_paths("/home/me/x.jsonl", "/home/me/spans", manifest=man2)),
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "key_spans_manifest.trunc_len" in err and "key_spans_dir" in err
    # forgetting_curve: the tokenizer path of another checkpoint over the same token stream is no difference
    fc_a, fc_b = copy.deepcopy(SETTINGS), copy.deepcopy(SETTINGS)
    for s, tok in ((fc_a, "/ckpt/step-1000"), (fc_b, "/ckpt/step-2000")):
        s["forgetting_curve"]["tokenizer"] = tok
        s["forgetting_curve"]["data"]["stream_sha256"] = "f00d"
    assert gate(tmp_path, results_json(settings=fc_a), results_json(settings=fc_b)) == 0


def test_unit_identified_by_content():
    a = flatten({"data": {"data_files": "/x", "texts_sha256": "h"}})
    b = flatten({"data": {"data_files": "/y", "texts_sha256": "h"}})
    c = flatten({"data": {"data_files": "/y", "texts_sha256": None}})
    assert identified_by_content("data.data_files", a, b)
    assert not identified_by_content("data.data_files", a, c)
    assert not identified_by_content("data.data_files", c, c)  # no hash recorded: the path counts
    assert not identified_by_content("data.num_docs", a, b)  # not a path key


# ------------------------------------------------------------------------------------------------ directions


def test_count_metric_without_direction_is_shown_not_gated(tmp_path, capsys):
    base, run = results_json(), results_json()
    for d, v in ((base, 100.0), (run, 40.0)):
        d["results"]["longppl_govreport"]["n_key_tokens,none"] = v
        d["higher_is_better"]["longppl_govreport"]["n_key_tokens"] = None
    assert gate(tmp_path, run, base) == 0
    assert "| `longppl_govreport/n_key_tokens` | 100 | 40 | -60 |" in capsys.readouterr().out


def _without_directions(data, how):
    if how == "missing":
        del data["higher_is_better"]
    elif how == "empty":
        data["higher_is_better"] = {}
    else:  # null per metric
        data["higher_is_better"] = {t: {m: None for m in hib} for t, hib in data["higher_is_better"].items()}
    return data


@pytest.mark.parametrize("how", ["missing", "empty", "null"])
def test_gate_refuses_a_suite_task_whose_results_record_no_direction(tmp_path, capsys, how):
    """Directions come from the results' higher_is_better; a task that declares its report (this suite's) but whose
    file records no direction at all cannot have its gate switched off that way: LongPPL 3x worse is not a PASS."""
    run = _without_directions(results_json(longppl=15.0), how)
    base = _without_directions(results_json(longppl=5.0), how)
    assert gate(tmp_path, run, base) == 2
    err = capsys.readouterr().err
    assert "records no direction for any metric of" in err and "results_2026-01-0" in err and err.count("\n") == 1
    # one side recording a metric's direction is enough for it: gated in it, the file recording none named
    base = results_json(longppl=5.0)
    base["higher_is_better"]["longppl_govreport"]["longppl"] = None
    assert gate(tmp_path, results_json(longppl=15.0), base) == 1
    out = capsys.readouterr().out
    assert "| `longppl_govreport/longppl` (lower better; one file) |" in out and "❌ regressed" in out
    assert "these record none: " + str(tmp_path / "base" / "results_2026-01-01T00-00-00.json") in out


def test_gate_refuses_directions_that_differ_between_the_files(tmp_path, capsys):
    run, base = results_json(longppl=15.0), results_json(longppl=5.0)
    run["higher_is_better"]["longppl_govreport"]["longppl"] = True
    assert gate(tmp_path, run, base) == 2
    err = capsys.readouterr().err
    assert "longppl_govreport/longppl: higher_is_better differs between run and baseline" in err
    assert "results_2026-01-02T00-00-00.json: true" in err and "results_2026-01-01T00-00-00.json: false" in err
    assert "Traceback" not in err and err.count("\n") == 1
    # the gate config's direction is explicit: it wins (and is the way out)
    cfg = write(tmp_path / "gate.json", {"metrics": {"longppl_govreport/longppl": {"higher_is_better": False}}})
    assert gate(tmp_path, run, base, "--config", str(cfg)) == 1


def test_stock_task_metric_without_direction_stays_not_gated(tmp_path, capsys):
    run, base = results_json(), results_json()
    for d, v in ((run, 0.2), (base, 0.9)):
        d["results"]["arc_easy"] = {"alias": "arc_easy", "acc,none": v, "acc_stderr,none": 0.01}
    assert gate(tmp_path, run, base) == 0
    assert "| `arc_easy/acc` | 0.9 ± 0.01 | 0.2 ± 0.01 | -0.7 |" in capsys.readouterr().out
    run["higher_is_better"]["arc_easy"] = {"acc": True}
    assert gate(tmp_path, run, base) == 1


def _malformed(data, field):
    cfg = data["configs"]["longppl_govreport"]
    if field == "configs.longppl_govreport":
        data["configs"]["longppl_govreport"] = [cfg]
    elif field == "configs.longppl_govreport.metadata":
        cfg["metadata"] = [cfg["metadata"]]
    elif field == "configs.longppl_govreport.metadata.longctx_settings":
        cfg["metadata"]["longctx_settings"] = "trunc_len=4096"
    else:
        data["n-samples"]["longppl_govreport"] = [50]
    return data


@pytest.mark.parametrize(
    "field",
    [
        "configs.longppl_govreport",
        "configs.longppl_govreport.metadata",
        "configs.longppl_govreport.metadata.longctx_settings",
        "n-samples.longppl_govreport",
    ],
)
def test_malformed_task_record_is_exit_2_naming_the_field(tmp_path, capsys, field):
    bad = _malformed(results_json(), field)
    for run, base in ((bad, results_json()), (results_json(), bad)):
        assert gate(tmp_path, run, base) == 2
        err = capsys.readouterr().err
        assert f"{field} is a " in err and ", expected an object" in err and "results_2026-01-0" in err
        assert "AttributeError" not in err and "gate failed" not in err
    path = write(tmp_path / "board" / "results_2026-01-01T00-00-00.json", bad)
    assert main(["leaderboard", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {field} is a " in err and "AttributeError" not in err


def test_an_unexpected_failure_is_exit_2_not_1(tmp_path, capsys, monkeypatch):
    """Exit 1 means "regressed" only: a crash inside the tool must not read as a verdict."""

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("lm_eval_longctx.report.gate.compare", boom)
    assert gate(tmp_path, results_json(), results_json()) == 2
    assert "error: gate failed: RuntimeError: disk on fire" in capsys.readouterr().err


def test_runtime_settings_and_unverified_span_folders(tmp_path, capsys):
    """Settings recorded under `runtime` (declared as changing no number) are not compared; a span folder whose
    files were not verified is identified by its path only."""
    a, b = copy.deepcopy(SETTINGS), copy.deepcopy(SETTINGS)
    a["longppl_govreport"]["runtime"] = {"chunk_size": 1024, "span_cache_dir": "/a"}
    b["longppl_govreport"]["runtime"] = {"chunk_size": 4096, "span_cache_dir": "/b"}
    a["longppl_govreport"]["export_tokens"] = "/exports/a"  # where a per-token export went
    assert gate(tmp_path, results_json(settings=a), results_json(settings=b)) == 0
    man = {"evaluator": "e", "texts_sha256": "abc123", "slice_sha256": {"slice_0.txt": "00"}}
    for verified, code in ((True, 0), (False, 2)):
        for s, d in ((a, "/x/spans"), (b, "/y/spans")):
            s["longppl_govreport"].update(key_spans_dir=d, key_spans_manifest=dict(man), key_spans_verified=verified)
        assert gate(tmp_path, results_json(settings=a), results_json(settings=b)) == code
    assert "key_spans_dir" in capsys.readouterr().err
    # the leaderboard does not split a model's rows on them either
    for i, s in enumerate((a, b)):
        s["longppl_govreport"]["key_spans_verified"] = True
        write(tmp_path / "board" / f"results_2026-01-0{i + 1}T00-00-00.json", results_json(model="org/a", settings=s))
    assert main(["leaderboard", str(tmp_path / "board"), "--one-row-per-model", "--newest"]) == 0


def test_new_metric_in_the_run_is_shown_even_when_nan(tmp_path, capsys):
    run = results_json()
    run["results"]["longppl_govreport"]["longppl_soft,none"] = float("nan")
    assert gate(tmp_path, run, results_json()) == 0
    # the run's file records no direction for it: shown, not gated
    assert "| `longppl_govreport/longppl_soft` | — | NaN |" in capsys.readouterr().out
    run["results"]["longppl_govreport"]["longppl_soft,none"] = "oops"  # but a malformed field is not
    assert gate(tmp_path, run, results_json()) == 2


def test_lower_bounds_are_compared_as_bounds():
    def status(base: Metric, run: Metric) -> str:
        return compare(Run({"t/len": run}, {}, {}, {}, "r"), Run({"t/len": base}, {}, {}, {}, "b")).rows[0].status

    def length(value, bound=False, hib=True):
        return Metric(value, None, hib, lower_bound=bound)

    assert status(length(976, True), length(976, True)) == "ok"  # >= 976 and >= 976: nothing known either way
    assert status(length(976, True), length(512)) == "regressed"  # below the baseline's bound: judged as now
    assert status(length(976), length(512, True)) == "ok"  # >= 512 may be 976 or more: no regression shown
    assert status(length(512, True), length(976)) == "ok"  # the baseline may be 976 or more: no improvement shown
    assert status(length(512), length(976, True)) == "improved"
    # lower is better (a config may say so): the same rule, mirrored
    assert status(length(512, hib=False), length(976, True, hib=False)) == "regressed"
    assert status(length(976, True, hib=False), length(512, hib=False)) == "improved"
    assert status(length(512, hib=False), length(256, True, hib=False)) == "ok"


def test_the_gate_shows_a_bound_and_passes_two_equal_bounds(tmp_path, capsys):
    base = suite_results_json("org/m", tasks=["retrieval_gain_map"])  # effective lengths 2048 of 128, 512, 2048
    run = suite_results_json("org/m", tasks=["retrieval_gain_map"], shift=0.1)
    html = tmp_path / "gate.html"
    assert gate(tmp_path, run, base, "--html", str(html)) == 0
    out = capsys.readouterr().out
    assert "| `retrieval_gain_map/effective_length` (higher better) | ≥ 2048 | ≥ 2048 |" in out
    assert "≥: a lower bound" in out
    page = read_page(html)
    bounded = [a for a, _ in page.numbers if a.get("data-lower-bound") == "true"]
    assert {a["data-metric"] for a in bounded} == {"retrieval_gain_map/effective_length",
                                                   "retrieval_gain_map/effective_length_abs"}  # fmt: skip
    # the run's effective length fell below the baseline's bound: a regression, as before
    run["results"]["retrieval_gain_map"]["effective_length,none"] = 512.0
    assert gate(tmp_path, run, base) == 1
    assert "| `retrieval_gain_map/effective_length` (higher better) | ≥ 2048 | 512 |" in capsys.readouterr().out
