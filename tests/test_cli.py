"""lm-eval-longctx's dispatch (``cli.py``): every subcommand its parser lists has one handler in ``COMMANDS``."""

from __future__ import annotations

import re

import pytest

from lm_eval_longctx import cli


def test_every_subcommand_listed_has_one_handler(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    listed = re.search(r"\{([^}]*)\}", capsys.readouterr().out).group(1).split(",")
    assert sorted(listed) == sorted(cli.COMMANDS)


def test_a_report_tool_that_fails_is_exit_2_with_one_line(capsys):
    def broken(args):
        raise RuntimeError("boom")

    assert cli.report_tool(broken)(type("Args", (), {"command": "gate"})()) == 2
    assert capsys.readouterr().err.strip() == "error: gate failed: RuntimeError: boom"


def test_validate_is_the_one_entry_of_the_known_answer_validation(capsys):
    """`demo --validate` is gone; `validate` takes what it took (an output folder, --budget, --metadata, --check)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["demo", "--validate"])
    assert stop.value.code == 2 and "--validate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["validate", "--help"])
    assert stop.value.code == 0
    usage = capsys.readouterr().out
    for option in ("out", "--budget", "--metadata", "--check"):
        assert option in usage, option


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "tasks-dir", interrupted)
    assert cli.main(["tasks-dir"]) == cli.INTERRUPTED_EXIT
    assert capsys.readouterr().err.strip() == "interrupted (Ctrl-C): lm-eval-longctx tasks-dir stopped"


@pytest.mark.parametrize("tokenizer", ["missing", "empty"])
def test_corpus_with_a_tokenizer_folder_that_holds_none_is_one_line(tokenizer, tmp_path, capsys):
    folder = tmp_path / "tok"
    if tokenizer == "empty":
        folder.mkdir()
    out = tmp_path / "c.jsonl"
    assert cli.main(["corpus", str(out), "--tokens", "100", "--docs", "2", "--tokenizer", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --tokenizer {folder}: ") and len(err.splitlines()) == 1 and not out.exists()
