"""The long-context report card (``report/card/``, ``lm-eval-longctx report``) and the ``--html`` pages of
gate and leaderboard, on results files built by hand in lm-eval's shape (``tests/report_fixtures.py``).

Every metric value the page shows carries data-run / data-metric / data-value; the tests read them back with
html.parser and compare them exactly with the numbers in the results files."""

import hashlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx.cli import main
from lm_eval_longctx.data import export_files
from lm_eval_longctx.report import viewer
from lm_eval_longctx.report.card.page import fmt
from tests.report_fixtures import (
    LONGCTX_REPORT,
    SUITE_SETTINGS,
    PageNumbers,
    check_numbers,
    corpus,
    read_page,
    suite_results_json,
    task_metrics,
    write_audit,
    write_checkpoint,
    write_results,
    write_run,
)

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
PAYLOAD = "<img src=x onerror=\"document.title='PWNED'\">"
SCRIPT_PAYLOAD = "</script><script>document.title='PWNED'</script>"
QUOTE_PAYLOAD = '"><img src=x onerror="document.title=\'PWNED\'">'

# ----------------------------------------------------------------------------------------------- one model


def test_one_model_page_numbers_settings_and_pictures(tmp_path):
    folder = tmp_path / "out" / "org__model"
    write_results(folder, suite_results_json("org/model", skipped="4096: over the model's maximum length"))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out)]) == 0
    page = read_page(out)
    n = check_numbers(page, {"org/model": folder})
    # every metric of every task is on the page (headlines once more, at a glance and in the sections)
    n_metrics = sum(len(m) for m in task_metrics(0.0, 0).values())
    assert n >= n_metrics
    marked = {a["data-metric"] for a, _ in page.numbers}
    assert len(marked) == n_metrics
    text = out.read_text(encoding="utf-8")
    for task in SUITE_SETTINGS:
        assert f"Settings of {task}" in text
    # the CI of a headline, in the value's format
    longppl = task_metrics(0.0, 0)["longppl_govreport"]["longppl"]
    # a perplexity's interval on the log scale: exp(ln v ± 1.96 se / v), above 0 and skewed upwards
    half = 1.96 * longppl[1] / longppl[0]
    lo, hi = longppl[0] * math.exp(-half), longppl[0] * math.exp(half)
    assert f"[{fmt(lo)}, {fmt(hi)}]" in text
    assert "<code>512</code>" in text and "trunc_len" in text  # K of longppl_govreport
    assert "skipped lengths: 4096: over the model&#x27;s maximum length" in text
    # three pictures (forgetting curve, gain map, LongEval), inline; nothing fetched
    assert text.count('src="data:image/png;base64,') == 3
    srcs = [a.get("src") or a.get("href") for _, a in page.tags if a.get("src") or a.get("href")]
    assert all(s.startswith("data:image/png;base64,") for s in srcs), srcs
    assert not any(t == "script" for t, _ in page.tags)
    assert "Settings differ" not in text and "Across checkpoints" not in text


# ----------------------------------------------------------------------------------------------- checkpoints


def three_checkpoints(root: Path) -> dict:
    """Three checkpoints of one training run, each: the suite's other tasks in one results file, longppl_govreport
    with its samples file (--log_samples) in a later one, so that the gate pairs its documents."""
    folders = {}
    for k, step in enumerate((2400, 1200, 3600)):  # given out of order: the page sorts by step
        model = f"org/run/checkpoint-{step}"
        folder = root / f"ckpt{step}"
        tasks = [t for t in SUITE_SETTINGS if t != "longppl_govreport"]
        write_results(folder, suite_results_json(model, shift=0.1 * k, seed=k, tasks=tasks))
        write_run(folder, corpus(n_docs=30, shift=0.3 * k), f"2026-01-0{k + 2}T00-00-00.000001", model=model)
        folders[model] = folder
    return folders


def test_three_checkpoints_trends_and_gate(tmp_path):
    folders = three_checkpoints(tmp_path)
    out = tmp_path / "card.html"
    assert main(["report", *map(str, folders.values()), "-o", str(out)]) == 0
    page = read_page(out)
    check_numbers(page, folders)
    text = out.read_text(encoding="utf-8")
    assert "Across checkpoints" in text and "steps 1200, 2400, 3600" in text
    runs = [a["data-run"] for a, _ in page.numbers]
    first = [runs.index(f"org/run/checkpoint-{s}") for s in (1200, 2400, 3600)]
    assert first == sorted(first)  # columns in step order
    # the gate between consecutive checkpoints: paired on longppl (30 documents each), verdict shown
    assert "1200 → 2400" in text and "2400 → 3600" in text
    assert "(30 docs, token_weighted_perplexity)" in text
    assert "FAIL: " in text  # the corpus shifts every token's NLL up by 0.3 nats a checkpoint: longppl regresses
    # one trend chart per headline metric present in the runs
    n_headlines = sum(len(d["headlines"]) for d in LONGCTX_REPORT.values())
    n_trends = text.count('against the training step"')
    assert 10 <= n_trends <= n_headlines


def test_labels_make_a_series_and_must_match_the_runs(tmp_path, capsys):
    folders = [tmp_path / "a", tmp_path / "b"]
    write_results(folders[0], suite_results_json("org/x", tasks=["retrieval_gain"]))
    write_results(folders[1], suite_results_json("org/y", shift=0.2, tasks=["retrieval_gain"]))
    out = tmp_path / "card.html"
    argv = ["report", *map(str, folders), "-o", str(out)]
    assert main([*argv, "--label", "step200", "--label", "step100"]) == 0
    page = read_page(out)
    check_numbers(page, {"step200": folders[0], "step100": folders[1]})
    assert "Across checkpoints" in out.read_text(encoding="utf-8")
    assert main([*argv, "--label", "only-one"]) == 2
    err = capsys.readouterr().err
    assert "1 --label for 2 runs" in err and str(folders[0]) in err


# ----------------------------------------------------------------------------------------------- settings differ


def test_different_settings_are_named_in_a_visible_box(tmp_path):
    other = {**SUITE_SETTINGS["longppl_govreport"], "trunc_len": 4096}
    a = tmp_path / "a" / "org__ckpt"
    b = tmp_path / "b" / "org__ckpt"
    write_results(a, suite_results_json("org/ckpt/step100"))
    write_results(b, suite_results_json("org/ckpt/step200", shift=0.1, settings={"longppl_govreport": other}))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out)]) == 0
    check_numbers(read_page(out), {"org/ckpt/step100": a, "org/ckpt/step200": b})
    text = out.read_text(encoding="utf-8")
    box = text.split('id="settings-differ"', 1)[1].split("</div>", 1)[0]
    assert "Settings differ" in box and "longppl_govreport" in box
    assert "<code>trunc_len</code>: <code>512</code> → <code>4096</code>" in box
    # the gate refuses to compare them, and the page says so
    assert "not compared: settings that change what the metrics mean" in text and "trunc_len" in text
    # the differing row is highlighted in the task's settings table
    assert "<tr class=differ><th><code>trunc_len</code></th>" in text


def test_several_models_in_one_output_folder_are_several_runs(tmp_path):
    a, b = tmp_path / "out" / "org__a", tmp_path / "out" / "org__b"
    write_results(a, suite_results_json("org/a", tasks=["forgetting_curve", "retrieval_gain_map"]))
    write_results(b, suite_results_json("org/b", shift=0.5, seed=3, tasks=["forgetting_curve", "retrieval_gain_map"]))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out)]) == 0
    check_numbers(read_page(out), {"org/a": a, "org/b": b})
    text = out.read_text(encoding="utf-8")
    assert text.count('src="data:image/png;base64,') == 2  # both runs on one forgetting curve, one map picture
    assert "Same settings in every run" in text


def test_unusable_inputs_are_one_message_and_exit_2(tmp_path, capsys):
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "nothing"), "-o", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results_x.json").write_text("{not json")
    assert main(["report", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "malformed JSON" in err and "results_x.json" in err and "Traceback" not in err
    mixed = tmp_path / "mixed"
    write_results(mixed, suite_results_json("org/a", tasks=["retrieval_gain"]), "2026-01-01T00-00-00.1")
    write_results(mixed, suite_results_json("org/b", tasks=["retrieval_gain"]), "2026-01-02T00-00-00.1")
    assert main(["report", str(mixed), "-o", str(out)]) == 2
    assert "2 different models in one folder" in capsys.readouterr().err
    good = tmp_path / "good"
    write_results(good, suite_results_json("org/a", tasks=["retrieval_gain"]))
    assert main(["report", str(good), "-o", str(out), "--export", str(tmp_path / "no-export")]) == 2
    assert "--export" in capsys.readouterr().err and not out.exists()
    (tmp_path / "file").write_text("x")
    assert main(["report", str(good), "-o", str(tmp_path / "file" / "card.html")]) == 2
    assert "cannot" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- viewer, escaping


def write_export(root: Path, text: str, evaluator: str = "self") -> Path:
    """A one-document longppl_govreport per-token export (the format of data/export_files.py)."""
    folder = root / "longppl_govreport"
    folder.mkdir(parents=True)
    settings = {"alpha": 2.0, "beta": -2.0, "trunc_len": 4, "key_source": "evaluator", "evaluator": evaluator}
    manifest = {"format": export_files.FORMAT, "task": "longppl_govreport", "settings": settings}
    (folder / export_files.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    words = [(m, m + 4) for m in range(0, len(text) - 4, 5)]
    n = len(words)
    lp = np.linspace(-3, -0.5, n).astype(np.float32)
    lp[0] = np.nan
    np.savez_compressed(
        folder / "doc_00000.npz",
        doc_id=0,
        text=text,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
        token_id=np.arange(n, dtype=np.int64),
        char_start=np.array([s for s, _ in words], np.int64),
        char_end=np.array([e for _, e in words], np.int64),
        logprob=lp,
        nll=-lp,
        greedy=np.arange(n) % 2 == 1,
        key=np.arange(n) % 3 == 1,
        lsd=np.linspace(-1, 3, n).astype(np.float32),
        lcl=np.full(n, -1.0, np.float32),
    )
    return root


def hostile_card(tmp_path) -> tuple[Path, str, dict]:
    """A page whose model name, two settings, the skipped_lengths note and an exported document carry payloads."""
    model = f"org/{PAYLOAD}{SCRIPT_PAYLOAD}"
    export = write_export(tmp_path / "tokens", f"{QUOTE_PAYLOAD} {SCRIPT_PAYLOAD}\n" + "words " * 30, PAYLOAD)
    settings = {
        "longppl_govreport": {**SUITE_SETTINGS["longppl_govreport"], "evaluator": QUOTE_PAYLOAD + SCRIPT_PAYLOAD},
        "forgetting_curve": {**SUITE_SETTINGS["forgetting_curve"], "tokenizer": PAYLOAD},
    }
    folder = tmp_path / "out" / "hostile"
    write_results(folder, suite_results_json(model, settings=settings, skipped=SCRIPT_PAYLOAD))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out), "--export", str(export)]) == 0
    return out, model, {model: folder}


def test_payloads_are_escaped_in_the_page(tmp_path):
    out, model, folders = hostile_card(tmp_path)
    page = read_page(out)
    check_numbers(page, folders)
    assert page.title == f"Long-context report card: {model}"  # shown as text, whole
    tags = [t for t, _ in page.tags]
    assert "script" not in tags and "img" in tags  # the only images: the pictures, as data URIs
    for tag, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        if tag == "img":
            assert attrs["src"].startswith("data:image/png;base64,")
    frames = [a for t, a in page.tags if t == "iframe"]
    assert len(frames) == 1 and frames[0]["sandbox"] == "allow-scripts"
    # the attribute holds the viewer's page exactly: unescaped by the parser, it is what the viewer writes
    alone = tmp_path / "viewer.html"
    viewer.build_page([tmp_path / "tokens"], alone, title=f"Key tokens of the export {tmp_path / 'tokens'}")
    assert frames[0]["srcdoc"] == alone.read_text(encoding="utf-8")


def dump_dom(page: Path) -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_no_payload_runs_in_the_browser(tmp_path):
    out, model, _ = hostile_card(tmp_path)
    dom = dump_dom(out)
    p = PageNumbers()
    p.feed(dom)
    assert p.title == f"Long-context report card: {model}"  # a payload that ran would have set it to PWNED
    assert "PWNED</title>" not in dom
    assert "&lt;img src=x onerror=" in dom  # the payloads are shown, as text


# ----------------------------------------------------------------------------------------------- gate / leaderboard


def test_gate_and_leaderboard_html_pages(tmp_path, capsys):
    folders = three_checkpoints(tmp_path)
    run, base = folders["org/run/checkpoint-2400"], folders["org/run/checkpoint-1200"]
    gate_html = tmp_path / "gate.html"
    rc = main(["gate", str(run), "--baseline", str(base), "--html", str(gate_html)])
    assert rc in (0, 1) and gate_html.is_file()
    page = read_page(gate_html)
    assert page.title == "Regression gate"
    check_numbers(page, {"org/run/checkpoint-2400": run, "org/run/checkpoint-1200": base})
    text = gate_html.read_text(encoding="utf-8")
    assert ("FAIL: " in text) == (rc == 1) and "(30 docs, token_weighted_perplexity)" in text
    board_html = tmp_path / "board.html"
    assert main(["leaderboard", *map(str, folders.values()), "--all-metrics", "--html", str(board_html)]) == 0
    page = read_page(board_html)
    assert page.title == "Leaderboard"
    assert check_numbers(page, folders) == sum(len(m) for m in task_metrics(0, 0).values()) * 3
    (tmp_path / "file").write_text("x")
    assert main(["leaderboard", str(run), "--html", str(tmp_path / "file" / "x.html")]) == 2
    assert "x.html" in capsys.readouterr().err


def test_a_length_that_reaches_the_longest_tested_reads_as_a_bound_on_the_card(tmp_path):
    data = suite_results_json("org/m", tasks=["retrieval_gain_map", "forgetting_curve"])
    data["results"]["forgetting_curve"]["fine_memory_length,none"] = 64.0  # of copy lengths 16, 64, 256
    write_results(tmp_path / "m", data)
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "m"), "-o", str(out)]) == 0
    page = read_page(out)
    check_numbers(page, {"org/m": tmp_path / "m"})
    shown = {
        (a["data-metric"], text.strip().split(" [")[0]) for a, text in page.numbers if "length" in a["data-metric"]
    }
    assert ("retrieval_gain_map/effective_length", "≥ 2048") in shown
    assert ("forgetting_curve/coarse_memory_length", "≥ 256") in shown
    assert ("forgetting_curve/fine_memory_length", "64") in shown


def test_an_audit_joins_the_run_of_its_checkpoint_on_the_card(tmp_path, monkeypatch, capsys):
    folder = write_checkpoint(tmp_path / "models" / "SmolLM2-135M-Instruct")
    monkeypatch.chdir(tmp_path)
    write_results(tmp_path / "runs" / "a", suite_results_json("models/SmolLM2-135M-Instruct", tasks=["retrieval_gain"]))
    write_results(tmp_path / "runs" / "b", suite_results_json("org/unaudited", tasks=["retrieval_gain"]))
    write_audit(tmp_path / "audit", str(folder), effective=16384)  # the absolute path; 16384: the longest tested
    write_audit(tmp_path / "lone", "org/never-run")
    write_audit(tmp_path / "hostile", f"org/{PAYLOAD}")
    argv = [
        "report",
        "runs/a",
        "runs/b",
        "--audit",
        "audit",
        "--audit",
        "lone",
        "--audit",
        "hostile",
        "-o",
        "card.html",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    text = (tmp_path / "card.html").read_text(encoding="utf-8")
    assert "matches no run given" in err and "&lt;img src=x onerror=" in text  # named, as text
    assert not any(k.startswith("on") for _, attrs in read_page(tmp_path / "card.html").tags for k in attrs)
    assert str(folder) not in text  # one model on the page, as its run names it
    assert "<td><code>models/SmolLM2-135M-Instruct</code></td>" in text and "≥ 16384 [16384, 16384]" in text
    assert "No audit of org/unaudited (org/unaudited) was given." in text
    lone = "--audit lone/audit.json: its model org/never-run matches no run given"
    assert lone in text and lone in err


# ----------------------------------------------------------------------------------------------- light and quick


BUILD_TEN = """
import json, sys, time
from pathlib import Path
root = Path(sys.argv[1])
t0 = time.perf_counter()
from lm_eval_longctx.report.card.report import build_report_card
info = build_report_card(sorted(root.iterdir()), root.parent / "card.html")
print(json.dumps({"seconds": time.perf_counter() - t0, "runs": len(info["runs"]),
                  "checkpoints": info["checkpoints"],
                  "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "lm_eval"))}))
"""


@pytest.mark.integration
def test_ten_checkpoints_build_quickly_without_torch(tmp_path):
    root = tmp_path / "runs"
    for k in range(10):
        write_results(root / f"c{k}", suite_results_json(f"org/run/step{(k + 1) * 100}", shift=0.05 * k, seed=k))
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_TEN, str(root)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["heavy"] == [] and res["runs"] == 10 and res["checkpoints"]
    assert res["seconds"] < 60, res


# ----------------------------------------------------------------------------------------------- leaderboard


def test_the_leaderboard_shows_each_tasks_headlines_unless_asked_for_every_metric(tmp_path):
    from lm_eval_longctx.report.leaderboard import build_leaderboard
    from lm_eval_longctx.tasks import base

    folders = three_checkpoints(tmp_path)
    default = build_leaderboard(list(folders.values()))
    every = build_leaderboard(list(folders.values()), all_metrics=True)
    declared = {
        f"{task}/{m}"
        for task, cls in base.suite_tasks().items()
        if cls.REPORT is not None
        for m, _ in cls.REPORT.headlines
    }
    assert default.metrics and set(default.metrics) <= declared
    assert set(default.metrics) < set(every.metrics) and len(every.metrics) == sum(
        map(len, task_metrics(0, 0).values())
    )
