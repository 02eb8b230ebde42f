"""The leaderboard (``report/leaderboard.py``, ``lm-eval-longctx leaderboard``) on synthetic lm-eval results files
built by hand (``tests/report_fixtures.py``): markdown and CSV, runs under other settings never merged, NaN shown as
NaN and a missing metric as missing, audits joined on the checkpoint, a row per run, lower bounds marked."""

import copy

from lm_eval_longctx.cli import main
from tests.report_fixtures import (
    SETTINGS,
    check_numbers,
    read_page,
    results_json,
    suite_results_json,
    write,
    write_audit,
    write_checkpoint,
    write_results,
)


def test_leaderboard_markdown_and_csv(tmp_path, capsys):
    for i, name in enumerate(["org/a", "org/b", "org/c"]):
        write(tmp_path / name.replace("/", "__") / "results_2026.json", results_json(model=name, longppl=5.0 + i))
    out_csv = tmp_path / "board.csv"
    assert (
        main(["leaderboard", str(tmp_path), "--metric", "*/longppl", "--metric", "*/copy_acc", "--csv", str(out_csv)])
        == 0
    )
    md = capsys.readouterr().out
    assert "| model | forgetting_curve/copy_acc ↑ | longppl_govreport/longppl ↓ |" in md
    assert "| org/c | 0.8 ± 0.01 | 7 ± 0.05 |" in md
    rows = list(__import__("csv").DictReader(out_csv.read_text().splitlines()))
    assert [r["model"] for r in rows] == ["org/a", "org/b", "org/c"]
    assert float(rows[1]["longppl_govreport/longppl"]) == 6.0
    assert float(rows[1]["longppl_govreport/longppl_stderr"]) == 0.05
    assert main(["leaderboard", str(tmp_path), "--metric", "nothing/*"]) == 2


def test_leaderboard_never_merges_runs_with_other_settings(tmp_path, capsys):
    other = copy.deepcopy(SETTINGS)
    other["longppl_govreport"]["trunc_len"] = 2048
    write(tmp_path / "a" / "results_2026-01-01T00-00-00.json", results_json(model="org/a", longppl=5.0))
    write(tmp_path / "a" / "results_2026-01-02T00-00-00.json", results_json(model="org/a", longppl=7.0, settings=other))
    write(tmp_path / "b" / "results_2026-01-01T00-00-00.json", results_json(model="org/b", longppl=6.0))
    out_csv = tmp_path / "board.csv"
    assert (
        main(["leaderboard", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "*/longppl", "--csv", str(out_csv)])
        == 0
    )
    md = capsys.readouterr().out
    assert "| org/a [longppl_govreport.trunc_len=4096] | 5 ± 0.05 |" in md
    assert "| org/a [longppl_govreport.trunc_len=2048] | 7 ± 0.05 |" in md
    assert "| org/b | 6 ± 0.05 |" in md
    rows = list(__import__("csv").DictReader(out_csv.read_text().splitlines()))
    assert len(rows) == 3
    assert main(["leaderboard", str(tmp_path / "a"), str(tmp_path / "b"), "--one-row-per-model"]) == 2
    assert "'org/a' has results under different settings" in capsys.readouterr().err
    # the same task under the same settings in two files: which is meant? Refused, naming both; --newest takes the
    # newer by its date, whatever the order the files are found in
    write(tmp_path / "c" / "results_2026-01-02T00-00-00.json", results_json(model="org/c", longppl=5.5))
    write(tmp_path / "c" / "results_2026-01-01T00-00-00.json", results_json(model="org/c", longppl=5.0))
    assert main(["leaderboard", str(tmp_path / "c"), "--one-row-per-model", "--metric", "*/longppl"]) == 2
    err = capsys.readouterr().err
    assert "'org/c': longppl_govreport under the same settings in two results files" in err and "--newest" in err
    assert "results_2026-01-01T00-00-00.json" in err and "results_2026-01-02T00-00-00.json" in err
    argv = ["leaderboard", str(tmp_path / "c"), "--one-row-per-model", "--metric", "*/longppl", "--newest"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "| org/c | 5.5 ± 0.05 |" in out and "the newest, over" in err


def test_leaderboard_nan_is_nan_and_missing_is_missing(tmp_path, capsys):
    a = results_json(model="org/a")
    a["results"]["longppl_govreport"]["longppl,none"] = float("nan")
    b = results_json(model="org/b")
    del b["results"]["forgetting_curve"]
    write(tmp_path / "a" / "results_2026.json", a)
    write(tmp_path / "b" / "results_2026.json", b)
    out_csv = tmp_path / "board.csv"
    assert (
        main(["leaderboard", str(tmp_path), "--metric", "*/longppl", "--metric", "*/copy_acc", "--csv", str(out_csv)])
        == 0
    )
    md = capsys.readouterr().out
    assert "| org/a | 0.8 ± 0.01 | NaN ± 0.05 |" in md or "| org/a | 0.8 ± 0.01 | NaN |" in md
    assert "| org/b | missing | 5 ± 0.05 |" in md
    rows = {r["model"]: r for r in __import__("csv").DictReader(out_csv.read_text().splitlines())}
    assert rows["org/a"]["longppl_govreport/longppl"] == "nan"
    assert rows["org/b"]["forgetting_curve/copy_acc"] == ""
    # a value that is not a number at all is a malformed file
    a["results"]["longppl_govreport"]["longppl,none"] = "5.0"
    write(tmp_path / "a" / "results_2026.json", a)
    assert main(["leaderboard", str(tmp_path), "--metric", "*/longppl"]) == 2
    assert 'longppl_govreport/longppl is "5.0", not a number' in capsys.readouterr().err


def test_an_audit_sits_on_the_row_of_its_checkpoint_however_each_spelled_it(tmp_path, monkeypatch, capsys):
    folder = write_checkpoint(tmp_path / "models" / "SmolLM2-135M-Instruct")
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    # the run recorded the folder as typed, relative; the audit recorded it absolute; another run the link
    write(tmp_path / "runs" / "a" / "results_2026.json", results_json(model="models/SmolLM2-135M-Instruct"))
    write(tmp_path / "runs" / "b" / "results_2026.json", results_json(model="link", longppl=6.0))
    write(tmp_path / "runs" / "c" / "results_2026.json", results_json(model="org/unaudited"))
    write_audit(tmp_path / "audit", str(folder), effective=8192)
    write_audit(tmp_path / "lone", "org/never-run")
    argv = ["leaderboard", "runs/a", "runs/c", "--audit", "audit", "--audit", "lone", "--metric", "*/longppl"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "| models/SmolLM2-135M-Instruct | 32768 | 8192 [8192, 8192] | 5 ± 0.05 |" in out
    assert "| org/unaudited | no audit | no audit | 5 ± 0.05 |" in out
    assert str(folder) not in out  # not a second row of the same checkpoint
    # an audit that matches no run: its own row, named on stderr and under the table
    assert "| org/never-run | 32768 | 8192 [8192, 8192] | missing |" in out
    assert "--audit lone/audit.json: its model org/never-run matches no run given" in err
    assert "matches no run given" in out
    assert main(["leaderboard", "runs/b", "--audit", "audit", "--metric", "*/longppl"]) == 0
    out, err = capsys.readouterr()
    assert "| link | 32768 | 8192 [8192, 8192] | 6 ± 0.05 |" in out and "matches no run" not in err


def test_two_runs_of_one_model_are_refused_naming_per_run_which_gives_a_row_each(tmp_path, capsys):
    for name, value in (("exp1", 5.0), ("exp2", 5.5)):
        write(tmp_path / name / "out" / "results_2026-01-01T00-00-00.json", results_json(model="org/a", longppl=value))
    write(tmp_path / "exp3" / "out" / "results_2026-01-01T00-00-00.json", results_json(model="org/b"))
    inputs = [str(tmp_path / n / "out") for n in ("exp1", "exp2", "exp3")]
    assert main(["leaderboard", *inputs, "--metric", "*/longppl"]) == 2
    assert "--per-run for one row per run" in capsys.readouterr().err
    out_csv = tmp_path / "board.csv"
    assert main(["leaderboard", *inputs, "--metric", "*/longppl", "--per-run", "--csv", str(out_csv)]) == 0
    md = capsys.readouterr().out
    assert "| org/a [exp1/out] | 5 ± 0.05 |" in md and "| org/a [exp2/out] | 5.5 ± 0.05 |" in md
    assert "| org/b | 5 ± 0.05 |" in md
    rows = list(__import__("csv").DictReader(out_csv.read_text().splitlines()))
    assert [r["model"] for r in rows] == ["org/a [exp1/out]", "org/a [exp2/out]", "org/b"]


def test_a_length_that_reaches_the_longest_tested_is_shown_as_a_bound(tmp_path, capsys):
    bounded = suite_results_json("org/long", tasks=["retrieval_gain_map"])  # effective 2048 of 128, 512, 2048
    short = suite_results_json("org/short", tasks=["retrieval_gain_map"])
    short["results"]["retrieval_gain_map"]["effective_length,none"] = 512.0
    write_results(tmp_path / "long", bounded)
    write_results(tmp_path / "short", short)
    out_csv, out_html = tmp_path / "board.csv", tmp_path / "board.html"
    argv = ["leaderboard", str(tmp_path / "long"), str(tmp_path / "short"), "--metric", "*/effective_length"]
    assert main([*argv, "--csv", str(out_csv), "--html", str(out_html)]) == 0
    md = capsys.readouterr().out
    assert "| org/long | ≥ 2048 |" in md and "| org/short | 512 |" in md
    assert "≥: a lower bound" in md
    rows = {r["model"]: r for r in __import__("csv").DictReader(out_csv.read_text().splitlines())}
    name = "retrieval_gain_map/effective_length"
    assert rows["org/long"][name] == "2048.0" and rows["org/long"][f"{name}_lower_bound"] == "true"
    assert rows["org/short"][name] == "512.0" and rows["org/short"][f"{name}_lower_bound"] == "false"
    page = read_page(out_html)
    assert check_numbers(page, {"org/long": tmp_path / "long", "org/short": tmp_path / "short"}) == 2
    assert [a.get("data-lower-bound") for a, _ in page.numbers] == ["true", None]
