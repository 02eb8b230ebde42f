"""Text read from files (model names, metric names, settings), made safe for each output: Markdown table cells,
CSV cells and HTML. Control characters (a newline in a model name), bidirectional overrides (which make two
different names look alike) and invisible format characters are shown as escapes (``\\n``, ``\\u202e``), ``|``
is escaped in Markdown, and a cut text says so with an ellipsis."""

from __future__ import annotations

import html
import re

# C0 and C1 controls, DEL, and the invisible format characters: zero-width ones, the bidi marks, embeddings,
# overrides and isolates, the line and paragraph separators, the word joiner family and the byte-order mark
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
ELLIPSIS = "…"


def _escape_one(m: re.Match) -> str:
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def visible(text) -> str:
    """``text`` with every control, bidi or invisible format character written as its escape."""
    return _INVISIBLE.sub(_escape_one, str(text))


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in an ellipsis when something was cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def cut_middle(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters by an ellipsis in its middle: two paths that differ only at their
    ends stay told apart."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (limit - 1 - head) :]


def md_cell(text) -> str:
    """Text for a Markdown table cell or heading: visible escapes, ``|`` and backslashes escaped."""
    return visible(text).replace("\\", "\\\\").replace("|", "\\|")


def md_code(text) -> str:
    """Text as a Markdown code span inside a table (GitHub's rules: ``|`` escaped even in code; a backtick in the
    text makes the delimiters longer)."""
    shown = visible(text).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def csv_cell(text) -> str:
    """Text for a CSV cell: visible escapes (the csv module quotes the rest)."""
    return visible(text)


def esc(text) -> str:
    """Text for HTML text and (double-quoted) attributes: visible escapes, then HTML escaping."""
    return html.escape(visible(text), quote=True)
