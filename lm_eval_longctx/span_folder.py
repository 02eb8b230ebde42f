"""Writing a key-span folder so that it is all there or not there at all (no lm-eval, no torch).

A folder is built in a fresh temporary sibling (``.<name>.partial-<random>``) and renamed into place
only when every document is done, so a run that is killed or fails leaves the previous folder (or
nothing) at the output path, never a mix of old and new files. An existing non-empty output folder
is replaced only when asked (``overwrite``) and only when it is a key-span folder this project wrote
(our manifest, nothing but ``slice_{i}.txt`` files beside it): a user's other folder is never deleted.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import keyspans

_SLICE = re.compile(r"slice_\d+\.txt")


class OutputFolderError(ValueError):
    """An output folder this run may not write to or replace."""


def _foreign_entries(folder: Path) -> list[str]:
    """Entries of ``folder`` that a key-span folder of ours would not hold."""
    return sorted(p.name for p in folder.iterdir()
                  if not (p.is_file() and not p.is_symlink() and (_SLICE.fullmatch(p.name) or p.name == keyspans.MANIFEST)))


def _is_our_span_folder(folder: Path) -> tuple[bool, str]:
    manifest = folder / keyspans.MANIFEST
    try:
        fmt = json.loads(manifest.read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        return False, f"it has no readable {keyspans.MANIFEST}"
    if fmt != keyspans.MANIFEST_FORMAT:
        return False, f"its {keyspans.MANIFEST} has format {fmt!r}, not {keyspans.MANIFEST_FORMAT!r}"
    foreign = _foreign_entries(folder)
    if foreign:
        return False, f"it also holds {foreign[:5]}{'...' if len(foreign) > 5 else ''}"
    return True, ""


def check_output_folder(out: str | Path, overwrite: bool) -> None:
    """Refuse, before any work, an output path this run may not fill.

    Allowed: a path that does not exist, an empty folder, or with ``overwrite`` a previous key-span
    folder of ours (which is replaced only once the new one is complete)."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputFolderError(f"{out} exists and is not a folder; choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise OutputFolderError(f"{out} is not empty; choose a new --out, or pass --overwrite to replace a key-span "
                                "folder written by this script (it is replaced only when the new one is complete)")
    ours, why = _is_our_span_folder(out)
    if not ours:
        raise OutputFolderError(f"--overwrite replaces only a key-span folder written by this script, and {out} is "
                                f"not one ({why}); nothing was changed. Choose another --out or move it away yourself.")


def new_partial_folder(out: str | Path) -> Path:
    """A fresh, uniquely named temporary folder beside ``out`` (same file system, so it can be renamed)."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(partial, 0o777 & ~umask)  # mkdtemp makes it private; the published folder gets the usual mode
    return partial


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def slice_checksums(folder: str | Path, n_docs: int) -> dict[str, str]:
    """{"slice_0.txt": sha256 hex of its bytes, ...} for documents 0..n_docs-1 (each must exist)."""
    folder = Path(folder)
    missing = [i for i in range(n_docs) if not (folder / f"slice_{i}.txt").is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} lacks span files for documents {missing[:10]}"
                                f"{'...' if len(missing) > 10 else ''}: a rank did not finish its share")
    return {f"slice_{i}.txt": file_sha256(folder / f"slice_{i}.txt") for i in range(n_docs)}


def write_json_atomically(path: str | Path, obj: dict) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, f"could not swap {a} and {b}: {os.strerror(err)}")


def publish(partial: str | Path, out: str | Path, overwrite: bool) -> None:
    """Put the complete folder ``partial`` at ``out``.

    A missing or empty ``out`` is replaced by one rename. A previous key-span folder (checked again
    now: it may have changed during the run) is swapped with the new one in one atomic step and then
    removed; where the file system cannot swap, it is renamed aside first, so a crash between the two
    renames leaves both complete folders beside ``out`` and never a mix."""
    partial, out = Path(partial), Path(out).absolute()
    if out.is_dir() and not any(out.iterdir()):
        os.replace(partial, out)  # POSIX rename replaces an empty folder
        return
    if not out.exists():
        os.rename(partial, out)
        return
    check_output_folder(out, overwrite)
    if _exchange(partial, out):
        shutil.rmtree(partial)  # now the previous span folder
        return
    aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.replace(out, aside)  # aside is empty: the rename replaces it
    os.rename(partial, out)
    shutil.rmtree(aside)
