"""The per-token export's files: format tag, manifest, one ``.npz`` per document; writing (atomic, into a folder
the export created) and reading (plain arrays, no pickles). numpy and json only: the tasks write through this
module and the viewer reads through it (what the arrays of each task mean: ``tasks/token_export.py`` and
docs/tools/token-export-and-viewer.md)."""

from __future__ import annotations

import datetime
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

FORMAT = "lm_eval_longctx/token-export/1"
MANIFEST = "manifest.json"
SETTING = "export_tokens"
DOC_GLOB = "doc_*.npz"

COLUMNS = {
    "longppl_govreport": {
        "token_id": "evaluated-model token ids [n] (text tokenized without special tokens)",
        "char_start": "character offset where token i starts in `text` [n]",
        "char_end": "character offset where token i ends in `text` [n]",
        "logprob": "evaluated model: log p(token i | tokens < i), long context [n]; NaN for token 0",
        "nll": "evaluated model: -logprob [n]",
        "greedy": "evaluated model: argmax of the prediction of token i == token i [n]; False for token 0",
        "key": "token i is a key token (counted in LongPPL) [n]",
        "lsd": "evaluator LSD of the evaluator token holding token i's last character [n]; NaN: none",
        "lcl": "evaluator long-context log-prob (LCL) of that evaluator token [n]; NaN: none or not available",
        "soft_weight": "LongPPL-soft weight of token i [n] (only with soft_gamma); 1 where no LSD",
        "evaluator_token_id": "evaluator token ids [m] (with its special tokens), when available",
        "evaluator_char_start": "evaluator token j's start in `text` [m]",
        "evaluator_char_end": "evaluator token j's end in `text` [m]",
        "evaluator_logprob_long": "evaluator: log p(token j | all before), LCL [m]; NaN for j = 0; when available",
        "evaluator_logprob_short": "evaluator: log p(token j | truncated window) [m]; NaN before K; when available",
        "evaluator_lsd": "evaluator: LSD = long - short log-prob [m]; NaN where no truncated context",
        "evaluator_key": "evaluator token j is key (LSD > alpha and LCL > beta) [m]",
        "doc_id, text, text_sha256": "the document",
        "nll_sum, n_targets, key_nll_sum, n_key": "the task's per-document (NLL sum, count) pairs of ppl and longppl",
    },
    "retrieval_gain": {
        "anchors": "anchor token positions in the document [q]",
        "with_logprob": "answer tokens' log-probs read after the document [q, r]",
        "without_logprob": "answer tokens' log-probs without the document [q, r]",
        "gain, nll_with, nll_without": "per anchor [q] (gain = nll_without - nll_with)",
        "n_doc_tokens, n_source_tokens, doc_id, text, text_sha256": "the document",
    },
    "longeval_lines_ppl": {
        "char_start": "response token's start, relative to the response's first character [m]",
        "char_end": "response token's end, relative to the response's first character [m]",
        "logprob": "log p(response token | prompt and earlier response tokens) [m]",
        "nll": "-logprob [m]",
        "answer": "the token overlaps the number's digits (answer_ppl) [m]; others with width > 0: non_answer_ppl",
        "doc_id, num_lines, response, answer_start, answer_end, prompt_tokens, n_tokens, skipped": "the case",
    },
}


class ExportFolderError(ValueError):
    """An ``export_tokens`` folder this run may not write into."""


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

    def __init__(self, root: str | Path, task: str):
        self.folder = Path(root) / task
        self.task = task
        check_folder(self.folder)
        self._opened = False

    def _open(self, settings_record: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = {
            "format": FORMAT,
            "task": self.task,
            "settings": settings_record,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "launch": _launch_id(),
            "columns": COLUMNS.get(self.task, {}),
        }
        try:
            fd = os.open(self.folder / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            check_folder(self.folder)  # a sibling rank of this launch wrote it; anything else is refused
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(manifest, f, indent=2, default=str)
                f.write("\n")
        self._opened = True

    def write(self, doc_id: int, arrays: dict, settings_record: dict) -> Path:
        """Write ``doc_<doc_id>.npz`` (atomically: a partial file never carries the final name)."""
        if not self._opened:
            self._open(settings_record)
        path = self.folder / f"doc_{int(doc_id):05d}.npz"
        tmp = self.folder / f".doc_{int(doc_id):05d}.{os.getpid()}.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
        return path


# --------------------------------------------------------------------------- reading


def task_folder(path: str | Path, task: str = "longppl_govreport") -> Path:
    """The task folder of an export: ``path`` itself when it holds a manifest, else ``path/<task>``."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if (path / task / MANIFEST).is_file():
        return path / task
    raise FileNotFoundError(f"{path} is not a token export (no {MANIFEST} in it or in {path / task})")


class ExportFormatError(ValueError):
    """A file of an export that is not what the format says (unreadable, wrong type, missing or misshapen array)."""


def read_manifest(folder: str | Path) -> dict:
    path = Path(folder) / MANIFEST
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
    a readable ``.npz`` is an :class:`ExportFormatError` naming it."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: (z[k].item() if z[k].ndim == 0 else z[k]) for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        # ValueError: an object array (a pickle) or a malformed member; BadZipFile/EOFError: a truncated file
        raise ExportFormatError(f"{path}: not a readable export document ({type(err).__name__}: {err})") from None


# the arrays of a longppl_govreport document the viewer reads: name -> kind ("int", "float", "bool") over n tokens
LONGPPL_TOKEN_ARRAYS = {
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


def check_longppl_document(d: dict, path: str | Path) -> None:
    """A longppl_govreport document as the format says: ``doc_id`` an integer, ``text`` and ``text_sha256``
    strings, every token array one-dimensional of the same length and kind, character offsets inside the text
    with start <= end. Raises :class:`ExportFormatError` naming the file and the array."""
    if not isinstance(d.get("doc_id"), int) or isinstance(d.get("doc_id"), bool):
        raise ExportFormatError(f"{path}: 'doc_id' is {_what(d.get('doc_id'))}, expected an integer")
    for key in ("text", "text_sha256"):
        if not isinstance(d.get(key), str):
            raise ExportFormatError(f"{path}: {key!r} is {_what(d.get(key))}, expected a string")
    n = None
    for name, kind in LONGPPL_TOKEN_ARRAYS.items():
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


def iter_documents(folder: str | Path) -> Iterator[dict]:
    for p in document_files(folder):
        yield load_document(p)
