"""Output folders the commands may write into, so that nothing a user keeps is lost (no lm-eval import).

A command writes only into a folder that does not exist yet, is empty, or carries the marker file
that this package leaves in the folders it creates. A non-empty folder without the marker belongs to
someone else: the command refuses it, and changes nothing there. No command deletes a folder.
"""

from __future__ import annotations

import json
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
