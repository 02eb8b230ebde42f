"""The results files lm-eval saves: the drawings written beside them, and a save that fails stops the run.

With ``--output_path``, lm-eval writes the results JSON in ``EvaluationTracker.save_results_aggregated`` and the
samples in ``save_results_samples``; both return nothing, offer no hook, and on a full or read-only file system log a
warning and go on (the run exits 0 with no file, or with the start of one). The replacements set by ``contacts.py``
remove what a failed save wrote and raise ``ResultsNotSavedError``; after a results JSON is saved they call the
drawers that write files beside it (the forgetting curve's PNG), registered by ``suite.py`` with
``on_results_saved``. A failing drawer only logs a warning: the results are already saved. Before lm-eval writes
the results, the annotators registered with ``before_results_saved`` add their fields to them (which values are
lower bounds).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Callable

from .. import errors, output_dirs

log = logging.getLogger("lm_eval_longctx")

# drawer name -> callback(results, results_file), declared by suite.py when it is imported
RESULTS_SAVED_CALLBACKS: dict[str, Callable] = {}


def on_results_saved(name: str, callback) -> None:
    """Call ``callback(results: dict, results_file: pathlib.Path)`` after each results JSON is saved
    (registered under ``name``: re-registering replaces it)."""
    RESULTS_SAVED_CALLBACKS[name] = callback


# annotator name -> callback(results), declared by suite.py: adds fields to the results before lm-eval writes them
RESULTS_ANNOTATORS: dict[str, Callable] = {}


def before_results_saved(name: str, callback) -> None:
    """Call ``callback(results: dict)`` on each results dict just before lm-eval writes it; the callback adds its
    fields in place (registered under ``name``: re-registering replaces it)."""
    RESULTS_ANNOTATORS[name] = callback


VERSION_KEY = "longctx_version"


def add_package_version(results: dict) -> None:
    """Write the installed lm_eval_longctx's version (what ``pip show lm_eval_longctx`` says) into ``results``."""
    from importlib import metadata

    try:
        results[VERSION_KEY] = metadata.version("lm_eval_longctx")
    except metadata.PackageNotFoundError:  # a checkout on sys.path that was never installed
        results[VERSION_KEY] = "unknown"


class ResultsNotSavedError(OSError):
    """``--output_path`` was given and the results JSON could not be written there."""


def _saved_results_file(tracker):
    """The file save_results_aggregated has just written (its own naming, 0.4.13)."""
    from pathlib import Path

    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.with_name(f"{path.stem}_{tracker.date_id}.json")
    return path / str(tracker.general_config_tracker.model_name_sanitized) / f"results_{tracker.date_id}.json"


def _whole_results_file(path) -> bool:
    """Whether ``path`` holds a whole results JSON (an object), not the start of one."""
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def _complete_lines(path) -> int:
    """The newline-terminated lines of a samples file (a write cut short leaves a last line without one)."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n if last == b"\n" else -1


@contextlib.contextmanager
def _lm_eval_save_error():
    """A list that receives the error lm-eval's tracker catches while it saves: it logs a warning inside its
    ``except`` block and goes on, so the cause (a full or read-only file system) is read from there."""
    logger = logging.getLogger("lm_eval.loggers.evaluation_tracker")
    shown = logger.getEffectiveLevel()
    caught: list[Exception] = []

    def note(record: logging.LogRecord) -> bool:
        err = sys.exc_info()[1]
        if record.levelno >= logging.WARNING and isinstance(err, Exception):
            caught.append(err)
        return record.levelno >= shown

    level = logger.level
    if shown > logging.WARNING:  # the warning must be made to be seen here, and is not shown
        logger.setLevel(logging.WARNING)
    logger.addFilter(note)
    try:
        yield caught
    finally:
        logger.removeFilter(note)
        logger.setLevel(level)


def _save_failure(path, caught: list[Exception], cut_short: bool) -> str:
    """``PATH: the cause`` of a failed save, in one line."""
    if caught and isinstance(caught[-1], OSError):
        return output_dirs.cannot_write(path, caught[-1])
    if caught:
        return f"cannot write {path}: {errors.first_line(caught[-1])}"
    return f"cannot write {path}" + (": it was cut short" if cut_short else "")


def _remove_partial(path, size_before: int | None) -> None:
    """Put back what ``path`` was before a failed write: its first ``size_before`` bytes, or nothing."""
    with contextlib.suppress(OSError):
        if size_before is None:
            os.unlink(path)
        else:
            os.truncate(path, size_before)


def save_results_aggregated(original):
    """``EvaluationTracker.save_results_aggregated``: ``original``, then a results file that was not written whole
    is removed and stops the run; the drawers write beside one that was."""

    @functools.wraps(original)
    @errors.one_line_under_lm_eval_cli()
    def save_results_aggregated(self, results, samples=None, *args, **kwargs):
        before = getattr(self, "date_id", None)
        if self.output_path and isinstance(results, dict):
            for callback in list(RESULTS_ANNOTATORS.values()):
                callback(results)
        with _lm_eval_save_error() as caught:
            out = original(self, results, samples, *args, **kwargs)
        if not self.output_path:
            return out
        path = _saved_results_file(self) if getattr(self, "date_id", None) not in (None, before) else None
        if path is None or not path.is_file() or not _whole_results_file(path):
            # lm-eval logs a warning and exits 0; a CI job would then gate on a file that is not there (or is cut
            # short: a full file system leaves the start of it, which goes, the file name being new)
            cut_short = path is not None and path.is_file()
            if cut_short:
                _remove_partial(path, None)
            if path is not None:
                why = _save_failure(path, caught, cut_short)
            else:
                why = errors.first_line(caught[-1]) if caught else "see lm-eval's warning above"
            raise ResultsNotSavedError(
                f"--output_path {self.output_path}: the results file could not be written ({why}); nothing was "
                "saved. Free space or pass an --output_path that can be written."
            )
        if path.exists():
            for name, callback in list(RESULTS_SAVED_CALLBACKS.items()):
                try:
                    callback(results, path)
                except Exception as e:  # noqa: BLE001  (the results are saved; a picture must not fail the run)
                    why = (
                        output_dirs.cannot_write(e.filename, e)
                        if isinstance(e, OSError) and e.filename
                        else errors.first_line(e)
                    )
                    log.warning("%s: could not write its files beside %s: %s; the results are saved", name, path, why)
        return out

    return save_results_aggregated


def save_results_samples(original_samples):
    """``EvaluationTracker.save_results_samples``: ``original_samples``, then what a failed save appended is removed
    and stops the run."""

    @functools.wraps(original_samples)
    @errors.one_line_under_lm_eval_cli()
    def save_results_samples(self, task_name, samples, *args, **kwargs):
        path = None
        if self.output_path and samples and getattr(self, "date_id", None):
            path = _saved_results_file(self).with_name(f"samples_{task_name}_{self.date_id}.jsonl")
        lines_before = _complete_lines(path) if path is not None and path.is_file() else 0
        size_before = path.stat().st_size if path is not None and path.is_file() else None
        with _lm_eval_save_error() as caught:
            out = original_samples(self, task_name, samples, *args, **kwargs)
        if path is not None and (not path.is_file() or _complete_lines(path) != lines_before + len(samples)):
            cut_short = path.is_file()
            if cut_short:  # lm-eval appends: what it wrote of these samples goes, what was there stays
                _remove_partial(path, size_before)
            raise ResultsNotSavedError(
                f"--output_path {self.output_path}: the samples of {task_name} could not be written "
                f"({_save_failure(path, caught, cut_short)}); the results file beside it is saved, these samples "
                "are not. Free space or pass an --output_path that can be written."
            )
        return out

    return save_results_samples
