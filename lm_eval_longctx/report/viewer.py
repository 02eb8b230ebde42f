"""``lm-eval-longctx view EXPORT [EXPORT_B] -o page.html``: the key tokens of a LongPPL run, in a browser.

One self-contained static HTML file (inline CSS and JavaScript; no network, no external scripts or
fonts) built from a per-token export of ``longppl_govreport`` (``data/export_files.py``):

* per document, the text with every token of the evaluated model shaded by the evaluator's LSD (a
  diverging scale with a legend), key tokens outlined, greedy hits optionally underlined; hovering a
  token shows its numbers; a header with the document's LongPPL, PPL and key-token count; a document
  list to jump between documents (``#doc=K`` in the address opens document K);
* a document opens at its first key token (the first K tokens cannot be key tokens: they have no truncated
  context, so the start of a document shows none), unless the address names another place: ``&tok=N`` (token N)
  or ``&top`` (the start);
* with a second export of the same documents (another checkpoint, same tokenizer), a diff view: tokens
  coloured by the change in NLL (B - A), over all tokens or key tokens only (``&mode=dnll``, ``dnllkey`` or
  ``lsd`` in the address picks the colouring).

Size: each document's arrays are embedded as base64 (raw little-endian typed arrays, gzip-compressed
when the page would otherwise be large: the browser inflates them with its built-in
``DecompressionStream``), and a document is decoded and rendered only when it is opened, so the page
holds the DOM of one document at a time. Measured sizes and times: docs/tools/token-export-and-viewer.md.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import output_dirs
from ..data import export_files
from ..metrics import per_token
from .outputs import check_outputs
from .text import cut, esc, visible

LSD_RANGE = 4.0  # the colour scale saturates at |LSD| = 4 (alpha is 2 by default)
DNLL_RANGE = 4.0
N_BINS = 21  # colour classes per scale (odd: a white middle bin)
# raw bytes of all documents above which the arrays are gzip-compressed (auto)
COMPRESS_ABOVE_BYTES = 8 * 2**20


class ViewerError(ValueError):
    """Exports the viewer cannot show (not a key-token export, mismatching documents)."""


@dataclass
class Export:
    folder: Path
    manifest: dict
    files: list[Path]

    @property
    def label(self) -> str:
        return self.folder.parent.name or str(self.folder)


def why_not_shown(folder: Path) -> str | None:
    """None when the export in ``folder`` is one the viewer draws: its manifest declares the key-token view, or,
    declaring no view, its documents hold the arrays the view reads (listed in the manifest's columns, else in the
    first document's directory); else why not."""
    manifest = export_files.read_manifest(folder)
    view = manifest.get("view")
    if view is not None:
        if view == export_files.KEY_TOKEN_VIEW:
            return None
        return f"a {visible(manifest.get('task'))} export for the view {visible(view)!r}"
    needed = set(export_files.KEY_TOKEN_ARRAYS)
    columns = manifest.get("columns")
    if isinstance(columns, dict) and columns:
        where, names = "its manifest's columns", {name.strip() for key in columns for name in str(key).split(",")}
    else:
        files = export_files.document_files(folder)
        if not files:
            return f"no document files ({export_files.DOC_GLOB})"
        where, names = files[0].name, set(export_files.array_names(files[0]))
    missing = sorted(needed - names)
    return (
        f"declares no view, and {where} lack the arrays the key-token view reads ({', '.join(missing)})"
        if missing
        else None
    )


def key_token_folder(path) -> Path:
    """The key-token export of ``path``: the folder itself when it holds a manifest, else its one subfolder whose
    export the viewer draws (:func:`shows`)."""
    path = Path(path)
    try:
        folders = export_files.export_folders(path)
    except FileNotFoundError as e:
        raise ViewerError(str(e)) from e
    if not folders:
        raise ViewerError(f"{path} is not a token export (no {export_files.MANIFEST} in it or in its subfolders)")
    why = {f: why_not_shown(f) for f in folders}
    drawn = [f for f, reason in why.items() if reason is None]
    if not drawn:
        detail = "; ".join(f"{f}: {reason}" for f, reason in why.items())
        raise ViewerError(
            f"no key-token export (manifest view {export_files.KEY_TOKEN_VIEW!r}) in {path}: {detail}; give the "
            "export_tokens folder of a run of a task with that view"
        )
    if len(drawn) > 1:
        raise ViewerError(f"{path}: {len(drawn)} key-token exports ({', '.join(f.name for f in drawn)}): give one")
    return drawn[0]


def open_export(path) -> Export:
    folder = key_token_folder(path)
    manifest = export_files.read_manifest(folder)
    _check_settings(manifest.get("settings", {}), folder / export_files.MANIFEST)
    files = export_files.document_files(folder)
    if not files:
        raise ViewerError(f"{folder}: no document files ({export_files.DOC_GLOB})")
    return Export(folder, manifest, files)


# the manifest settings the page shows, and what each must be (an export is a file people share: data, checked)
_SHOWN_SETTINGS = {"alpha": "number", "beta": "number", "trunc_len": "int", "key_source": "str", "evaluator": "str"}


def _check_settings(settings: dict, source: Path) -> None:
    for key, kind in _SHOWN_SETTINGS.items():
        v = settings.get(key)
        if v is None:
            continue
        ok = (
            isinstance(v, str)
            if kind == "str"
            else not isinstance(v, bool) and isinstance(v, int if kind == "int" else (int, float)) and math.isfinite(v)
        )
        if not ok:
            raise ViewerError(
                f"{source}: settings.{key} is {json.dumps(v)[:80]}, expected "
                f"{'a string' if kind == 'str' else 'a whole number' if kind == 'int' else 'a finite number'} (or null)"
            )


def _load(path: Path) -> dict:
    d = export_files.load_document(path)
    export_files.check_token_document(d, path)
    return d


def _ppl(nll_sum: float, n: int) -> float | None:
    v = per_token.perplexity_from_sums(nll_sum, n)
    return v if math.isfinite(v) else None


def _doc_stats(d: dict) -> dict:
    lp = d["logprob"][1:].astype(np.float64)
    key = d["key"][1:]
    key_nll, all_nll = per_token.nll_sum(lp[key]), per_token.nll_sum(lp)
    return {
        "n_tokens": int(len(d["token_id"])),
        "n_key": int(key.sum()),
        "key_nll_sum": key_nll,
        "nll_sum": all_nll,
        "n_targets": int(len(lp)),
        "longppl": _ppl(key_nll, int(key.sum())),
        "ppl": _ppl(all_nll, len(lp)),
    }


def _title(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and set(line) - set("*=-#_~ "):
            return cut(visible(line), 80)
    return ""


def _encode(d: dict, other: dict | None) -> bytes:
    """[start i32][end i32][nll f32][lsd f32][lcl f32]([nll_b f32])[flags u8], little-endian."""
    parts = [
        np.asarray(d["char_start"], "<i4"),
        np.asarray(d["char_end"], "<i4"),
        np.asarray(d["nll"], "<f4"),
        np.asarray(d["lsd"], "<f4"),
        np.asarray(d["lcl"], "<f4"),
    ]
    flags = d["key"].astype(np.uint8) | (d["greedy"].astype(np.uint8) << 1)
    if other is not None:
        parts.append(np.asarray(other["nll"], "<f4"))
        flags |= (other["key"].astype(np.uint8) << 2) | (other["greedy"].astype(np.uint8) << 3)
    parts.append(flags.astype(np.uint8))
    return b"".join(p.tobytes() for p in parts)


def _script_json(obj) -> str:
    # "<" as \u003c: no "</script>" or "<!--" can end the data block early; JSON.parse reads it back
    return json.dumps(obj, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")


def _check_same_documents(a: dict, b: dict, path_b: Path) -> None:
    if a["doc_id"] != b["doc_id"] or a["text_sha256"] != b["text_sha256"]:
        raise ViewerError(
            f"{path_b}: document {b['doc_id']} is not document {a['doc_id']} of the first export "
            "(other texts): a diff needs two exports of the same documents"
        )
    if len(a["token_id"]) != len(b["token_id"]) or not np.array_equal(a["token_id"], b["token_id"]):
        raise ViewerError(
            f"{path_b}: document {b['doc_id']} is tokenized differently from the first export; a "
            "token-by-token diff needs models with one tokenizer"
        )


def _colour_bins(neg: tuple, mid: tuple, pos: tuple, n: int = N_BINS) -> list[str]:
    out = []
    for i in range(n):
        x = 2 * i / (n - 1) - 1  # -1 .. 1
        a, b, t = (mid, neg, -x) if x < 0 else (mid, pos, x)
        out.append("#" + "".join(f"{round(a[k] + (b[k] - a[k]) * t):02x}" for k in range(3)))
    return out


LSD_COLOURS = _colour_bins((33, 102, 172), (255, 255, 255), (214, 47, 39))  # blue - white - red
DNLL_COLOURS = _colour_bins((26, 152, 80), (255, 255, 255), (152, 78, 163))  # green (B better) - purple (worse)


def build_page(export_paths, out_path, compress: bool | None = None, title: str | None = None) -> dict:
    """Write the viewer page for one export (or two: a diff) to ``out_path``; return sizes and counts.

    Documents are read one at a time while the page is written: memory is one document's arrays (two
    with a diff) plus the page's own compressed text."""
    exports = [open_export(p) for p in export_paths]
    inputs = [f for e in exports for f in (e.folder / export_files.MANIFEST, *e.files)]
    check_outputs([("-o", out_path)], inputs)
    if not 1 <= len(exports) <= 2:
        raise ViewerError("give one export, or two for a diff")
    a = exports[0]
    b = exports[1] if len(exports) == 2 else None
    if b is not None and [p.name for p in a.files] != [p.name for p in b.files]:
        raise ViewerError(
            f"{a.folder} and {b.folder} hold different documents "
            f"({len(a.files)} vs {len(b.files)} files): a diff needs the same documents"
        )
    if compress is None:
        # raw size: about 21 bytes a token (25 with a diff); the texts come on top
        n_bytes = sum(p.stat().st_size for p in a.files) * (2 if b else 1) * 4
        compress = n_bytes > COMPRESS_ABOVE_BYTES
    out_path = Path(out_path)
    index: list[dict[str, Any]] = []
    totals: dict[str, list[list]] = {"a": [[], []], "b": [[], []]}
    meta = _write_page(out_path, a, b, compress, title, index, totals)
    raw_bytes = meta.pop("raw_bytes")
    return {
        "path": str(out_path),
        "bytes": out_path.stat().st_size,
        "raw_array_bytes": raw_bytes,
        "compressed": bool(compress),
        "n_docs": len(index),
        "diff": b is not None,
        "n_tokens": [e["a"]["n_tokens"] for e in index],
        "n_key": [e["a"]["n_key"] for e in index],
        "corpus": meta["corpus"],
    }


def _write_page(out_path: Path, a: Export, b: Export | None, compress: bool, title, index: list, totals: dict) -> dict:
    """Write the page (whole or not at all); fill ``index`` and ``totals``; return the page's metadata."""
    exports = [a] if b is None else [a, b]
    raw_bytes = 0
    with output_dirs.atomic_file(out_path, "w") as f:
        f.write(_HEAD.replace("%CSS%", _css()).replace("%TITLE%", esc(title or "LongPPL key tokens")))
        for k, path in enumerate(a.files):
            da = _load(path)
            db = _load(b.files[k]) if b is not None else None
            if db is not None and b is not None:
                _check_same_documents(da, db, b.files[k])
            blob = _encode(da, db)
            raw_bytes += len(blob)
            if compress:
                blob = gzip.compress(blob, compresslevel=6, mtime=0)
            sa = _doc_stats(da)
            entry = {"doc_id": int(da["doc_id"]), "title": _title(da["text"]), "a": sa}
            totals["a"][0].append((sa["key_nll_sum"], sa["n_key"]))
            totals["a"][1].append((sa["nll_sum"], sa["n_targets"]))
            if db is not None:
                sb = _doc_stats(db)
                entry["b"] = sb
                totals["b"][0].append((sb["key_nll_sum"], sb["n_key"]))
                totals["b"][1].append((sb["nll_sum"], sb["n_targets"]))
            index.append(entry)
            payload = {
                "text": da["text"],
                "n": sa["n_tokens"],
                "z": bool(compress),
                "data": base64.b64encode(blob).decode("ascii"),
            }
            f.write(f'<script type="application/json" id="doc-{k}">{_script_json(payload)}</script>\n')
            del da, db, blob, payload

        def corpus(side):
            if not totals[side][0]:
                return None
            lp, pp = (per_token.token_weighted_perplexity(x) for x in totals[side])
            return {
                "longppl": lp if math.isfinite(lp) else None,
                "ppl": pp if math.isfinite(pp) else None,
                "n_key": sum(int(x[1]) for x in totals[side][0]),
                "n_targets": sum(int(x[1]) for x in totals[side][1]),
            }

        s = a.manifest.get("settings", {})
        meta: dict[str, Any] = {
            "labels": [visible(e.folder.parent) for e in exports],
            "diff": b is not None,
            "alpha": s.get("alpha"),
            "beta": s.get("beta"),
            "trunc_len": s.get("trunc_len"),
            "key_source": s.get("key_source"),
            "evaluator": s.get("evaluator"),
            "corpus": {"a": corpus("a"), "b": corpus("b")},
            "docs": index,
            "lsd_range": LSD_RANGE,
            "dnll_range": DNLL_RANGE,
            "bins": N_BINS,
        }
        f.write(f'<script type="application/json" id="meta">{_script_json(meta)}</script>\n')
        f.write(_BODY_SCRIPT)
    return {**meta, "raw_bytes": raw_bytes}


def _css() -> str:
    rules = [f".c{i}{{background:{c}}}" for i, c in enumerate(LSD_COLOURS)]
    rules += [f".d{i}{{background:{c}}}" for i, c in enumerate(DNLL_COLOURS)]
    return _CSS + "\n".join(rules)


_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%CSS%</style></head>
<body>
<div id="app">
<nav id="side"><h1>%TITLE%</h1><div id="corpus"></div><div id="doclist"></div></nav>
<main id="main">
<div id="top"><header id="dochead"></header>
<div id="controls"></div>
<div id="legend"></div></div>
<div id="text" class="doc"></div>
</main></div>
<div id="tip" hidden></div>
<noscript>This page needs JavaScript to draw the documents.</noscript>
"""

_CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4d9}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:#fafafa}
#app{display:flex;height:100vh}
#side{width:270px;flex:none;border-right:1px solid var(--line);padding:12px;background:#fff;height:100vh;overflow:auto}
#side h1{font-size:16px;margin:0 0 8px}
#corpus{font-size:12px;color:var(--muted);margin-bottom:10px}
#doclist button{display:block;width:100%;text-align:left;border:1px solid transparent;background:none;padding:5px 6px;border-radius:4px;cursor:pointer;font:inherit;font-size:12px;color:inherit}
#doclist button:hover{background:#f0f3f7}
#doclist button.on{background:#e6eefb;border-color:#9bb7e6}
#doclist .dt{display:block;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#doclist .ds{color:var(--muted)}
#main{flex:1;min-width:0;padding:0 22px 14px;height:100vh;overflow:auto}
#top{position:sticky;top:0;z-index:5;background:#fafafa;padding-top:12px;border-bottom:1px solid var(--line);margin-bottom:10px}
#dochead h2{font-size:18px;margin:0 0 6px}
#dochead table{border-collapse:collapse;font-size:13px;margin-bottom:8px}
#dochead td,#dochead th{padding:2px 12px 2px 0;text-align:left}
#dochead th{color:var(--muted);font-weight:500}
#controls{font-size:13px;margin:6px 0;display:flex;gap:16px;flex-wrap:wrap;align-items:center}
#controls button{font:inherit;font-size:12px;padding:1px 8px}
#legend{font-size:12px;color:var(--muted);margin:6px 0 10px;display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.bar{display:inline-flex;border:1px solid var(--line)}
.bar span{width:14px;height:14px;display:inline-block}
.ticks{display:flex;justify-content:space-between;width:296px;font-size:11px}
.doc{white-space:pre-wrap;word-wrap:break-word;font:13px/1.7 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;background:#fff;border:1px solid var(--line);padding:12px 14px;border-radius:4px}
.t{border-radius:2px}
.t.k{outline:2px solid #000;outline-offset:-1px;font-weight:700}
.t.kb{outline:2px dashed #000;outline-offset:-1px}
.doc.ug .t.g{text-decoration:underline dotted #444}
.keybox{display:inline-block;width:14px;height:14px;outline:2px solid #000;outline-offset:-1px;vertical-align:middle}
.keybox.kb{outline-style:dashed}
#tip{position:fixed;z-index:10;background:#222;color:#fff;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;padding:6px 8px;border-radius:4px;pointer-events:none;white-space:pre;max-width:420px}
"""

_BODY_SCRIPT = r"""<script>
"use strict";
const META = JSON.parse(document.getElementById("meta").textContent);
const DIFF = META.diff, BINS = META.bins, MID = (BINS - 1) / 2;
const cache = new Map();
let current = -1, mode = DIFF ? "dnll" : "lsd";
{  // #doc=K&mode=dnllkey: the colour scale (dnll, dnllkey, lsd) from the address
  const m = /mode=(\w+)/.exec(location.hash);
  if (m && (m[1] === "lsd" || (DIFF && (m[1] === "dnll" || m[1] === "dnllkey")))) mode = m[1];
}
const $ = (id) => document.getElementById(id);
const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? "\u2014" : Number(x).toFixed(d);
const fmtp = (x) => (x === null || x === undefined) ? "\u2014" : (x >= 100 ? x.toFixed(1) : x.toFixed(3));
// every value put into innerHTML passes here, numbers included: the page shows data from shared files
function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c])); }

async function bytesOf(payload) {
  const bin = atob(payload.data), u8 = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
  if (!payload.z) return u8.buffer;
  if (typeof DecompressionStream === "undefined") throw new Error("this browser lacks DecompressionStream (gzip)");
  const stream = new Blob([u8]).stream().pipeThrough(new DecompressionStream("gzip"));
  return await new Response(stream).arrayBuffer();
}

async function loadDoc(k) {
  if (cache.has(k)) return cache.get(k);
  const payload = JSON.parse($("doc-" + k).textContent);
  const buf = await bytesOf(payload), n = payload.n;
  let o = 0;
  const take = (T) => { const a = new T(buf, o, n); o += n * T.BYTES_PER_ELEMENT; return a; };
  const d = {text: payload.text, n, start: take(Int32Array), end: take(Int32Array), nll: take(Float32Array),
             lsd: take(Float32Array), lcl: take(Float32Array)};
  d.nllb = DIFF ? take(Float32Array) : null;
  d.flags = take(Uint8Array);
  if (cache.size > 4) cache.delete(cache.keys().next().value);  // a few documents at most
  cache.set(k, d);
  return d;
}

function bin(v, range) {
  if (Number.isNaN(v)) return -1;
  const x = Math.max(-1, Math.min(1, v / range));
  return Math.round((x + 1) * MID);
}

function tokenClass(d, i) {
  const f = d.flags[i];
  let c = "t";
  if (f & 1) c += " k"; else if (DIFF && (f & 4)) c += " kb";
  if (f & 2) c += " g";
  let b = -1;
  if (mode === "lsd") { b = bin(d.lsd[i], META.lsd_range); if (b >= 0) c += " c" + b; }
  else if (mode === "dnll" || (mode === "dnllkey" && (f & 5))) {
    b = bin(d.nllb[i] - d.nll[i], META.dnll_range); if (b >= 0) c += " d" + b;
  }
  return c;
}

function statRow(name, s) {
  return "<tr><th>" + esc(name) + "</th><td>LongPPL <b>" + fmtp(s.longppl) + "</b></td><td>PPL <b>" + fmtp(s.ppl) +
    "</b></td><td>key tokens <b>" + esc(s.n_key) + "</b> of " + esc(s.n_tokens) + " (" + (100 * s.n_key / Math.max(1, s.n_tokens - 1)).toFixed(2) + "%)</td></tr>";
}

function header(k) {
  const e = META.docs[k];
  let h = "<h2>Document " + esc(e.doc_id) + (e.title ? ": " + esc(e.title) : "") + "</h2><table>";
  h += statRow(DIFF ? "A" : "", e.a);
  if (DIFF) h += statRow("B", e.b);
  h += "</table>";
  $("dochead").innerHTML = h;
}

function legend() {
  const cols = mode === "lsd" ? "c" : "d", range = mode === "lsd" ? META.lsd_range : META.dnll_range;
  let bar = "";
  for (let i = 0; i < BINS; i++) bar += '<span class="' + cols + i + '"></span>';
  const what = mode === "lsd"
    ? "LSD = log P(long) \u2212 log P(truncated, K = " + esc(META.trunc_len) + ") by the evaluator (" + esc(META.evaluator || META.key_source) + ")"
    : "\u0394NLL = NLL(B) \u2212 NLL(A) per token" + (mode === "dnllkey" ? ", key tokens only" : "") + ": green, B predicts better";
  const keyNote = '<span class="keybox"></span> key token' + (DIFF ? ' (A); <span class="keybox kb"></span> key in B only' : "") +
    " (LSD &gt; " + esc(META.alpha) + " and LCL &gt; " + esc(META.beta) + ")";
  $("legend").innerHTML = '<div><div class="bar">' + bar + '</div><div class="ticks"><span>\u2264 \u2212' + range +
    "</span><span>0</span><span>\u2265 +" + range + "</span></div></div><div>" + what + "<br>" + keyNote +
    "; unshaded: no value (before K, or first token)</div>";
}

function controls() {
  let h = "";
  const opts = DIFF ? [["dnll", "\u0394NLL, all tokens"], ["dnllkey", "\u0394NLL, key tokens only"], ["lsd", "LSD (A)"]]
                    : [["lsd", "LSD"]];
  if (opts.length > 1) h += "<span>colour: " + opts.map(([v, l]) => '<label><input type="radio" name="mode" value="' + v + '"' +
    (v === mode ? " checked" : "") + "> " + l + "</label>").join(" ") + "</span>";
  h += '<label><input type="checkbox" id="ug"> underline greedy hits (argmax = token)</label>';
  h += '<span><button id="prevkey">\u25c2 previous key token</button> <button id="nextkey">next key token \u25b8</button></span>';
  $("controls").innerHTML = h;
  $("nextkey").addEventListener("click", () => jumpKey(1));
  $("prevkey").addEventListener("click", () => jumpKey(-1));
  for (const r of document.querySelectorAll('input[name="mode"]')) r.addEventListener("change", () => { mode = r.value; legend(); show(current, true); });
  $("ug").addEventListener("change", (ev) => $("text").classList.toggle("ug", ev.target.checked));
}

async function show(k, force) {
  if (k === current && !force) return;
  const t0 = performance.now();
  const d = await loadDoc(k);
  const opened = k !== current;
  current = k;
  header(k);
  const frag = document.createDocumentFragment();
  let pos = 0, keys = 0;
  for (let i = 0; i < d.n; i++) {
    const s = d.start[i], e = d.end[i];
    if (s > pos) { frag.appendChild(document.createTextNode(d.text.slice(pos, s))); pos = s; }
    const span = document.createElement("span");
    span.className = tokenClass(d, i);
    span.textContent = e > pos ? d.text.slice(pos, e) : "";
    span.dataset.i = i;
    if (d.flags[i] & 1) keys++;
    frag.appendChild(span);
    if (e > pos) pos = e;
  }
  if (pos < d.text.length) frag.appendChild(document.createTextNode(d.text.slice(pos)));
  const box = $("text");
  box.textContent = "";
  box.appendChild(frag);
  for (const b of document.querySelectorAll("#doclist button")) b.classList.toggle("on", Number(b.dataset.k) === k);
  document.body.dataset.doc = k;
  document.body.dataset.tokens = d.n;
  document.body.dataset.keys = keys;
  document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
  if (!document.body.dataset.firstShownMs) document.body.dataset.firstShownMs = performance.now().toFixed(1);  // since navigation
  if (opened) openAt(d);  // a new colouring of the same document keeps the reader's place
}

// Where a document opens: #doc=K&tok=N at token N, #doc=K&top at its start, else (#doc=K, #doc=K&key) at its first
// key token: the first K tokens have no truncated context, so the start of a document holds no key token to see.
function openAt(d) {
  keyAt = -1;
  const tok = /[#&]tok=(\d+)/.exec(location.hash), body = document.body.dataset;
  let place = "start", shown = null;
  if (tok) {
    shown = $("text").querySelector('[data-i="' + Math.min(Number(tok[1]), d.n - 1) + '"]');
    if (shown) { centre(shown); place = "token"; }
  } else if (!/[#&]top(&|$)/.test(location.hash)) {
    shown = jumpKey(1);
    if (shown) place = "key";
  }
  if (!shown) $("main").scrollTop = 0;
  body.openedAt = place;
  body.shownToken = shown ? shown.dataset.i : "";
  body.scrollTop = $("main").scrollTop;
  body.firstKeyVisible = String(inView($("text").querySelector(DIFF ? ".t.k,.t.kb" : ".t.k")));
}

// scrolls the text pane only: scrollIntoView would also scroll a page that embeds this one (the report card)
function centre(el) {
  const main = $("main"), r = el.getBoundingClientRect(), m = main.getBoundingClientRect();
  main.scrollTop += r.top - m.top - main.clientHeight / 2;
}

// on screen: below the sticky header, above the bottom of the text pane and of the window
function inView(el) {
  if (!el) return false;
  const r = el.getBoundingClientRect(), pane = $("main").getBoundingClientRect();
  return r.top >= $("top").getBoundingClientRect().bottom && r.bottom <= Math.min(pane.bottom, window.innerHeight);
}

let keyAt = -1;
function jumpKey(step) {
  const keys = $("text").querySelectorAll(DIFF ? ".t.k,.t.kb" : ".t.k");
  if (!keys.length) return null;
  keyAt = (keyAt + step + keys.length) % keys.length;
  centre(keys[keyAt]);
  keys[keyAt].animate([{boxShadow: "0 0 0 4px #f5c400"}, {boxShadow: "0 0 0 0 #f5c400"}], 1200);
  return keys[keyAt];
}

function tip(ev) {
  const i = ev.target.dataset ? ev.target.dataset.i : undefined;
  const t = $("tip");
  if (i === undefined) { t.hidden = true; return; }
  const d = cache.get(current), f = d.flags[i];
  let s = "token " + i + "  " + JSON.stringify(d.text.slice(d.start[i], d.end[i])) +
    "\nNLL " + fmt(d.nll[i]) + "   log-prob " + fmt(-d.nll[i]) + (f & 2 ? "   greedy hit" : "") +
    "\nLSD " + fmt(d.lsd[i]) + "   LCL " + fmt(d.lcl[i]) + (f & 1 ? "   KEY" : "");
  if (DIFF) s += "\nB: NLL " + fmt(d.nllb[i]) + "   \u0394NLL " + fmt(d.nllb[i] - d.nll[i]) + (f & 8 ? "   greedy hit" : "") + (f & 4 ? "   KEY" : "");
  t.textContent = s;
  t.hidden = false;
  t.style.left = Math.min(ev.clientX + 12, window.innerWidth - 430) + "px";
  t.style.top = (ev.clientY + 16) + "px";
}

function init() {
  const c = META.corpus;
  let h = "";
  const side = (name, s) => s ? "<div>" + esc(name) + "LongPPL <b>" + fmtp(s.longppl) + "</b>, PPL <b>" + fmtp(s.ppl) + "</b>, " + esc(s.n_key) + " key of " + esc(s.n_targets) + " tokens</div>" : "";
  h += "<div>" + esc(META.docs.length) + " documents" + (DIFF ? "; A = " + esc(META.labels[0]) + ", B = " + esc(META.labels[1]) : "; " + esc(META.labels[0])) + "</div>";
  h += side(DIFF ? "A: " : "all: ", c.a) + side("B: ", c.b);
  $("corpus").innerHTML = h;
  let l = "";
  META.docs.forEach((e, k) => {
    const s = "LongPPL " + fmtp(e.a.longppl) + (DIFF ? " \u2192 " + fmtp(e.b.longppl) : "") + " \u00b7 " + e.a.n_key + " key / " + e.a.n_tokens;
    l += '<button data-k="' + k + '"><span class="dt">' + esc(e.doc_id) + ". " + esc(e.title || "(untitled)") + '</span><span class="ds">' + esc(s) + "</span></button>";
  });
  $("doclist").innerHTML = l;
  $("doclist").addEventListener("click", (ev) => { const b = ev.target.closest("button"); if (b) location.hash = "doc=" + b.dataset.k + "&mode=" + mode; });
  $("text").addEventListener("mouseover", tip);
  $("text").addEventListener("mouseleave", () => { $("tip").hidden = true; });
  controls();
  legend();
  const pick = () => {
    const m = /doc=(\d+)/.exec(location.hash), k = m ? Math.min(Number(m[1]), META.docs.length - 1) : 0;
    if (k === current && cache.has(k)) openAt(cache.get(k));  // another place in the open document
    else show(k).catch(fail);
  };
  window.addEventListener("hashchange", pick);
  pick();
}
function fail(err) { $("text").textContent = "could not draw this document: " + err; document.body.dataset.error = String(err); }
init();
</script>
</body></html>
"""


def longppl_from_export(folder: str | Path) -> dict:
    """Corpus LongPPL and PPL recomputed from the per-token arrays (key flags and log-probs)."""
    pairs_key, pairs_all = [], []
    for d in export_files.iter_documents(key_token_folder(folder)):
        lp = d["logprob"][1:].astype(np.float64)
        key = d["key"][1:]
        pairs_key.append((per_token.nll_sum(lp[key]), int(key.sum())))
        pairs_all.append((per_token.nll_sum(lp), len(lp)))
    return {
        "longppl": per_token.token_weighted_perplexity(pairs_key),
        "ppl": per_token.token_weighted_perplexity(pairs_all),
        "n_docs": len(pairs_all),
    }
