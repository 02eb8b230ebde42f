"""Per-token export: what a task saw, token by token, one ``.npz`` file per document (opt-in). The files themselves
(manifest, writing, reading) are ``data/export_files.py``; each task class declares its arrays (``EXPORT_COLUMNS``,
what each means), the view that shows them (``EXPORT_VIEW``) and builds them per document.

``--metadata '{"export_tokens": "DIR"}'`` makes every task with an export write ``DIR/<task>/doc_<doc_id>.npz`` as
each document's results are processed, beside ``DIR/<task>/manifest.json`` (format tag, task, the task's settings
record with the data's hashes, the columns and the view). Nothing is accumulated across documents: memory is one
document's arrays, which the task already holds. The files are plain numpy archives (no pickles):
``numpy.load(path)`` reads them without this package (see docs/tools/token-export-and-viewer.md).

The export never changes a number: the task records only its folder (``export_tokens`` in the settings record). It
never writes into a folder it did not create: a task folder that exists and is not empty is refused (under data
parallelism the ranks of one launch share the folder they created).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from ..data import export_files
from ..data.export_files import SETTING


def for_task(task) -> export_files.TokenExport | None:
    """The export of a task whose settings name an ``export_tokens`` folder, else None."""
    if not enabled(task):
        return None
    return export_files.TokenExport(task.settings[SETTING], task.config.task, task.EXPORT_COLUMNS, task.EXPORT_VIEW)


def enabled(task) -> bool:
    """Whether the task has a per-token export and its settings name a folder for it."""
    return bool(task.settings.get(SETTING)) and task.EXPORT_COLUMNS is not None


def text_fields(text: str) -> dict:
    """The document's text and its SHA-256, as export arrays."""
    return {"text": np.asarray(text), "text_sha256": np.asarray(hashlib.sha256(text.encode("utf-8")).hexdigest())}


def targets_to_tokens(target_values: np.ndarray, fill) -> np.ndarray:
    """Per-target values [n - 1] (index t - 1 is token t) as per-token values [n], token 0 = ``fill``."""
    v = np.asarray(target_values)
    return np.concatenate([np.full(1, fill, dtype=v.dtype), v])


def write_document(task, doc: dict, arrays: Callable[[], dict]) -> None:
    """Called from a task's process_results (one document at a time): writes ``arrays()`` when its export is on."""
    export = getattr(task, "_token_export", None)
    if export is None:
        return
    export.write(doc["doc_id"], arrays(), (task.config.metadata or {}).get("longctx_settings") or {})
