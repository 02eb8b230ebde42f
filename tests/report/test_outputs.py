"""report/outputs.py: an output of a report command is never one of its inputs (by path or through a link) and
never written by two options. The commands' refusals are tested in tests/integration/test_report_probes.py."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.outputs import check_outputs
from lm_eval_longctx.report.results import UnusableInput
from tests.report_fixtures import write


def test_outputs_other_than_the_inputs_pass(tmp_path):
    run = write(tmp_path / "run.json", "{}")
    check_outputs([("--summary", tmp_path / "summary.md"), ("--html", None), ("--csv", "")], [run])
    assert not (tmp_path / "summary.md").exists()  # checked, nothing written


def test_an_output_that_is_an_input_is_refused(tmp_path, monkeypatch):
    run = write(tmp_path / "run.json", "{}")
    with pytest.raises(UnusableInput, match=r"--summary .*run\.json: that file is an input of this command"):
        check_outputs([("--summary", run)], [tmp_path / "other.json", run])
    monkeypatch.chdir(tmp_path)  # the same file by a relative path
    with pytest.raises(UnusableInput, match="is an input of this command"):
        check_outputs([("--html", "run.json")], [run])


def test_an_output_through_a_link_to_an_input_is_refused(tmp_path):
    run = write(tmp_path / "run.json", "{}")
    link = tmp_path / "summary.md"
    link.symlink_to(run)
    with pytest.raises(UnusableInput, match=rf"--summary {link}: that file is an input of this command \({run}\)"):
        check_outputs([("--summary", link)], [run])


def test_two_options_writing_one_file_are_refused(tmp_path):
    out = tmp_path / "out.md"
    with pytest.raises(UnusableInput, match=r"--markdown .*out\.md: the same file as --summary"):
        check_outputs([("--summary", out), ("--markdown", tmp_path / "x" / ".." / "out.md")], [])
