"""harness/saving.py: what lm-eval's saves do when a file system fails under them: the results and samples leave
the old file or nothing and fail in one line naming the file and the cause; a picture that cannot be drawn beside the
results is one warning."""

from __future__ import annotations

import copy
import errno
import logging
import os
import pathlib

import pytest

from lm_eval_longctx.harness import contacts, saving

# lm-eval's own results tracker (and its import): left out of the fast subset, as its other save tests are
pytestmark = pytest.mark.integration
SAMPLE = {"arguments": [["a prompt"]], "resps": [["x"]], "filtered_resps": ["x"], "target": 0, "doc": {"t": "y" * 300}}

NO_SPACE = os.strerror(errno.ENOSPC).lower()


def _tracker(folder: pathlib.Path):
    from lm_eval.loggers import EvaluationTracker

    contacts.install()
    tracker = EvaluationTracker(output_path=str(folder / "results.json"))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    return tracker


def _samples(n: int = 3) -> list[dict]:
    return [copy.deepcopy(SAMPLE) for _ in range(n)]


class _FillingFile:
    """A file on a file system with ``room`` bytes left: what does not fit raises ENOSPC, what did stays."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data):
        self.f.write(data[: self.room])
        self.f.flush()
        self.room -= min(self.room, len(data))
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _disk_fills_at(monkeypatch, room: int) -> None:
    """lm-eval's samples file (opened for appending) meets a full file system after ``room`` bytes."""
    from lm_eval.loggers import evaluation_tracker

    def filling_open(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return _FillingFile(f, room) if "a" in mode else f

    monkeypatch.setattr(evaluation_tracker, "open", filling_open, raising=False)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text
    return text


def test_a_results_file_cut_short_by_a_full_disk_is_not_left_and_the_cause_is_named(tmp_path, monkeypatch):
    write_text = pathlib.Path.write_text

    def filling_write_text(self, data, *args, **kwargs):
        if not self.name.startswith("results_"):
            return write_text(self, data, *args, **kwargs)
        write_text(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_text", filling_write_text)
    tracker = _tracker(tmp_path)
    with pytest.raises(saving.ResultsNotSavedError) as caught:
        tracker.save_results_aggregated(results={"results": {"t": {"x": 1.0}}}, samples=None)
    message = _one_line(caught.value)
    assert "results_" in message and NO_SPACE in message and "nothing was saved" in message
    assert not list(tmp_path.glob("results_*.json"))


@pytest.mark.parametrize("room", [0, 200])
def test_samples_that_do_not_fit_leave_no_part_and_name_the_cause(tmp_path, monkeypatch, room):
    """The reported run: its results JSON saved, then a 0-byte (or cut) samples file and exit 2."""
    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {"t": {"x": 1.0}}}, samples=None)
    [results_file] = tmp_path.glob("results_*.json")
    _disk_fills_at(monkeypatch, room)
    with pytest.raises(saving.ResultsNotSavedError) as caught:
        tracker.save_results_samples(task_name="t", samples=_samples())
    message = _one_line(caught.value)
    assert f"samples_t_{tracker.date_id}.jsonl" in message and NO_SPACE in message
    assert not list(tmp_path.glob("samples_*.jsonl"))
    assert saving._whole_results_file(results_file)  # what was saved whole stays


def test_samples_appended_to_a_file_put_the_file_back(tmp_path, monkeypatch):
    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {}}, samples=None)
    tracker.save_results_samples(task_name="t", samples=_samples(2))
    [samples_file] = tmp_path.glob("samples_*.jsonl")
    before = samples_file.read_bytes()
    _disk_fills_at(monkeypatch, 150)
    with pytest.raises(saving.ResultsNotSavedError, match=NO_SPACE):
        tracker.save_results_samples(task_name="t", samples=_samples(2))
    assert samples_file.read_bytes() == before


def test_samples_on_a_read_only_file_system_name_it(tmp_path, monkeypatch):
    from lm_eval.loggers import evaluation_tracker

    tracker = _tracker(tmp_path)
    tracker.save_results_aggregated(results={"results": {}}, samples=None)

    def refused_open(path, mode="r", *args, **kwargs):
        if "a" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(evaluation_tracker, "open", refused_open, raising=False)
    with pytest.raises(saving.ResultsNotSavedError) as caught:
        tracker.save_results_samples(task_name="t", samples=_samples())
    assert "read-only file system" in _one_line(caught.value)
    assert not list(tmp_path.glob("samples_*.jsonl"))


def test_a_picture_that_cannot_be_written_is_one_warning_line(tmp_path, monkeypatch, caplog):
    def full_disk_picture(results, results_file):
        png = pathlib.Path(results_file).with_suffix(".png")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(png))

    monkeypatch.setitem(saving.RESULTS_SAVED_CALLBACKS, "a_picture", full_disk_picture)
    tracker = _tracker(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        tracker.save_results_aggregated(results={"results": {}}, samples=None)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "lm_eval_longctx"]
    assert "\n" not in warning and "a_picture" in warning and "the results are saved" in warning
    assert f".png: {NO_SPACE}" in warning
