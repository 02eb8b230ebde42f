"""Files written whole or not at all (``output_dirs.atomic_file``), and cache files read without waiting on a FIFO."""

from __future__ import annotations

import errno
import os
import stat
import threading

import pytest

from lm_eval_longctx import output_dirs
from tests.tiny import writes_cut_at

BIG = "x" * 10_000


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_that_does_not_fit_leaves_the_old_file(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    with pytest.raises(OSError) as caught, writes_cut_at(1000):
        output_dirs.write_atomically(path, BIG)
    assert path.read_text() == "old" and not _leftovers(tmp_path)
    assert caught.value.filename == str(path)  # the file asked for, not the temporary one
    assert output_dirs.cannot_write(path, caught.value) == f"cannot write {path}: file too large"


def test_a_new_file_that_does_not_fit_is_not_there(tmp_path):
    with pytest.raises(OSError), writes_cut_at(1000):
        output_dirs.write_atomically(tmp_path / "new" / "out.bin", BIG.encode())
    assert not (tmp_path / "new" / "out.bin").exists() and not _leftovers(tmp_path / "new")


def test_a_failure_inside_the_block_leaves_the_old_file(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("old")
    with pytest.raises(ValueError), output_dirs.atomic_file(path) as f:
        f.write("half a page")
        raise ValueError("the writer failed")
    assert path.read_text() == "old" and not _leftovers(tmp_path)


def test_a_read_only_or_full_file_system_is_named_with_its_cause(tmp_path, monkeypatch):
    def refused(source, destination):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), source, None, destination)

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError) as caught:
        output_dirs.write_atomically(tmp_path / "a.txt", "text")
    assert caught.value.errno == errno.EROFS and caught.value.filename == str(tmp_path / "a.txt")
    assert output_dirs.cannot_write(tmp_path / "a.txt", caught.value).endswith(": read-only file system")
    assert not list(tmp_path.iterdir())


def test_the_new_file_keeps_the_old_ones_mode_and_a_link_stays_a_link(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    output_dirs.write_atomically(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_exclusive_creates_only(tmp_path):
    path = tmp_path / "manifest.json"
    output_dirs.write_atomically(path, "first")
    with pytest.raises(FileExistsError), output_dirs.atomic_file(path, exclusive=True) as f:
        f.write("second")
    assert path.read_text() == "first" and not _leftovers(tmp_path)


def _within(seconds: float, fn, fifo) -> None:
    """Run ``fn()``; fail when it has not returned after ``seconds`` (it waits on the FIFO), opening the FIFO's other
    end first so that the waiting thread ends."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
            try:
                os.close(os.open(fifo, flags))
            except OSError:
                pass
        pytest.fail(f"waited on the FIFO {fifo}")


def test_a_fifo_is_written_in_place_or_replaced(tmp_path):
    """A FIFO (or /dev/stdout) named as an output is written into; a cache entry never waits on one."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list = []

    def read():
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _within(10, lambda: output_dirs.write_atomically(fifo, "to the reader"), fifo)
    reader.join(10)
    assert got == [b"to the reader"] and fifo.is_fifo()
    _within(10, lambda: output_dirs.write_atomically(fifo, b"entry", special_in_place=False), fifo)  # no reader
    assert fifo.read_bytes() == b"entry"


def test_read_regular_file_never_waits(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_bytes(b"data")
    assert output_dirs.read_regular_file(tmp_path / "fifo") is None
    assert output_dirs.read_regular_file(tmp_path / "folder") is None
    assert output_dirs.read_regular_file(tmp_path / "missing") is None
    assert output_dirs.read_regular_file(tmp_path / "file" / "below") is None
    assert output_dirs.read_regular_file(tmp_path / "file") == b"data"
