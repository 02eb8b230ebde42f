"""What the report commands write: never one of the files they read, and each output once.

Checked before anything is written: an output path that is an input (the same path, or another name of the same
file: a link) is refused, naming both, so that ``gate --summary RUN.json`` or ``correlate --out bench.csv`` cannot
replace what they read.
"""

from __future__ import annotations

import os
from pathlib import Path

from .results import UnusableInput


def _identity(path: Path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def check_outputs(outputs, inputs) -> None:
    """``outputs``: (option, path or None) pairs; ``inputs``: every file the command reads. Refuse an output that
    is an input, or that another option also writes."""
    given = [(flag, Path(path)) for flag, path in outputs if path]
    by_path = {Path(os.path.abspath(p)): p for p in map(Path, inputs)}
    by_identity = {ident: p for p in map(Path, inputs) if (ident := _identity(p)) is not None}
    seen: dict[Path, str] = {}
    for flag, out in given:
        where = Path(os.path.abspath(out))
        same = by_path.get(where) or by_identity.get(_identity(out) or ("", ""))
        if same is not None:
            raise UnusableInput(
                f"{flag} {out}: that file is an input of this command ({same}); nothing was written. Give {flag} "
                "another file"
            )
        resolved = where.resolve()
        if resolved in seen:
            raise UnusableInput(f"{flag} {out}: the same file as {seen[resolved]}; give each output its own file")
        seen[resolved] = flag
