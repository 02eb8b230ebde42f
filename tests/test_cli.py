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
