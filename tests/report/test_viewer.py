"""Key-token viewer on real exports: the ci demo run, and two known-answer demo variants side by side (a diff).

The page's embedded data are decoded here and compared with the export; with a headless Chromium installed
(Debian: ``apt-get install chromium``) the page is rendered and its DOM checked (token and key-token counts
equal the export's) and a screenshot taken. Without a browser those tests are skipped."""

import base64
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import cli
from lm_eval_longctx.data import export_files
from lm_eval_longctx.demo import known_answer
from lm_eval_longctx.demo.run import (
    CORPUS_FILE,
    SUMMARY_FILE,
    budget_metadata,
    default_model_dir,
    harness_argv,
    run_harness,
)
from lm_eval_longctx.report import viewer

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


TASK = "longppl_govreport"
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed (apt-get install chromium)")


def _packaged_model():
    path = default_model_dir()
    return path if (path / "config.json").is_file() else None


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`lm-eval-longctx demo --budget ci` with the export setting (the packaged demo model)."""
    if _packaged_model() is None:
        pytest.skip("the packaged demo model is not built")
    out = tmp_path_factory.mktemp("demo")
    export = out / "tokens"
    rc = cli.main(
        ["demo", "--out", str(out), "--budget", "ci", "--metadata", json.dumps({"export_tokens": str(export)})]
    )
    assert rc == 0
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    results = json.loads(Path(summary["files"]["results_json"]).read_text(encoding="utf-8"))
    return {"out": out, "export": export, "summary": summary, "results": results}


@pytest.fixture(scope="module")
def variant_runs(demo_run, tmp_path_factory):
    """The untrained (steps 0) long and none variants on the demo's ci corpus, both judged by one evaluator (the
    long variant), through lm-eval's command line: two exports of the same documents and tokenizer."""
    root = tmp_path_factory.mktemp("variants")
    dirs = known_answer.build_models(root, ["long", "none"], steps=0, log_fn=lambda *a: None)
    runs = {}
    for name, model in dirs.items():
        export = root / f"tokens_{name}"
        md = budget_metadata(
            "ci",
            demo_run["out"] / CORPUS_FILE,
            {
                "export_tokens": str(export),
                "evaluator": str(dirs["long"]),
                "trunc_len": 128,
                "sliding_window": 64,
                "span_cache_dir": str(root / "spans"),
            },
        )
        results_file = run_harness(harness_argv(model, md, root / f"results_{name}", 4, tasks=(TASK,)))
        runs[name] = {"export": export, "results": json.loads(results_file.read_text(encoding="utf-8"))}
    return runs


# ----------------------------------------------------------------------------------------------- the demo's export


def _samples(summary, task):
    # samples_<task>_<date>.jsonl: the date after the task name, so retrieval_gain is not retrieval_gain_map
    (path,) = [
        p for p in summary["files"]["samples"] if re.fullmatch(rf"samples_{task}_\d{{4}}-.*\.jsonl", Path(p).name)
    ]
    return {s["doc_id"]: s for s in map(json.loads, Path(path).read_text(encoding="utf-8").splitlines())}


def test_demo_export_round_trips(demo_run):
    export, results, summary = demo_run["export"], demo_run["results"], demo_run["summary"]
    again = viewer.longppl_from_export(export)
    r = results["results"][TASK]
    assert again["longppl"] == r["longppl,none"] and again["ppl"] == r["ppl,none"]
    assert results["configs"][TASK]["metadata"]["longctx_settings"]["export_tokens"] == str(export.resolve())
    samples = _samples(summary, TASK)
    for d in export_files.iter_documents(export / TASK):
        assert (d["key_nll_sum"], d["n_key"]) == tuple(samples[d["doc_id"]]["longppl"])
    # retrieval_gain: per-anchor answer log-probs give the document's gain
    samples = _samples(summary, "retrieval_gain")
    docs = list(export_files.iter_documents(export / "retrieval_gain"))
    assert len(docs) == len(samples) > 0
    for d in docs:
        gain = (-d["without_logprob"].astype(np.float64).mean(1)) - (-d["with_logprob"].astype(np.float64).mean(1))
        assert float(gain.mean()) == pytest.approx(samples[d["doc_id"]]["retrieval_gain"], rel=1e-12, abs=1e-12)
        np.testing.assert_array_equal(d["gain"], gain)
    # longeval_lines_ppl: the answer tokens' NLL is the case's answer_ppl pair
    samples = _samples(summary, "longeval_lines_ppl")
    docs = list(export_files.iter_documents(export / "longeval_lines_ppl"))
    assert len(docs) == len(samples) > 0
    for d in docs:
        s = samples[d["doc_id"]]
        lp = d["logprob"].astype(np.float64)
        assert (-lp[d["answer"]].sum(), int(d["answer"].sum())) == pytest.approx(tuple(s["answer_ppl"]), rel=1e-12)
        assert d["response"][d["answer_start"] : d["answer_end"]].isdigit()


# ----------------------------------------------------------------------------------------------- the page's data


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.blocks, self._id = {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("type") == "application/json":
            self._id = a["id"]
            self.blocks[self._id] = ""

    def handle_data(self, data):
        if self._id:
            self.blocks[self._id] += data

    def handle_endtag(self, tag):
        self._id = None


def page_data(path):
    """The page's metadata and each document's arrays, decoded as the page's JavaScript does."""
    p = _Scripts()
    p.feed(Path(path).read_text(encoding="utf-8"))
    meta = json.loads(p.blocks["meta"])
    docs = []
    for k in range(len(meta["docs"])):
        payload = json.loads(p.blocks[f"doc-{k}"])
        raw = base64.b64decode(payload["data"])
        raw = gzip.decompress(raw) if payload["z"] else raw
        n, o, arrays = payload["n"], 0, {}
        for name, dt in (
            [("start", "<i4"), ("end", "<i4"), ("nll", "<f4"), ("lsd", "<f4"), ("lcl", "<f4")]
            + ([("nll_b", "<f4")] if meta["diff"] else [])
            + [("flags", "u1")]
        ):
            arrays[name] = np.frombuffer(raw, dtype=dt, count=n, offset=o)
            o += n * np.dtype(dt).itemsize
        assert o == len(raw)
        docs.append({"text": payload["text"], **arrays})
    return meta, docs


@pytest.mark.parametrize("compress", [False, True])
def test_page_embeds_the_export(demo_run, tmp_path, compress):
    info = viewer.build_page([demo_run["export"]], tmp_path / "page.html", compress=compress)
    assert info["compressed"] is compress
    meta, docs = page_data(tmp_path / "page.html")
    exported = list(export_files.iter_documents(demo_run["export"] / TASK))
    assert len(docs) == len(exported) == info["n_docs"]
    for d, e in zip(docs, exported):
        assert d["text"] == e["text"]
        np.testing.assert_array_equal(d["start"], e["char_start"])
        np.testing.assert_array_equal(d["end"], e["char_end"])
        for k in ("nll", "lsd", "lcl"):
            np.testing.assert_array_equal(d[k], e[k])
        np.testing.assert_array_equal(d["flags"] & 1, e["key"])
        np.testing.assert_array_equal((d["flags"] >> 1) & 1, e["greedy"])
    r = demo_run["results"]["results"][TASK]
    assert meta["corpus"]["a"]["longppl"] == pytest.approx(r["longppl,none"], rel=1e-12)
    assert meta["corpus"]["a"]["ppl"] == pytest.approx(r["ppl,none"], rel=1e-12)
    for entry, e in zip(meta["docs"], exported):
        assert entry["a"]["n_key"] == e["n_key"] and entry["a"]["n_tokens"] == len(e["token_id"])
        assert entry["a"]["longppl"] == pytest.approx(math.exp(e["key_nll_sum"] / e["n_key"]), rel=1e-12)


def test_page_is_self_contained(demo_run, tmp_path):
    viewer.build_page([demo_run["export"]], tmp_path / "page.html")
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    # no external resource of any kind (the documents' own text may mention URLs: it is data, not markup)
    markup = re.sub(r'<script type="application/json".*?</script>', "", page, flags=re.S)
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href)\s*=", markup, flags=re.I)
    assert "@import" not in markup and "url(" not in markup and "fetch(" not in markup
    assert "XMLHttpRequest" not in markup and "@font-face" not in markup


def test_diff_of_two_variants(variant_runs, tmp_path):
    a, b = variant_runs["long"], variant_runs["none"]
    info = viewer.build_page([a["export"], b["export"]], tmp_path / "diff.html")
    assert info["diff"]
    meta, docs = page_data(tmp_path / "diff.html")
    for d, ea, eb in zip(
        docs, export_files.iter_documents(a["export"] / TASK), export_files.iter_documents(b["export"] / TASK)
    ):
        np.testing.assert_array_equal(d["nll"], ea["nll"])
        np.testing.assert_array_equal(d["nll_b"], eb["nll"])
        np.testing.assert_array_equal((d["flags"] >> 2) & 1, eb["key"])
        np.testing.assert_array_equal(ea["key"], eb["key"])  # one evaluator: the same key tokens
    for side, run in (("a", a), ("b", b)):
        assert meta["corpus"][side]["longppl"] == pytest.approx(
            run["results"]["results"][TASK]["longppl,none"], rel=1e-12
        )
    # the long variant uses its context: lower LongPPL than the variant without the copy circuit
    assert meta["corpus"]["a"]["longppl"] < meta["corpus"]["b"]["longppl"]


def test_diff_refuses_other_documents_or_tokenizations(demo_run, tmp_path):
    other = tmp_path / "other" / TASK
    shutil.copytree(demo_run["export"] / TASK, other)
    f = other / "doc_00001.npz"
    d = export_files.load_document(f)
    np.savez(f, **{**d, "text_sha256": "0" * 64})
    with pytest.raises(viewer.ViewerError, match="not document 1 of the first export"):
        viewer.build_page([demo_run["export"], other], tmp_path / "x.html")
    np.savez(f, **{**d, "token_id": d["token_id"][::-1]})
    with pytest.raises(viewer.ViewerError, match="tokenized differently"):
        viewer.build_page([demo_run["export"], other], tmp_path / "x.html")
    (other / "doc_00001.npz").unlink()
    with pytest.raises(viewer.ViewerError, match="different documents"):
        viewer.build_page([demo_run["export"], other], tmp_path / "x.html")
    # an export of another view: its manifest declares none, and its columns lack the key-token arrays
    with pytest.raises(viewer.ViewerError, match="no key-token export .*retrieval_gain: declares no view"):
        viewer.build_page([demo_run["export"] / "retrieval_gain"], tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


def test_view_command(demo_run, tmp_path, capsys):
    assert cli.main(["view", str(demo_run["export"]), "-o", str(tmp_path / "p.html")]) == 0
    assert "documents" in capsys.readouterr().out and (tmp_path / "p.html").is_file()
    assert cli.main(["view", str(tmp_path / "nothing"), "-o", str(tmp_path / "q.html")]) == 2
    assert "nothing: no such folder" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- in a browser


def run_chromium(url, *args, timeout=180):
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=20000",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


class _Tokens(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tokens = self.keys = self.keys_b = 0
        self.coloured = {"c": 0, "d": 0}  # tokens with an LSD colour class (c*) / a change-in-NLL class (d*)
        self.body = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        cls = (a.get("class") or "").split()
        if tag == "span" and "t" in cls:
            self.tokens += 1
            self.keys += "k" in cls
            self.keys_b += "kb" in cls
            for c in cls:
                if c[:1] in self.coloured and c[1:].isdigit():
                    self.coloured[c[0]] += 1


def rendered(page, k, tmp_path, mode=None):
    proc = run_chromium(f"{Path(page).resolve().as_uri()}#doc={k}" + (f"&mode={mode}" if mode else ""), "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = _Tokens()
    p.feed(proc.stdout)
    assert "data-error" not in p.body, p.body
    return p


@needs_browser
def test_browser_renders_every_document_of_the_demo(demo_run, tmp_path):
    page = tmp_path / "page.html"
    viewer.build_page([demo_run["export"]], page, compress=True)  # the gzip path (DecompressionStream)
    for k, e in enumerate(export_files.iter_documents(demo_run["export"] / TASK)):
        dom = rendered(page, k, tmp_path)
        assert dom.body["data-doc"] == str(k)
        assert dom.tokens == len(e["token_id"]) == int(dom.body["data-tokens"])
        assert dom.keys == int(e["key"].sum()) == int(dom.body["data-keys"]) > 0
        assert dom.coloured == {"c": int((~np.isnan(e["lsd"])).sum()), "d": 0}  # shaded: every token with an LSD
    shot = tmp_path / "shot.png"
    proc = run_chromium(
        f"{page.resolve().as_uri()}#doc=0&key", "--hide-scrollbars", "--window-size=1280,800", f"--screenshot={shot}"
    )
    assert proc.returncode == 0 and shot.stat().st_size > 20_000


def opened(page, address):
    """The page's body attributes after it opened ``address`` in a 1280 x 800 window (where it scrolled to)."""
    proc = run_chromium(f"{Path(page).resolve().as_uri()}{address}", "--window-size=1280,800", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = _Tokens()
    p.feed(proc.stdout)
    assert "data-error" not in p.body, p.body
    return p.body


@needs_browser
def test_browser_opens_each_document_at_its_first_key_token(demo_run, tmp_path):
    page = tmp_path / "page.html"
    viewer.build_page([demo_run["export"]], page)
    k_tokens = export_files.read_manifest(demo_run["export"] / TASK)["settings"]["trunc_len"]
    first_key = [int(np.flatnonzero(e["key"])[0]) for e in export_files.iter_documents(demo_run["export"] / TASK)]
    assert min(first_key) >= k_tokens  # the first K tokens have no truncated context: a document's start shows none
    # the first screen of the page, of #doc=K and of #doc=K&key: the document's first key token, scrolled into view
    for address, k in (("", 0), ("#doc=0", 0), ("#doc=0&key", 0), ("#doc=1", 1), ("#doc=1&mode=lsd", 1)):
        body = opened(page, address)
        assert body["data-doc"] == str(k) and body["data-opened-at"] == "key", (address, body)
        assert body["data-shown-token"] == str(first_key[k]) and body["data-first-key-visible"] == "true", body
        assert int(body["data-scroll-top"]) > 0
    # another place named in the address: the start (where no key token is in view), or one token
    body = opened(page, "#doc=0&top")
    assert body["data-opened-at"] == "start" and body["data-scroll-top"] == "0"
    assert body["data-first-key-visible"] == "false"
    body = opened(page, f"#doc=0&tok={first_key[0] + 40}")
    assert body["data-opened-at"] == "token" and body["data-shown-token"] == str(first_key[0] + 40)


@needs_browser
def test_browser_renders_the_diff_of_two_variants(variant_runs, tmp_path):
    a, b = variant_runs["long"], variant_runs["none"]
    page = tmp_path / "diff.html"
    viewer.build_page([a["export"], b["export"]], page, compress=False)
    for k, (ea, eb) in enumerate(
        zip(export_files.iter_documents(a["export"] / TASK), export_files.iter_documents(b["export"] / TASK))
    ):
        dom = rendered(page, k, tmp_path)
        assert dom.tokens == len(ea["token_id"])
        assert dom.keys == int(ea["key"].sum()) and dom.keys_b == int((eb["key"] & ~ea["key"]).sum())
        has_delta = ~np.isnan(eb["nll"] - ea["nll"])
        assert dom.coloured == {"c": 0, "d": int(has_delta.sum())}
        only_key = rendered(page, k, tmp_path, mode="dnllkey")
        assert only_key.coloured == {"c": 0, "d": int((has_delta & (ea["key"] | eb["key"])).sum())} != dom.coloured
        by_lsd = rendered(page, k, tmp_path, mode="lsd")
        assert by_lsd.coloured == {"c": int((~np.isnan(ea["lsd"])).sum()), "d": 0}
    shot = tmp_path / "diff.png"
    proc = run_chromium(
        f"{page.resolve().as_uri()}#doc=0&key", "--hide-scrollbars", "--window-size=1280,800", f"--screenshot={shot}"
    )
    assert proc.returncode == 0 and shot.stat().st_size > 20_000
    if os.environ.get("LM_EVAL_LONGCTX_KEEP_SCREENSHOTS"):
        for p in (shot,):
            shutil.copy(p, Path(os.environ["LM_EVAL_LONGCTX_KEEP_SCREENSHOTS"]) / p.name)
