"""The page frame of the report card, ``gate --html`` and ``leaderboard --html``: the style sheet, the shell (title,
subtitle, footer), tables, inline pictures, the number format, and writing the page."""

from __future__ import annotations

import base64
import math

from ... import output_dirs
from ..results import UnusableInput
from ..text import esc

CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4d9;--bg:#f6f7f9;--card:#fff;--warn:#b3261e;--warnbg:#fdecea;
--ok:#1e7b34;--okbg:#e7f4ea;--accent:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--fg);background:var(--bg)}
header.top{background:#fff;border-bottom:1px solid var(--line);padding:18px 24px 12px}
header.top h1{margin:0 0 4px;font-size:24px}
header.top p{margin:0;color:var(--muted)}
main{max-width:1180px;margin:0 auto;padding:16px 24px 40px}
section.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:16px 0}
section.card h2{margin:0 0 6px;font-size:20px}
h3{font-size:16px;margin:18px 0 6px}
p.lead{margin:0 0 10px;color:var(--muted)}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:14px;margin:6px 0 10px}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.num.bad{white-space:normal;overflow-wrap:anywhere;text-align:left}
td.meaning{color:var(--muted);min-width:16em}
td.absent{color:var(--muted);text-align:center}
td.bad{color:var(--warn)}
.pm{color:var(--muted);font-size:12px}
.note{color:var(--muted);font-size:12px}
table.gate td{min-width:5em}
.dir{color:var(--muted)}
.muted{color:var(--muted)}
.nowrap{white-space:nowrap}
th code{white-space:nowrap;overflow-wrap:normal}
.task{font-weight:400;font-size:12px;color:var(--muted)}
dl.settings div.differ,tr.differ td{background:#fff4d6}
dl.meanings{margin:4px 0 10px;font-size:13px;color:var(--muted)}
dl.meanings div{display:flex;gap:8px}dl.meanings dt{flex:none}dl.meanings dd{margin:0}
dl.settings{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:4px 14px;margin:6px 0 10px}
dl.settings div{border-bottom:1px solid var(--line);padding:3px 0;display:flex;gap:8px;justify-content:space-between}
dl.settings dt{font-weight:600;font-size:13px;white-space:nowrap}
dl.settings dd{margin:0;text-align:right;min-width:0;overflow-wrap:anywhere}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
.box{border-radius:6px;padding:10px 14px;margin:10px 0}
.box.warn{background:var(--warnbg);border:2px solid var(--warn)}
.box.warn h2,.box.warn strong{color:var(--warn)}
.box.ok{background:var(--okbg);border:1px solid var(--ok)}
.box ul{margin:4px 0 0;padding-left:20px}
.verdict{font-weight:700;white-space:nowrap}
.verdict.fail{color:var(--warn)}
.verdict.pass{color:var(--ok)}
.verdict.none{color:var(--muted)}
img.picture{display:block;max-width:100%;height:auto;margin:8px 0;border:1px solid var(--line);border-radius:4px}
.trends{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.trends img{width:100%;height:auto;border:1px solid var(--line);border-radius:4px}
details{margin:6px 0}
summary{cursor:pointer;color:var(--accent);overflow-wrap:anywhere}
iframe.viewer{width:100%;min-width:820px;height:760px;border:1px solid var(--line);border-radius:4px;background:#fff}
footer{color:var(--muted);font-size:13px;max-width:1180px;margin:0 auto;padding:0 24px 30px}
.meaning-inline{display:none;font-weight:400;font-size:12px;color:var(--muted);white-space:normal;max-width:16em}
@media (max-width:600px){main{padding:8px 10px 30px}section.card{padding:12px}header.top{padding:14px 12px 10px}
header.top h1{font-size:20px}th,td{padding:4px 6px}iframe.viewer{height:640px}
td.meaning,th.meaning{display:none}.meaning-inline{display:block}
.scroll tbody th:first-child{position:sticky;left:0;z-index:1}
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block}table.stack thead{display:none}
table.stack tr{border-bottom:1px solid var(--line);padding:4px 0}table.stack td{border:0;padding:1px 4px}
table.stack td::before{content:attr(data-label) ": ";color:var(--muted)}}
"""


def fmt(value) -> str:
    """A number as the page shows it: whole numbers in full, others to 4 significant digits."""
    if value is None:
        return "—"
    v = float(value)
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def marks(label: str, name: str, value: float, stderr: float | None, lower_bound: bool = False) -> str:
    """The attributes that let a reader (or a test) take a shown number back: run, metric, value and stderr, and
    whether the value is shown as a lower bound (``≥``, :mod:`..bounds`)."""
    out = f'data-run="{esc(label)}" data-metric="{esc(name)}" data-value="{esc(repr(value))}"'
    out += f' data-stderr="{esc(repr(stderr))}"' if stderr is not None else ""
    return out + (
        ' data-lower-bound="true" title="a lower bound: the longest length the run tested"' if lower_bound else ""
    )


def table(head: str, rows: str, css: str = "") -> str:
    """A table (head: ``<th>`` cells, rows: ``<tr>`` rows) that scrolls sideways when wider than the page."""
    cls = f' class="{css}"' if css else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def png_img(png: bytes, alt: str, cls: str = "", width_percent: float | None = None) -> str:
    """A PNG inline, as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    style = f' style="width:{width_percent:.1f}%"' if width_percent is not None else ""
    return f'<img class="{esc(cls)}"{style} alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def html_page(title: str, body: str, subtitle: str = "", footer: str = "") -> str:
    """The page shell: ``title`` and ``subtitle`` are text (escaped here), ``body`` and ``footer`` are HTML already
    escaped by the caller."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style></head>\n<body>\n"
        f'<header class="top"><h1>{esc(title)}</h1>' + (f"<p>{esc(subtitle)}</p>" if subtitle else "") + "</header>\n"
        f"<main>\n{body}\n</main>\n"
        f"<footer>{footer or 'Written by lm-eval-longctx (lm_eval_longctx.report).'}</footer>\n</body></html>\n"
    )


def write_page(path, text: str) -> None:
    """Write a page (its folder created when missing), whole or not at all (``output_dirs.atomic_file``); any failure
    is :class:`UnusableInput` naming the file and the cause."""
    try:
        output_dirs.write_atomically(path, text)
    except OSError as e:
        raise UnusableInput(f"{path}: cannot write the HTML page: {e.strerror or e}") from e


# a run label longer than this heads a column as "run k" (the Runs table names it; the full label shows on hover),
# so that one long path does not wrap every header of the page
LONG_LABEL = 24


def label_heading(index: int, label: str) -> str:
    """The column heading of the run at ``index`` (from 0): its label, or "run k" titled with the label when long."""
    if len(label) <= LONG_LABEL:
        return f"<th>{esc(label)}</th>"
    return f'<th title="{esc(label)}">run {index + 1}</th>'
