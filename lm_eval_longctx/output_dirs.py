"""Output folders the commands may write into, so that nothing a user keeps is lost (no lm-eval import).

A command writes only into a folder that does not exist yet, is empty, or carries the marker file
that this package leaves in the folders it creates. A non-empty folder without the marker belongs to
someone else: the command refuses it, and changes nothing there. No command deletes a folder it did not
write. Two processes writing one output at once: the second fails (:func:`locked`). Every file is written whole or
not at all (:func:`atomic_file`), and a cache file is read without blocking on a FIFO (:func:`read_regular_file`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
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
        write_atomically(path / MARKER, json.dumps({"created_by": "lm_eval_longctx", "purpose": purpose}) + "\n")
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


# ------------------------------------------------------------------ files written whole or not at all


def _written_path(path: Path) -> Path:
    """The file a write to ``path`` changes: the target of a symlink to a regular file, so that a link the user made
    stays a link; ``path`` itself otherwise (a link to anything else is replaced)."""
    with contextlib.suppress(OSError):
        if path.is_symlink() and Path(os.path.realpath(path)).is_file():
            return Path(os.path.realpath(path))
    return path


def _naming(err: OSError, path: Path, tmp: Path) -> OSError:
    """``err`` naming ``path`` where it names the temporary file or no file (a failed write), of the same class (errno
    picks it); an error naming another file (one the block read) is left as it is."""
    if err.errno is None or (err.filename is not None and str(err.filename) != str(tmp)):
        return err
    return OSError(err.errno, err.strerror, str(path))


@contextlib.contextmanager
def atomic_file(
    path: str | Path,
    mode: str = "w",
    encoding: str | None = "utf-8",
    newline: str | None = None,
    special_in_place: bool = True,
    exclusive: bool = False,
    create_folder: bool = True,
):
    """A file object to write ``path`` through: a new file beside it, which replaces ``path`` (``os.replace``) when
    the block ends and is removed when anything fails, so that ``path`` is then the old file or nothing, never a part
    (a full or read-only file system, an interrupted run). An OSError names ``path``. ``mode`` is ``"w"`` or ``"wb"``.

    * The folder is created when missing (``create_folder=False``: a missing folder is FileNotFoundError).
    * The file gets the mode of the one it replaces (a new one: 0o666 less the umask).
    * A FIFO or device at ``path`` (``/dev/stdout``) cannot be replaced: it is written in place, or, with
      ``special_in_place=False`` (a cache entry, which must never wait on a FIFO), replaced by the file.
    * ``exclusive``: ``path`` is only created, never replaced (FileExistsError when it is there: another process
      wrote it first).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole file: mode 'w' or 'wb', not {mode!r}")
    path = _written_path(Path(path))
    if mode == "wb":
        encoding = newline = None
    try:
        existing = path.stat()
    except OSError:
        existing = None
    regular = existing is not None and stat.S_ISREG(existing.st_mode)
    mode_before = stat.S_IMODE(existing.st_mode) if existing is not None and regular else None
    if exclusive and existing is not None:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    if special_in_place and existing is not None and not regular and not stat.S_ISDIR(existing.st_mode):
        with open(path, mode, encoding=encoding, newline=newline) as f:
            yield f
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        if create_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as err:
        raise _naming(err, path, tmp) from err
    try:
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
        if mode_before is not None:
            with contextlib.suppress(OSError):
                os.chmod(tmp, mode_before)
        if exclusive:
            _link_new(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _naming(err, path, tmp) from err
        raise


def _link_new(tmp: Path, path: Path) -> None:
    """Give the whole file ``tmp`` the name ``path`` only where nothing has it: a hard link fails where ``path``
    exists, which a rename would replace; on a file system without hard links, a rename after a last look."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(tmp, path)
    else:
        os.unlink(tmp)


def write_atomically(path: str | Path, content: str | bytes, **options) -> None:
    """Write ``content`` (text as UTF-8) into ``path`` whole or not at all (:func:`atomic_file`, with its
    ``options``)."""
    with atomic_file(path, "wb" if isinstance(content, bytes) else "w", **options) as f:
        f.write(content)


def cannot_write(path: str | Path, err: OSError) -> str:
    """``cannot write PATH: the cause`` in one line (e.g. ``no space left on device``), with the path the error
    names when it is another one (a folder on the way that is a file)."""
    cause = err.strerror or str(err) or type(err).__name__
    where = f" ({err.filename})" if err.filename is not None and str(err.filename) != str(path) else ""
    return f"cannot write {path}: {cause[:1].lower()}{cause[1:]}{where}"


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks (a model's weights need not fit in memory twice).

    Example:
        >>> import tempfile
        >>> from lm_eval_longctx.output_dirs import file_sha256
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     _ = f.write(b"abc"); f.flush()
        ...     file_sha256(f.name)[:16]
        'ba7816bf8f01cfea'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def read_regular_file(path: str | Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (symlinks followed); None when it is missing, a folder, a FIFO
    or a device, which is never waited on. Other failures to read raise OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()
