"""The offline demo (``demo/run.py``, ``lm-eval-longctx demo``): the budgets fit the embedded corpus and their
metadata every task, the target check, and the whole pipeline on the reduced "ci" budget through lm-eval's own CLI
entry point."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx import cli
from lm_eval_longctx.data import documents, embedded_corpus
from lm_eval_longctx.demo import run
from lm_eval_longctx.tasks import base

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


def test_full_budget_documents_are_long_enough_for_longppl_with_the_demo_tokenizer():
    """Every full-budget document holds >= 16384 tokens of the demo model (LongPPL's GovReport selection
    keeps documents of >= 16384 tokens; retrieval gain's default reads the first 8192)."""
    from transformers import AutoTokenizer

    from lm_eval_longctx.demo.model import packaged_model_dir

    if not (Path(packaged_model_dir()) / "tokenizer.json").is_file():
        pytest.skip("the packaged demo model is not built")
    tok = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    texts = embedded_corpus.embedded_documents(run.DEMO_BUDGETS["full"]["chars_per_doc"])
    counts = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    assert len(counts) >= run.DEMO_BUDGETS["full"]["metadata"]["num_docs"]
    assert min(counts) >= 16384, counts


def test_every_budget_fits_the_embedded_corpus():
    for name, cfg in run.DEMO_BUDGETS.items():
        texts = embedded_corpus.embedded_documents(cfg["chars_per_doc"])
        assert len(texts) >= cfg["metadata"]["num_docs"], name


# ------------------------------------------------------------------ budget metadata vs the tasks


def _task_settings_keys():
    from lm_eval_longctx.tasks import forgetting_curve, longeval, longppl, retrieval_gain, retrieval_gain_map

    return {
        "longppl_govreport": set(longppl.DEFAULTS),
        "forgetting_curve": set(forgetting_curve.DEFAULTS),
        "retrieval_gain": set(retrieval_gain.DEFAULTS),
        "retrieval_gain_map": set(retrieval_gain_map.DEFAULTS),
        "longeval_lines": set(longeval.DEFAULTS),
    }


# keys more than one task reads, and mean the same thing in each (one corpus, one seed, ...)
SHARED_OK = {"data_files", "num_docs", "seed", "chunk_size", "allow_beyond_max_length"}


@pytest.mark.parametrize("budget", sorted(run.DEMO_BUDGETS))
def test_budget_metadata_keys_are_read_and_never_clash(budget, tmp_path):
    """--metadata goes to every task: each key must be some task's setting (no typo silently ignored),
    and a key read by several tasks must be one that means the same for all of them."""
    keys = _task_settings_keys()
    md = run.budget_metadata(budget, tmp_path / "corpus.jsonl")
    for key in md:
        readers = [t for t, ks in keys.items() if key in ks]
        assert readers, f"{key!r} is read by no task"
        if len(readers) > 1:
            assert key in SHARED_OK, f"{key!r} is read by {readers}"


@pytest.mark.parametrize("budget", sorted(run.DEMO_BUDGETS))
def test_budget_metadata_resolves_in_every_task(budget, tmp_path):
    from lm_eval_longctx.tasks import forgetting_curve, longeval, longppl, retrieval_gain, retrieval_gain_map

    md = run.budget_metadata(budget, tmp_path / "corpus.jsonl")
    s = longppl.resolve_settings(md)
    assert (s["key_source"], s["trunc_len"], s["data_files"]) == ("self", md["trunc_len"], md["data_files"])
    s = forgetting_curve.resolve_settings(md)
    assert s["lengths"] == md["lengths"] and s["data_files"] == md["data_files"] and s["spacing"] == "geometric"
    assert retrieval_gain.resolve_settings(md)["doc_tokens"] == md["doc_tokens"]
    s = retrieval_gain_map.resolve_settings(md)
    assert s["context_lengths"] == md["context_lengths"] and s["depths"] == md["depths"]
    assert longeval.resolve_settings(md)["num_lines"] == md["num_lines"]


def test_budget_metadata_rejects_unknown_budget(tmp_path):
    with pytest.raises(run.DemoError, match="unknown budget"):
        run.budget_metadata("huge", tmp_path / "c.jsonl")


# ------------------------------------------------------------------ the tasks, from the registry


def test_the_demo_runs_every_task_of_the_registry(tmp_path):
    argv = run.harness_argv(tmp_path, {}, tmp_path / "results", 4)
    assert argv[argv.index("--tasks") + 1] == ",".join(base.suite_run_names())


def test_importing_the_demo_run_loads_no_harness():
    """The task names are read when asked for: `lm-eval-longctx --help` builds the demo's options from this
    module, and must not import lm-eval."""
    code = "import sys, lm_eval_longctx.demo.run; print('lm_eval' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# ------------------------------------------------------------------ targets


def _metrics(copy, lm, gain, longppl, ppl):
    fc = {}
    for i, length in enumerate((16, 32, 64, 128)):
        fc[f"copy_acc@{length:05d}"] = {"value": copy[i], "stderr": 0.0}
        fc[f"lm_acc@{length:05d}"] = {"value": lm[i], "stderr": 0.0}
    return {
        "forgetting_curve": fc,
        "retrieval_gain": {"retrieval_gain": {"value": gain, "stderr": 0.1}},
        "longppl_govreport": {"longppl": {"value": longppl, "stderr": 1.0}, "ppl": {"value": ppl, "stderr": 1.0}},
    }


def test_check_targets_pass_and_fail():
    ok = run.check_targets(_metrics([0.9, 0.8, 0.7, 0.0], [0.2, 0.2, 0.2, 0.0], 2.5, 3.0, 20.0), 3, 0.30)
    assert [t["name"] for t in ok] == ["copy_gap", "retrieval_gain", "longppl_below_ppl"]
    assert all(t["passed"] for t in ok)
    assert ok[0]["value"] == pytest.approx(0.6)  # mean of 0.7, 0.6, 0.5: the 4th length is not counted
    bad = run.check_targets(_metrics([0.3, 0.3, 0.3, 0.9], [0.2, 0.2, 0.2, 0.0], -0.1, 30.0, 20.0), 3, 0.30)
    assert not any(t["passed"] for t in bad)


def test_check_targets_report_missing_and_nan_without_raising():
    res = run.check_targets({}, 3, 0.3)
    assert not any(t["passed"] for t in res) and all(t.get("note") for t in res)
    res = run.check_targets(_metrics([0.9] * 4, [0.1] * 4, float("nan"), float("nan"), 2.0), 3, 0.3)
    assert [t["passed"] for t in res] == [True, False, False]


def test_summarize_flags_non_finite_and_missing_tasks():
    results = {
        "results": {
            "longppl_govreport": {
                "alias": "longppl_govreport",
                "longppl,none": float("nan"),
                "longppl_stderr,none": "N/A",
                "ppl,none": 3.0,
                "ppl_stderr,none": 0.1,
            },
            "longeval_lines": {"alias": "longeval_lines"},
        }
    }
    s = run.summarize(results, "ci")
    assert s["non_finite"] == ["longppl_govreport/longppl"]
    assert "longeval_lines" not in s["metrics"]  # a group's row holds only its alias
    assert set(s["missing_tasks"]) == set(base.suite_task_names()) - {"longppl_govreport"}
    assert s["targets_passed"] is False


# ------------------------------------------------------------------ model folder errors


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(run.DemoError, match="config.json"):
        run.resolve_model_dir(tmp_path)
    rc = cli.main(["demo", "--out", str(tmp_path / "out"), "--model", str(tmp_path), "--budget", "ci"])
    assert rc == 2 and "config.json" in capsys.readouterr().err


def test_python_m_demo_help():
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval_longctx", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0 and "--budget" in proc.stdout and "--check" in proc.stdout


# ------------------------------------------------------------------ the pipeline on the ci budget


def _packaged_model():
    try:
        from lm_eval_longctx.demo.model import packaged_model_dir
    except ImportError:
        return None
    path = Path(packaged_model_dir())
    return path if (path / "config.json").is_file() else None


@pytest.fixture(scope="module")
def demo_model_dir(tmp_path_factory):
    """(model folder, extra --metadata): the packaged demo model when it exists, else a random one.

    A random model is never confident, so with the default beta = -2 it has no key tokens and
    LongPPL is undefined; beta = -20 (as the offline random demo) keeps every metric finite."""
    packaged = _packaged_model()
    if packaged is not None:
        return str(packaged), {}, True
    from lm_eval_longctx.demo.offline import build_demo

    built = build_demo(tmp_path_factory.mktemp("demo_model"), n_docs=2, chars_per_doc=20_000)
    return built["model"], {"beta": -20.0}, False


@pytest.fixture(scope="module")
def ci_run(demo_model_dir, tmp_path_factory):
    """One ci-budget demo through the command line (`lm-eval-longctx demo ... --check`)."""
    model, extra, packaged = demo_model_dir
    out = tmp_path_factory.mktemp("demo_out")
    argv = ["demo", "--out", str(out), "--model", model, "--budget", "ci", "--check"]
    if extra:
        argv += ["--metadata", json.dumps(extra)]
    rc = cli.main(argv)
    summary = json.loads((out / run.SUMMARY_FILE).read_text(encoding="utf-8"))
    return {"rc": rc, "out": out, "summary": summary, "packaged": packaged}


def test_ci_demo_writes_every_output(ci_run):
    files = ci_run["summary"]["files"]
    results_file = Path(files["results_json"])
    assert results_file.is_file() and results_file.parent.parent == ci_run["out"] / "results"
    assert Path(files["forgetting_curve_png"]).is_file()
    assert Path(files["forgetting_curve_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(files["retrieval_gain_map_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["summary"] == str(ci_run["out"] / run.SUMMARY_FILE)
    sample_tasks = {Path(p).name.split("_2")[0][len("samples_") :] for p in files["samples"]}
    assert sample_tasks == set(base.suite_task_names())
    assert all(Path(p).stat().st_size > 0 for p in files["samples"])
    assert Path(files["corpus"]).is_file() and Path(files["corpus_provenance"]).is_file()


def test_ci_demo_writes_the_report_card(ci_run):
    """OUT/report.html: every number it marks is the results JSON's, exactly (tests/report/test_report_card.py)."""
    from tests.report_fixtures import check_numbers, read_page

    files = ci_run["summary"]["files"]
    assert files["report_html"] == str(ci_run["out"] / run.REPORT_FILE)
    page = read_page(files["report_html"])
    labels = {attrs["data-run"] for attrs, _ in page.numbers}
    assert len(labels) == 1
    check_numbers(page, {labels.pop(): Path(files["results_json"]).parent})
    results = json.loads(Path(files["results_json"]).read_text(encoding="utf-8"))
    metrics = {
        f"{task}/{key.split(',')[0]}"
        for task, entry in results["results"].items()
        for key in entry
        if "," in key and "_stderr," not in key and not key.startswith("skipped_lengths,")
    }
    assert {attrs["data-metric"] for attrs, _ in page.numbers} == metrics  # every metric is on the page
    assert page.title.startswith("Long-context report card")


def test_ci_demo_every_metric_is_finite(ci_run):
    s = ci_run["summary"]
    assert s["missing_tasks"] == [] and s["non_finite"] == []
    results = json.loads(Path(s["files"]["results_json"]).read_text(encoding="utf-8"))
    md = run.DEMO_BUDGETS["ci"]["metadata"]
    expected = {
        "longppl_govreport": {"longppl", "ppl", "key_token_fraction", "n_key_tokens"},
        "retrieval_gain": {"retrieval_gain", "nll_with", "nll_without"},
        "retrieval_gain_map": {"gain", "effective_length", "effective_length_abs"}
        | {f"gain@L{x:05d}" for x in md["context_lengths"]}
        | {f"gain@L{x:05d}_d{d:02d}" for x in md["context_lengths"] for d in md["depths"]},
        "forgetting_curve": {"fine_memory_length", "coarse_memory_length", "n_failed_lengths"}
        | {f"{w}@{x:05d}" for x in md["lengths"] for w in ("copy_acc", "lm_acc")},
        "longeval_lines_ppl": {"answer_ppl", "non_answer_ppl"} | {f"answer_ppl_{n:04d}" for n in md["num_lines"]},
        "longeval_lines_acc": {"acc"} | {f"acc_{n:04d}" for n in md["num_lines"]},
    }
    for task, names in expected.items():
        metric_keys = {k: v for k, v in results["results"][task].items() if "," in k}  # not alias / name
        got = {k.split(",")[0] for k in metric_keys}
        assert names <= got, (task, names - got)
        for key, value in metric_keys.items():
            if "_stderr," in key:
                continue
            if key == "skipped_lengths,none":  # a text: which lengths were skipped, and why
                assert value == "none"
                continue
            assert isinstance(value, (int, float)) and math.isfinite(value), (task, key, value)
    assert results["results"]["forgetting_curve"]["n_failed_lengths,none"] == 0


def test_ci_demo_records_the_declared_directions(ci_run):
    """Every direction a real run records is the one its task class declares (METRIC_DIRECTIONS); a group's (the
    longeval_lines group) is its tasks' where they agree, None where they differ, as lm-eval merges them."""
    from lm_eval_longctx.tasks import base

    classes = base.suite_tasks()
    results = json.loads(Path(ci_run["summary"]["files"]["results_json"]).read_text(encoding="utf-8"))
    recorded = results["higher_is_better"]
    assert set(classes) <= set(recorded)
    for task, hib in recorded.items():
        members = [cls for name, cls in classes.items() if task in (name, cls.GROUP)]
        for metric, direction in hib.items():
            declared = set()
            for cls in members:
                try:
                    declared.add(cls.direction_of(metric))
                except KeyError:  # a metric of the group's other task
                    pass
            assert declared, (task, metric)
            assert (declared.pop() if len(declared) == 1 else None) is direction, (task, metric, direction)


def test_ci_demo_reads_the_embedded_corpus_and_reports_targets(ci_run):
    s = ci_run["summary"]
    results = json.loads(Path(s["files"]["results_json"]).read_text(encoding="utf-8"))
    md = run.DEMO_BUDGETS["ci"]["metadata"]
    texts = embedded_corpus.embedded_documents(run.DEMO_BUDGETS["ci"]["chars_per_doc"])
    # LongPPL and retrieval gain scored the first num_docs rows of the embedded corpus
    for task in ("longppl_govreport", "retrieval_gain", "retrieval_gain_map"):
        prov = results["configs"][task]["metadata"]["longctx_settings"]["data"]
        assert prov["texts_sha256"] == documents.texts_sha256(texts[: md["num_docs"]]), task
        assert prov["data_files"] == s["files"]["corpus"]
    # the forgetting curve's stream is every row
    fc = results["configs"]["forgetting_curve"]["metadata"]["longctx_settings"]
    assert fc["data"]["num_rows"] == len(texts) and fc["lengths"] == md["lengths"]
    assert [t["name"] for t in s["targets"]] == [
        "copy_gap",
        "fine_memory_length",
        "longeval_acc",
        "retrieval_gain",
        "longppl_below_ppl",
    ]
    assert all(isinstance(t["passed"], bool) for t in s["targets"])
    assert s["targets_passed"], s["targets"]  # the packaged model meets them at this budget too
    # --check: exit 1 exactly when a target failed
    assert ci_run["rc"] == (0 if s["targets_passed"] else 1)
    assert s["command"].startswith(
        "lm_eval run --tasks longppl_govreport,forgetting_curve,retrieval_gain,retrieval_gain_map,longeval_lines"
    )
    assert s["wall_seconds"]["total"] > 0


def test_packaged_model_meets_the_targets_on_the_ci_budget(ci_run):
    if not ci_run["packaged"]:
        pytest.skip("the packaged demo model is not built (lm_eval_longctx/demo/assets/model)")
    assert ci_run["summary"]["targets_passed"], ci_run["summary"]["targets"]


def test_fine_memory_length_target():
    m = _metrics([0.9] * 4, [0.1] * 4, 1.0, 2.0, 3.0)
    m["forgetting_curve"]["fine_memory_length"] = {"value": 256, "stderr": "N/A"}
    names = lambda res: {t["name"]: t["passed"] for t in res}  # noqa: E731
    assert names(run.check_targets(m, 3, 0.3, fine_memory_min=64))["fine_memory_length"] is True
    assert names(run.check_targets(m, 3, 0.3, fine_memory_min=512))["fine_memory_length"] is False
    assert "fine_memory_length" not in names(run.check_targets(m, 3, 0.3))  # 0: no target
    del m["forgetting_curve"]["fine_memory_length"]
    res = [t for t in run.check_targets(m, 3, 0.3, fine_memory_min=64) if t["name"] == "fine_memory_length"]
    assert not res[0]["passed"] and res[0]["note"]


def test_longeval_accuracy_target():
    m = _metrics([0.9] * 4, [0.1] * 4, 1.0, 2.0, 3.0)
    names = lambda res: {t["name"]: t["passed"] for t in res}  # noqa: E731
    assert "longeval_acc" not in names(run.check_targets(m, 3, 0.3))  # 0: no target
    res = [t for t in run.check_targets(m, 3, 0.3, longeval_acc_min=0.3) if t["name"] == "longeval_acc"]
    assert not res[0]["passed"] and res[0]["note"]  # missing metric: fails, with a note
    for acc, passed in ((0.25, False), (0.3, True), (1.0, True)):
        m["longeval_lines_acc"] = {"acc": {"value": acc, "stderr": 0.1}}
        assert names(run.check_targets(m, 3, 0.3, longeval_acc_min=0.3))["longeval_acc"] is passed
