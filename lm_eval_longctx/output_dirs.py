"""Output folders the commands may write into, so that nothing a user keeps is lost (no lm-eval import).

A command writes only into a folder that does not exist yet, is empty, or carries the marker file
that this package leaves in the folders it creates. A non-empty folder without the marker belongs to
someone else: the command refuses it, and changes nothing there. No command deletes a folder it did not
write. Two processes writing one output at once: the second fails (:func:`locked`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

MARKER = ".lm_eval_longctx_output"


class ForeignFolderError(FileExistsError):
    """A non-empty folder this package did not create."""


def claim(path: str | Path, purpose: str) -> Path:
    """Create ``path`` (or take it over when empty) and mark it as ours; reuse it when it carries our
    marker; refuse a non-empty folder without it, naming it and the way out."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ForeignFolderError(f"{path} is a file, not a folder: choose another output folder for {purpose}")
    if path.is_dir() and not (path / MARKER).is_file() and any(path.iterdir()):
        raise ForeignFolderError(
            f"{path} is not empty and was not created by lm-eval-longctx: {purpose} will not write into it "
            "(nothing there was changed). Choose a new or empty folder."
        )
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).is_file():
        (path / MARKER).write_text(
            json.dumps({"created_by": "lm_eval_longctx", "purpose": purpose}) + "\n", encoding="utf-8"
        )
    return path


def is_ours(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


class OutputBusyError(FileExistsError):
    """Another process is writing the same output now."""


def lock_path(path: str | Path) -> Path:
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def locked(path: str | Path, purpose: str):
    """Hold the lock of the output ``path`` while writing it: a second writer of the same path fails at once, naming
    it, instead of replacing the first one's output. The lock is a file beside ``path`` (``.<name>.lock``) under an
    exclusive ``flock``, which the system releases when its process ends however it ends; the file is removed on
    release."""
    import fcntl  # POSIX; imported here so that the module stays importable everywhere

    path = Path(path)
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(
                f"{path}: another {purpose} is writing it now (lock file {lock}); nothing was written. Wait for it "
                "to finish, or choose another output folder"
            ) from None
        try:  # the holder before may have removed the file between our open and our lock: lock the one in place
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield lock
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)
