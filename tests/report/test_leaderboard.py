"""The leaderboard (``report/leaderboard.py``, ``lm-eval-longctx leaderboard``) on synthetic lm-eval results files
built by hand (``tests/report_fixtures.py``): markdown and CSV, runs under other settings never merged, NaN shown as
NaN and a missing metric as missing."""

import copy

from lm_eval_longctx.cli import main
from tests.report_fixtures import SETTINGS, results_json, write


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
