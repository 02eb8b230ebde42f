"""The report card's key-token viewer: each ``--export`` folder's viewer page (:func:`..viewer.build_page`) in a
sandboxed ``<iframe srcdoc>``."""

from __future__ import annotations

import html
import tempfile
from pathlib import Path

from ..results import UnusableInput, flatten
from ..text import esc
from .card_runs import CardRun


def export_owner(runs: list[CardRun], export: Path) -> CardRun | None:
    """The run whose settings record this folder as its ``export_tokens``."""
    targets = {export.resolve(), export.resolve().parent}
    for r in runs:
        for settings in r.run.settings.values():
            for key, value in flatten(settings or {}).items():
                if key.split(".")[-1] == "export_tokens" and isinstance(value, str) and value:
                    if Path(value).expanduser().resolve() in targets:
                        return r
    return None


def export_files_of(exports) -> list[Path]:
    """The files of the export folders (what the page must not be written over)."""
    out: list[Path] = []
    for export in map(Path, exports):
        if export.is_dir():
            out += [p for p in export.rglob("*") if p.is_file()]
    return out


def viewer_section(runs: list[CardRun], exports) -> str:
    """The key-token viewer of each export in an ``<iframe srcdoc>`` (sandboxed: scripts only, no access to this
    page), its HTML attribute-escaped."""
    from ...data.export_files import ExportFormatError
    from ..viewer import ViewerError, build_page

    frames = []
    for export in exports:
        path = Path(export)
        owner = export_owner(runs, path)
        title = f"Key tokens of {owner.label}" if owner else f"Key tokens of the export {path}"
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "viewer.html"
            try:
                info = build_page([path], page, title=title)
            except (ViewerError, ExportFormatError, FileNotFoundError) as e:
                raise UnusableInput(
                    f"--export {path}: {e}; give a folder that export_tokens wrote (with a key-token export in it), "
                    "or leave --export out"
                ) from e
            except OSError as e:
                raise UnusableInput(f"--export {path}: cannot read the export: {e.strerror or e}") from e
            text = page.read_text(encoding="utf-8")
        frames.append(
            f'<h3>{esc(title)}</h3><p class="muted">{info["n_docs"]} documents, {sum(info["n_tokens"])} tokens, '
            f"{sum(info['n_key'])} key tokens: pick a document on the left, hover a token for its numbers.</p>"
            f'<div class="scroll"><iframe class="viewer" sandbox="allow-scripts" title="{esc(title)}" '
            f'srcdoc="{html.escape(text, quote=True)}"></iframe></div>'
        )
    return (
        '<section class="card" id="viewer"><h2>Key tokens</h2><p class="lead">Every token shaded by the '
        "evaluator's LSD, key tokens outlined (the page of <code>lm-eval-longctx view</code>).</p>"
        + "".join(frames)
        + "</section>"
    )
