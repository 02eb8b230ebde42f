"""Size and speed of the key-token viewer page at scale: synthetic longppl_govreport exports (N documents of T
tokens, written with the real export writer), the page built from them, and, when a headless Chromium is
installed, the time to open it and draw a document.

    python scripts/bench_viewer.py --docs 50 --tokens 32768 [--diff] [--out /tmp/bench_viewer]

Prints the export's size, the page's size (raw and gzip-compressed arrays), the build time, and Chromium's
wall time to load the page and draw document 0 and document N-1 (--dump-dom), with the page's own
measurements (data-first-shown-ms: navigation start to the first document drawn; data-render-ms: decoding and
drawing one document). The page's clock is real only without gzip: a gzip page is inflated asynchronously, so
Chromium needs --virtual-time-budget to draw it before dumping the DOM, and virtual time makes the page's own
numbers meaningless (its wall time still counts); those lines print the wall time only. An empty page takes
Chromium about 1 s to start, load and dump here (printed as the baseline).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lm_eval_longctx.data import export_files
from lm_eval_longctx.report import viewer

WORDS = (
    "the of and to a in for is on that by this with be are as it from at an or was report agency federal "
    "program funds department fiscal year data system plan management review office state costs"
).split()


def synthetic_document(doc_id: int, n_tokens: int, rng: np.random.Generator) -> dict:
    words = rng.choice(WORDS, size=n_tokens)
    pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
    lengths = np.array([len(p) for p in pieces])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    text = "".join(pieces)
    lp = -rng.gamma(2.0, 1.5, size=n_tokens).astype(np.float32)
    lp[0] = np.nan
    lsd = rng.normal(0, 1.2, size=n_tokens).astype(np.float32)
    lsd[: min(4096, n_tokens)] = np.nan
    key = np.nan_to_num(lsd, nan=0) > 2.0
    return {
        "doc_id": np.asarray(doc_id),
        "text": np.asarray(text),
        "text_sha256": np.asarray(f"{doc_id:064d}"),
        "token_id": rng.integers(0, 32000, n_tokens),
        "char_start": starts,
        "char_end": ends,
        "logprob": lp,
        "nll": -lp,
        "greedy": rng.random(n_tokens) < 0.4,
        "key": key,
        "lsd": lsd,
        "lcl": lp.copy(),
    }


def write_export(root: Path, n_docs: int, n_tokens: int, seed: int, shift: float = 0.0) -> Path:
    ex = export_files.TokenExport(root, "longppl_govreport", view=export_files.KEY_TOKEN_VIEW)
    for i in range(n_docs):
        d = synthetic_document(i, n_tokens, np.random.default_rng(i))  # same documents in every export
        noise = np.random.default_rng(seed * 1000 + i).normal(shift, 0.5, n_tokens).astype(np.float32)
        d["logprob"] = d["logprob"] + noise
        d["nll"] = -d["logprob"]
        ex.write(i, d, {"alpha": 2.0, "beta": -2.0, "trunc_len": 4096, "key_source": "synthetic"})
    return root


def chromium_time(page: Path, doc: int, budget: bool) -> tuple[float, dict]:
    exe = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
    with tempfile.TemporaryDirectory() as profile:
        args = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--dump-dom",
        ] + (["--virtual-time-budget=60000"] if budget else [])
        t0 = time.perf_counter()
        proc = subprocess.run(
            args + [f"{page.resolve().as_uri()}#doc={doc}"], capture_output=True, text=True, timeout=600
        )
        wall = time.perf_counter() - t0
    body = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<body[^>]*>", proc.stdout).group(0)))
    body["spans"] = len(re.findall(r'<span class="t[ "]', proc.stdout))
    return wall, body


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=50)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--diff", action="store_true", help="also a diff page of two exports")
    p.add_argument("--out", default=None, help="work folder (default: a temporary one, removed)")
    args = p.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="bench_viewer_"))
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty")
    t0 = time.perf_counter()
    a = write_export(work / "a", args.docs, args.tokens, seed=1)
    print(
        f"export: {args.docs} documents x {args.tokens} tokens written in {time.perf_counter() - t0:.1f} s, "
        f"{sum(f.stat().st_size for f in (a / 'longppl_govreport').iterdir()) / 2**20:.1f} MiB"
    )
    exports = [[a]]
    if args.diff:
        exports.append([a, write_export(work / "b", args.docs, args.tokens, seed=2, shift=0.1)])
    has_browser = any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))
    if has_browser:
        empty = work / "empty.html"
        empty.write_text('<!DOCTYPE html><html><body data-x="1"></body></html>')
        print(f"baseline: chromium --dump-dom of an empty page: {chromium_time(empty, 0, budget=False)[0]:.1f} s wall")
    for ex in exports:
        for compress in (False, True):
            page = work / f"page_{len(ex)}_{int(compress)}.html"
            t0 = time.perf_counter()
            info = viewer.build_page(ex, page, compress=compress)
            build = time.perf_counter() - t0
            kind = "diff" if len(ex) == 2 else "single"
            print(
                f"{kind:6} compress={compress!s:5}: page {info['bytes'] / 2**20:6.1f} MiB (arrays {info['raw_array_bytes'] / 2**20:.1f} MiB raw), "
                f"built in {build:.1f} s"
            )
            if has_browser:
                for doc in (0, args.docs - 1):
                    wall, body = chromium_time(page, doc, budget=compress)
                    ok = body["spans"] == args.tokens
                    own = (
                        ""
                        if compress
                        else (
                            f"; first document drawn {body.get('first-shown-ms')} ms after "
                            f"navigation start, decode+draw {body.get('render-ms')} ms"
                        )
                    )
                    print(
                        f"    chromium --dump-dom #doc={doc}: {wall:.1f} s wall{own}; {body['spans']} token spans "
                        f"({'ok' if ok else 'MISMATCH'})"
                    )
    if not args.out:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
