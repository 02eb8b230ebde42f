"""Our own errors print as their message block; anything else keeps Python's traceback."""

import contextvars
import subprocess
import sys

import pytest

from lm_eval_longctx import errors
from lm_eval_longctx.settings import SettingsError


def _raise(err):
    try:
        raise err
    except Exception as e:  # noqa: BLE001
        return e


def test_which_errors_are_ours():
    assert errors.user_error(_raise(SettingsError("bad key"))) is not None
    assert errors.user_error(_raise(errors.ResourceUnavailableError("no data"))) is not None
    assert errors.user_error(_raise(KeyError("x"))) is None  # a bug, not a message for the user
    assert errors.user_error(_raise(ValueError("raised here, in a test module"))) is None
    try:
        import json

        json.loads("{")
    except ValueError as e:  # raised inside the standard library: keeps its traceback
        assert errors.user_error(e) is None
    wrapped = RuntimeError("the harness wrapped it")
    wrapped.__cause__ = _raise(SettingsError("the cause"))
    assert str(errors.user_error(wrapped)) == "the cause"


def test_a_plain_value_error_raised_in_the_package_is_ours(tmp_path):
    from lm_eval_longctx.data import documents

    try:
        documents.copy_lengths(max_len=4, min_len=8)
    except ValueError as e:
        assert errors.user_error(e) is e
    else:
        pytest.fail("no error")


@pytest.mark.parametrize("debug", ["", "1"])
def test_excepthook_prints_the_block_and_exits_2(debug):
    code = (
        "import atexit, sys; atexit.register(lambda: print('exit handlers ran', file=sys.stderr)); "
        "from lm_eval_longctx import errors; from lm_eval_longctx.settings import SettingsError; "
        "errors.install_excepthook(); errors.install_excepthook(); raise SettingsError('what, why, ways out')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LM_EVAL_LONGCTX_DEBUG": debug, "PYTHONPATH": sys.path[0] or "."},
        timeout=60,
    )
    assert proc.returncode == 2 and "what, why, ways out" in proc.stderr
    assert ("Traceback" in proc.stderr) == bool(debug)
    assert proc.stderr.count("what, why, ways out") == 1
    assert "exit handlers ran" in proc.stderr  # a normal exit otherwise


def test_other_errors_keep_their_traceback_and_exit_1():
    code = "from lm_eval_longctx import errors; errors.install_excepthook(); raise KeyError('a bug')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0] or "."},
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "KeyError: 'a bug'" in proc.stderr


def _help(*args) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval_longctx", *args, "--help"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_help_texts_describe_every_subcommand_and_option():
    top = _help()
    assert "``" not in top and "five lm-eval tasks" in " ".join(top.split())
    for command in ("tasks-dir", "gate", "leaderboard", "correlate", "demo", "validate", "precompute-spans", "view"):
        assert command in top
    for command in ("tasks-dir", "correlate", "precompute-spans"):
        text = _help(command)
        description = text.split("\n\n")[1]  # argparse: usage, then the description
        assert not description.startswith(("positional", "options")), (command, text[:300])
    validate = _help("validate")
    for option in ("--n-resamples", "--confidence"):
        line = validate[validate.index(option) :].split("\n--")[0]
        assert "default" in line, (option, line)


@pytest.mark.parametrize(
    ("argv0", "error", "status", "one_line"),
    [
        ("/venv/bin/lm_eval", "SettingsError('what, why, ways out')", 2, True),
        ("/venv/lib/python3.11/site-packages/lm_eval/__main__.py", "SettingsError('what, why, ways out')", 2, True),
        ("my_script.py", "SettingsError('what, why, ways out')", 1, False),  # the Python API: the exception itself
        ("/venv/bin/lm_eval", "KeyError('what, why, ways out')", 1, False),  # not ours: its traceback
    ],
)
def test_under_lm_eval_s_command_line_our_error_is_one_block_and_status_2(argv0, error, status, one_line):
    code = (
        "import sys; from lm_eval_longctx import errors; from lm_eval_longctx.settings import SettingsError\n"
        f"sys.argv[0] = {argv0!r}\n"
        f"with errors.one_line_under_lm_eval_cli():\n    raise {error}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0] or "."},
        timeout=60,
    )
    assert proc.returncode == status and "what, why, ways out" in proc.stderr
    assert ("Traceback" not in proc.stderr) == one_line
    assert proc.stderr.count("what, why, ways out") == 1


def test_what_was_said_is_remembered_per_evaluation(monkeypatch):
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))
    assert errors.first_time("k") and not errors.first_time("k") and errors.already("k")
    with errors.new_evaluation():  # a new simple_evaluate call: said again
        assert not errors.already("k") and errors.first_time("k") and not errors.first_time("k")
    assert errors.already("k") and not errors.first_time("k")  # the outer one remembers its own
