"""Shared files that are broken or hostile: token exports and span folders shown in the viewer page, and results that
cannot be saved. Exports are built with numpy in the format of data/export_files.py (tests/report_fixtures.py), so
these tests run fast; the page is opened in headless Chromium where one is installed, to check that no payload runs."""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import cli
from lm_eval_longctx.data import export_files
from tests.report_fixtures import write_export

TASK = "longppl_govreport"
PAYLOAD = "<img src=x onerror=\"document.title='PWNED'\">"
SCRIPT_PAYLOAD = "</script><script>document.title='PWNED'</script>"
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def view(tmp_path, *exports, out="page.html"):
    return cli.main(["view", *map(str, exports), "-o", str(tmp_path / out)])


def test_a_sound_export_gives_a_page(tmp_path):
    assert view(tmp_path, write_export(tmp_path / "e")) == 0
    assert (tmp_path / "page.html").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("key", ["alpha", "beta", "trunc_len"])
def test_manifest_settings_that_are_not_numbers_are_refused(tmp_path, capsys, key):
    settings = {"alpha": 2.0, "beta": -2.0, "trunc_len": 4, key: PAYLOAD}
    assert view(tmp_path, write_export(tmp_path / "e", settings)) == 2
    err = capsys.readouterr().err
    assert f"settings.{key}" in err and "manifest.json" in err
    assert not (tmp_path / "page.html").exists()


def _assert_no_raw_payload(page: str) -> None:
    # the payload may appear only as escaped data: never as a tag the parser would build
    assert "<img src=x" not in page and "<script>document.title" not in page


def test_strings_from_the_export_are_escaped_in_the_page(tmp_path):
    text = f"{PAYLOAD} {SCRIPT_PAYLOAD}\n" + "words " * 20
    settings = {"alpha": 2, "beta": -2, "trunc_len": 4, "key_source": PAYLOAD, "evaluator": SCRIPT_PAYLOAD}
    root = write_export(tmp_path / f"run{PAYLOAD[:4]}", settings, doc_text=text)
    assert cli.main(["view", str(root), "-o", str(tmp_path / "page.html"), "--title", SCRIPT_PAYLOAD]) == 0
    _assert_no_raw_payload((tmp_path / "page.html").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("truncated", "not a readable export document"),
        ("missing_array", "array 'lsd' is missing"),
        ("text_not_str", "'text' is a"),
        ("short_nll", "array 'nll' has"),
        ("offsets_outside", "character offsets"),
        ("two_dimensional", "array 'key' is a 2-dimensional"),
        ("pickle", "holds Python objects (a pickle)"),
    ],
)
def test_corrupt_documents_are_one_message_naming_the_file(tmp_path, capsys, damage, expected):
    root = tmp_path / "e"
    n = 4
    over = {
        "missing_array": {},
        "text_not_str": {"text": np.arange(3)},
        "short_nll": {"nll": np.zeros(n - 1, np.float32)},
        "offsets_outside": {"char_end": np.array([4, 9, 14, 10_000])},
        "two_dimensional": {"key": np.zeros((n, 2), bool)},
        "pickle": {"text": np.array([{"a": 1}], dtype=object)},
        "truncated": {},
    }[damage]
    write_export(root, None, "abcd efgh ijkl mnop qrst", **over)
    doc = root / TASK / "doc_00000.npz"
    if damage == "truncated":
        doc.write_bytes(doc.read_bytes()[:200])
    if damage == "missing_array":
        with np.load(doc) as z:
            kept = {k: z[k] for k in z.files if k != "lsd"}
        np.savez_compressed(doc, **kept)
    assert view(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert expected in err and "doc_00000.npz" in err, err
    assert "Traceback" not in err
    assert list(tmp_path.glob("*page.html*")) == []  # nothing left behind, not even the .tmp


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", "\xff\xfe"])
def test_a_manifest_that_is_not_an_object_is_named(tmp_path, capsys, content):
    root = write_export(tmp_path / "e")
    (root / TASK / export_files.MANIFEST).write_bytes(content.encode("latin-1"))
    assert view(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert str(root / TASK / export_files.MANIFEST) in err and "Traceback" not in err


def test_unwritable_page_is_one_message(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    rc = cli.main(["view", str(write_export(tmp_path / "e")), "-o", str(tmp_path / "file" / "page.html")])
    assert rc == 2 and "cannot write" in capsys.readouterr().err


# ------------------------------------------------------------------ the page in a browser


def _dom_and_title(page: Path, fragment: str = "") -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=3000",
                "--dump-dom",
                page.resolve().as_uri() + fragment,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_no_payload_runs_in_the_browser(tmp_path):
    text = f"{PAYLOAD} {SCRIPT_PAYLOAD}\n" + "words " * 20
    settings = {"alpha": 2, "beta": -2, "trunc_len": 4, "key_source": PAYLOAD, "evaluator": SCRIPT_PAYLOAD}
    root = write_export(tmp_path / "run", settings, doc_text=text)
    page = tmp_path / "page.html"
    assert cli.main(["view", str(root), str(root), "-o", str(page), "--title", PAYLOAD]) == 0
    dom = _dom_and_title(page, "#doc=0&mode=lsd")
    assert "<title>PWNED</title>" not in dom  # what each payload does when it runs
    assert 'data-doc="0"' in dom and 'data-tokens="' in dom  # the document was drawn
    assert "data-error" not in dom
    # the texts are shown, as text
    assert "&lt;img src=x" in dom


def test_viewer_refuses_a_span_folder_alpha_that_is_not_a_number(tmp_path):
    """A span folder's key_spans.json is data: alpha holding HTML is refused by the task before it reaches an
    export or a page (the task parses each manifest value with the setting's own kind)."""
    from lm_eval_longctx.settings import SettingsError
    from lm_eval_longctx.tasks import longppl

    task = longppl.LongPPLTask.__new__(longppl.LongPPLTask)
    task.settings = longppl.resolve_settings({"key_spans_dir": str(tmp_path)})
    with pytest.raises(SettingsError, match=r"key_spans.json: setting 'alpha'"):
        task._settings_from_manifest({"alpha": PAYLOAD, "trunc_len": 4})
    task._settings_from_manifest({"alpha": 1.5, "trunc_len": 4})
    assert task.settings["alpha"] == 1.5


# ------------------------------------------------------------------ results that cannot be saved


@pytest.mark.integration
@pytest.mark.parametrize("output", ["folder", "file.json"])
def test_results_that_cannot_be_written_fail_the_run(tmp_path, output):
    """lm-eval only logs a warning when --output_path cannot be written; a CI job would then gate on nothing."""
    from lm_eval.loggers import EvaluationTracker

    from lm_eval_longctx.harness import contacts, saving

    contacts.install()
    (tmp_path / "a-file").write_text("not a folder")
    tracker = EvaluationTracker(output_path=str(tmp_path / "a-file" / output))
    tracker.general_config_tracker.model_name_sanitized = "tiny"
    with pytest.raises(saving.ResultsNotSavedError, match="--output_path .*a-file.* could not be written"):
        tracker.save_results_aggregated(results={"results": {}}, samples=None)

    good = EvaluationTracker(output_path=str(tmp_path / "out" / output))
    good.general_config_tracker.model_name_sanitized = "tiny"
    good.save_results_aggregated(results={"results": {}}, samples=None)
    good.save_results_samples(
        task_name="t", samples=[{"arguments": [], "resps": [], "filtered_resps": [], "target": 0}]
    )
    assert len(list((tmp_path / "out").rglob("*.json"))) == 1 and len(list((tmp_path / "out").rglob("*.jsonl"))) == 1
    # the samples of a run whose folder became unwritable after the results were saved
    (tmp_path / "out").rename(tmp_path / "moved")
    (tmp_path / "out").write_text("now a file")
    with pytest.raises(saving.ResultsNotSavedError, match="samples of t could not be written"):
        good.save_results_samples(
            task_name="t", samples=[{"arguments": [], "resps": [], "filtered_resps": [], "target": 0}]
        )


def test_samples_lines_end_at_newline_only(tmp_path):
    """lm-eval writes samples with ensure_ascii=False: a document's text may hold U+2028, U+2029 or U+0085."""
    from lm_eval_longctx.report import run_samples

    rows = [
        {"doc_id": k, "doc_hash": f"h{k}", "metrics": ["ppl"], "ppl": [1.0 + k, 3], "doc": {"text": f"a{sep}b"}}
        for k, sep in enumerate(["\u2028", "\u2029", "\u0085"])
    ]
    path = tmp_path / "samples_t_x.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    samples = run_samples.read_samples(path)
    assert samples.values("ppl") == {0: [1.0, 3], 1: [2.0, 3], 2: [3.0, 3]}


def test_predict_only_placeholder_is_not_a_metric():
    """--predict_only results hold lm-eval's `bypass` 999 for every task: no tool may read it as a measurement."""
    from lm_eval_longctx.report import results

    data = {
        "results": {"longppl_govreport": {"bypass,none": 999, "bypass_stderr,none": "N/A", "alias": "x"}},
        "higher_is_better": {"longppl_govreport": {"bypass": True}},
    }
    assert results.metrics_of(data, "f.json") == {}
