"""Errors that tell the user what could not be had and the ways out (no lm-eval import)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import traceback
import warnings


class ResourceUnavailableError(RuntimeError):
    """A dataset, tokenizer or model that cannot be fetched or read (offline, gated, missing, malformed)."""


class ScoringError(ValueError):
    """A sequence or model the engine cannot score exactly (``engine.scoring.ScoringError``), or a sequence a task
    cannot build from a document."""


def first_line(err: BaseException) -> str:
    """``Type: first line of the message``: the cause in one line, not a 30-line traceback."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


class LongctxWarning(UserWarning):
    """A notice the user sees once, as a line of the ``lm_eval_longctx`` logger; also issued as this warning for
    programs that collect warnings. Ignored by default, so that it is not printed a second time with Python's
    echo of the source line."""


warnings.filterwarnings("ignore", category=LongctxWarning)

# What this evaluation has said or given up on (a notice said once, a cache folder that failed): a fresh set for each
# lm-eval simple_evaluate call (``new_evaluation``, opened by harness/evaluation.py), one for the process outside one.
_SAID: contextvars.ContextVar[set | None] = contextvars.ContextVar("lm_eval_longctx_said", default=None)


def _said() -> set:
    said = _SAID.get()
    if said is None:
        said = set()
        _SAID.set(said)
    return said


def first_time(key) -> bool:
    """True the first time this evaluation asks with ``key`` (hashable), False after."""
    said = _said()
    if key in said:
        return False
    said.add(key)
    return True


def already(key) -> bool:
    """Whether this evaluation has asked ``first_time(key)``."""
    return key in _said()


@contextlib.contextmanager
def new_evaluation():
    """Inside this block nothing has been said yet: every notice is said again, every cache folder tried again."""
    token = _SAID.set(set())
    try:
        yield
    finally:
        _SAID.reset(token)


def notice(message: str) -> None:
    """Tell the user ``message`` once per evaluation: a warning line of the ``lm_eval_longctx`` logger and a
    LongctxWarning (a task built twice, before the model and after it, says it once)."""
    import logging

    if not first_time(("notice", message)):
        return
    logging.getLogger("lm_eval_longctx").warning(message)
    warnings.warn(message, LongctxWarning, stacklevel=2)


# ------------------------------------------------------------------ errors a user can act on
# Our own messages say what is wrong, why and the ways out; a 50-line traceback above them hides that. An uncaught
# error that is ours prints as that block alone, unless this variable asks for the traceback.
DEBUG_ENV = "LM_EVAL_LONGCTX_DEBUG"
_PACKAGE = __name__.rsplit(".", 1)[0]


def debug_wanted() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _raised_by_us(err: BaseException) -> bool:
    """An error class of this package, or a ValueError / FileNotFoundError raised in this package's code (the data
    checks raise those with their message); not one that escapes from torch, transformers or lm-eval."""
    if type(err).__module__.split(".")[0] == _PACKAGE:
        return True
    if type(err) not in (ValueError, FileNotFoundError):
        return False
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}{_PACKAGE}{os.sep}" in tb.tb_frame.f_code.co_filename


def user_error(err: BaseException | None) -> BaseException | None:
    """The error of ours among ``err`` and what caused it (an error wrapped by the harness), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, Exception) and _raised_by_us(err):
            return err
        err = err.__cause__ or err.__context__
    return None


def format_user_error(err: BaseException) -> str:
    return (
        f"lm_eval_longctx: error: {str(err).strip() or type(err).__name__}\n"
        f"(a {type(err).__name__}; {DEBUG_ENV}=1 shows the Python traceback)"
    )


# The exit status of a run stopped by an error of ours (bad input, refused before or while it ran), as argparse
# exits for a bad flag; 1 stays for everything else (a bug, an error of torch or lm-eval).
USER_ERROR_EXIT = 2


def _exit(status: int) -> None:
    """End the process with ``status`` from inside the excepthook, where Python would exit 1: the exit handlers
    run and the output is flushed first, as on a normal exit."""
    import atexit
    import logging

    try:
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


# What sys.argv[0] reads under lm-eval's command line: its console scripts, or `python -m lm_eval` (runpy puts the
# path of lm_eval/__main__.py there, as `accelerate launch -m lm_eval` does)
LM_EVAL_COMMANDS = ("lm_eval", "lm-eval")


def under_lm_eval_cli() -> bool:
    """Whether this process is lm-eval's command line (``lm_eval ...``), not a program calling its Python API."""
    from pathlib import Path

    command = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return command.name in LM_EVAL_COMMANDS or command.parts[-2:] == ("lm_eval", "__main__.py")


@contextlib.contextmanager
def one_line_under_lm_eval_cli():
    """Under lm-eval's command line, an error of ours ends the run as its message block and exit status 2 (as
    ``install_excepthook`` does for this package's own commands); a program calling lm-eval's Python API gets the
    exception itself, and every other error keeps its traceback. Usable as a decorator."""
    try:
        yield
    except Exception as err:
        ours = user_error(err)
        if ours is None or not under_lm_eval_cli():
            raise
        if debug_wanted():
            traceback.print_exc()
        else:
            print(format_user_error(ours), file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT) from None


def install_excepthook() -> None:
    """Print an uncaught error of ours as its message block, without the traceback (unless LM_EVAL_LONGCTX_DEBUG
    asks for it), and exit with status 2 (idempotent)."""
    previous = sys.excepthook
    if getattr(previous, "_lm_eval_longctx", False):
        return

    def excepthook(kind, value, tb):
        ours = user_error(value)
        if ours is None:
            return previous(kind, value, tb)
        if debug_wanted():
            previous(kind, value, tb)
        else:
            print(format_user_error(ours), file=sys.stderr)
        _exit(USER_ERROR_EXIT)

    excepthook._lm_eval_longctx = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook
