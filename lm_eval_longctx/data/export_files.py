"""The per-token export's files: format tag, manifest, one ``.npz`` per document; writing (atomic, into a folder
the export created) and reading (plain arrays, no pickles). numpy and json only: the tasks write through this
module and the viewer reads through it (what the arrays of each task mean: ``tasks/token_export.py`` and
docs/tools/token-export-and-viewer.md)."""

from __future__ import annotations

import datetime
import json
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .. import output_dirs

FORMAT = "lm_eval_longctx/token-export/1"
MANIFEST = "manifest.json"
SETTING = "export_tokens"
DOC_GLOB = "doc_*.npz"


class ExportFolderError(ValueError):
    """An ``export_tokens`` folder this run may not write into."""


class ExportWriteError(OSError):
    """A file of the export could not be written (a full or read-only file system): nothing of it is left."""


# --------------------------------------------------------------------------- settings


def parse_setting(value) -> str | None:
    """The ``export_tokens`` setting: a folder path, or None (off)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"export_tokens must be a folder path, got {value!r}")
    return str(Path(value).expanduser().resolve())


def _launch_id() -> str | None:
    """What the ranks of one data-parallel launch share (None outside data parallelism)."""
    world = os.environ.get("WORLD_SIZE", "1") or "1"
    if int(world) <= 1:
        return None
    parts = [os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")]
    if os.environ.get("LOCAL_WORLD_SIZE", world) == world:
        # one node: the ranks are children of one launcher process, which a later launch is not
        parts.append(str(os.getppid()))
    return "|".join(parts)


def check_folder(folder: Path) -> None:
    """Refuse a folder that exists and holds anything, unless a sibling rank of this launch made it."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ExportFolderError(f"export_tokens: {folder} exists and is not a folder")
    if not any(folder.iterdir()):
        return
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            m = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            m = {}
        launch = _launch_id()
        if m.get("format") == FORMAT and launch is not None and m.get("launch") == launch:
            return
        if m.get("format") == FORMAT:
            raise ExportFolderError(
                f"export_tokens: {folder} already holds a token export (created {m.get('created')}); it is not "
                "overwritten. Pass another export_tokens folder, or remove that one yourself."
            )
    raise ExportFolderError(
        f"export_tokens: {folder} is not empty and was not created by a token export; nothing is written into "
        "it. Pass a new or empty folder as export_tokens."
    )


# --------------------------------------------------------------------------- writing


class TokenExport:
    """Writes one task's per-document files into ``root/<task>/``; the folder is checked when this is
    built (before any model runs) and created at the first document."""

    def __init__(self, root: str | Path, task: str, columns: dict | None = None, view: str | None = None):
        self.folder = Path(root) / task
        self.task = task
        # what each array means (the task declares it), and which view can show the files (e.g. "key_tokens")
        self.columns = dict(columns or {})
        self.view = view
        check_folder(self.folder)
        self._opened = False

    def _open(self, settings_record: dict) -> None:
        manifest = {
            "format": FORMAT,
            "task": self.task,
            "settings": settings_record,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "launch": _launch_id(),
            "columns": self.columns,
            "view": self.view,
        }
        try:
            with output_dirs.atomic_file(self.folder / MANIFEST, "w", exclusive=True) as f:
                json.dump(manifest, f, indent=2, default=str)
                f.write("\n")
        except FileExistsError:
            check_folder(self.folder)  # a sibling rank of this launch wrote it; anything else is refused
        except OSError as err:
            raise ExportWriteError(f"export_tokens: {output_dirs.cannot_write(self.folder / MANIFEST, err)}") from err
        self._opened = True

    def write(self, doc_id: int, arrays: dict, settings_record: dict) -> Path:
        """Write ``doc_<doc_id>.npz`` (atomically: a partial file never carries the final name)."""
        if not self._opened:
            self._open(settings_record)
        path = self.folder / f"doc_{int(doc_id):05d}.npz"
        try:
            with output_dirs.atomic_file(path, "wb") as f:
                np.savez_compressed(f, **arrays)
        except OSError as err:
            raise ExportWriteError(f"export_tokens: {output_dirs.cannot_write(path, err)}") from err
        return path


# --------------------------------------------------------------------------- reading


def task_folder(path: str | Path, task: str) -> Path:
    """The task folder of an export: ``path`` itself when it holds a manifest, else ``path/<task>``."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if (path / task / MANIFEST).is_file():
        return path / task
    raise FileNotFoundError(f"{path} is not a token export (no {MANIFEST} in it or in {path / task})")


def export_folders(path: str | Path) -> list[Path]:
    """The task folders of an export: ``path`` itself when it holds a manifest, else its subfolders that do."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such folder")
    return sorted(p for p in path.iterdir() if p.is_dir() and (p / MANIFEST).is_file())


class ExportFormatError(ValueError):
    """A file of an export that is not what the format says (unreadable, wrong type, missing or misshapen array)."""


# Reading limits, checked before anything is allocated: a manifest is small; a document's arrays unpacked are
# at most EXPANSION_LIMIT times its file (numbers compress little) or MIN_ALLOWANCE, whichever is larger.
MANIFEST_MAX_BYTES = 16 * 2**20
MIN_ALLOWANCE = 64 * 2**20
EXPANSION_LIMIT = 64


def _regular_file(path: Path) -> int:
    """The size of ``path``; a FIFO, device or folder is refused before it is opened (a FIFO would block)."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise ExportFormatError(f"{path}: cannot read it ({err.strerror or err})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ExportFormatError(f"{path}: not a regular file (a FIFO, device or folder); an export holds files only")
    return st.st_size


def read_manifest(folder: str | Path) -> dict:
    path = Path(folder) / MANIFEST
    size = _regular_file(path)
    if size > MANIFEST_MAX_BYTES:
        raise ExportFormatError(
            f"{path}: {size} bytes, more than the {MANIFEST_MAX_BYTES} a manifest may have; not the {MANIFEST} an "
            "export writes"
        )
    try:
        m = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ExportFormatError(
            f"{path}: not a readable JSON manifest ({err}); expected the {MANIFEST} an export writes"
        ) from None
    if not isinstance(m, dict):
        raise ExportFormatError(
            f"{path}: a JSON {type(m).__name__}, expected an object (the {MANIFEST} an export writes)"
        )
    if m.get("format") != FORMAT:
        raise ExportFormatError(f"{path}: format {m.get('format')!r}, expected {FORMAT!r}")
    if not isinstance(m.get("settings", {}), dict):
        raise ExportFormatError(f"{path}: 'settings' is a {type(m['settings']).__name__}, expected an object")
    return m


def document_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob(DOC_GLOB))


def load_document(path: str | Path) -> dict:
    """One document's arrays (0-d arrays become Python scalars / str). No pickles are loaded; a file that is not
    a readable ``.npz`` is an :class:`ExportFormatError` naming it. Every member's ``.npy`` header and declared size
    are read and checked (:func:`check_members`) before any array is allocated."""
    path = Path(path)
    size = _regular_file(path)
    try:
        with zipfile.ZipFile(path) as zf:
            check_members(path, zf, size)
        with np.load(path, allow_pickle=False) as z:
            return {k: (z[k].item() if z[k].ndim == 0 else z[k]) for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        if isinstance(err, ExportFormatError):
            raise
        # ValueError: an object array (a pickle) or a malformed member; BadZipFile/EOFError: a truncated file
        raise ExportFormatError(f"{path}: not a readable export document ({type(err).__name__}: {err})") from None


def check_members(path: Path, zf: zipfile.ZipFile, file_size: int) -> None:
    """Refuse a document whose members unpack to more than the limit derived from its file's size, or whose
    ``.npy`` header declares another size than the member holds (a header of 10^13 values in a small member), an
    object array (a pickle) or another format; only the headers are decompressed."""
    infos = zf.infolist()
    limit = max(MIN_ALLOWANCE, EXPANSION_LIMIT * file_size)
    declared = sum(i.file_size for i in infos)
    if declared > limit:
        raise ExportFormatError(
            f"{path}: its arrays declare {declared} bytes unpacked, more than the {limit} a {file_size}-byte document "
            f"may hold ({EXPANSION_LIMIT} times its size); not a document an export writes: not read"
        )
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise ExportFormatError(f"{path}: member {name!r} is not an array (.npy); not a document an export writes")
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ExportFormatError(f"{path}: array {name!r} has .npy format {version}; expected 1.0 or 2.0")
            header = f.tell()
        if dtype.hasobject:
            raise ExportFormatError(f"{path}: array {name!r} holds Python objects (a pickle); not read")
        n_bytes = math.prod(int(d) for d in shape) * dtype.itemsize
        if header + n_bytes != info.file_size:
            raise ExportFormatError(
                f"{path}: array {name!r} declares shape {tuple(shape)} of {dtype} ({n_bytes} bytes), but the member "
                f"holds {info.file_size - header} bytes: a damaged or forged document, not read"
            )


# the arrays of a document of the key-token view (manifest "view": "key_tokens") the viewer reads: name -> kind
# ("int", "float", "bool") over n tokens
KEY_TOKEN_VIEW = "key_tokens"
KEY_TOKEN_ARRAYS = {
    "token_id": "int",
    "char_start": "int",
    "char_end": "int",
    "logprob": "float",
    "nll": "float",
    "lsd": "float",
    "lcl": "float",
    "key": "bool",
    "greedy": "bool",
}
_KINDS = {"int": "iu", "float": "f", "bool": "b"}


def check_token_document(d: dict, path: str | Path, arrays: dict[str, str] = KEY_TOKEN_ARRAYS) -> None:
    """A document as its view reads it: ``doc_id`` an integer, ``text`` and ``text_sha256``
    strings, every token array one-dimensional of the same length and kind, character offsets inside the text
    with start <= end. Raises :class:`ExportFormatError` naming the file and the array."""
    if not isinstance(d.get("doc_id"), int) or isinstance(d.get("doc_id"), bool):
        raise ExportFormatError(f"{path}: 'doc_id' is {_what(d.get('doc_id'))}, expected an integer")
    for key in ("text", "text_sha256"):
        if not isinstance(d.get(key), str):
            raise ExportFormatError(f"{path}: {key!r} is {_what(d.get(key))}, expected a string")
    n = None
    for name, kind in arrays.items():
        a = d.get(name)
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in _KINDS[kind]:
            raise ExportFormatError(f"{path}: array {name!r} is {_what(a)}, expected a one-dimensional {kind} array")
        if n is None:
            n = len(a)
        elif len(a) != n:
            raise ExportFormatError(
                f"{path}: array {name!r} has {len(a)} entries, 'token_id' has {n}: one entry per token is expected"
            )
    start, end, n_chars = d["char_start"], d["char_end"], len(d["text"])
    bad = np.flatnonzero((start < 0) | (end < start) | (end > n_chars))
    if len(bad):
        i = int(bad[0])
        raise ExportFormatError(
            f"{path}: token {i} has character offsets [{int(start[i])}, {int(end[i])}], outside the document's "
            f"{n_chars} characters or ending before they start"
        )


def _what(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-dimensional {x.dtype} array"
    return "missing" if x is None else f"a {type(x).__name__}"


def array_names(path: str | Path) -> list[str]:
    """The arrays a document holds, from its zip directory alone (nothing is decompressed)."""
    path = Path(path)
    _regular_file(path)
    try:
        with zipfile.ZipFile(path) as zf:
            return [n[: -len(".npy")] for n in zf.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile) as err:
        raise ExportFormatError(f"{path}: not a readable export document ({type(err).__name__}: {err})") from None


def iter_documents(folder: str | Path) -> Iterator[dict]:
    for p in document_files(folder):
        yield load_document(p)
