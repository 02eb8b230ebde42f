"""report/runs.py: which results files a report command reads and how they make runs: a folder's regular
``results_*.json`` (else any JSON), never below another input; a task in two files of one model refused unless
``newest`` (by the results' date, else the file name's); runs ordered by a natural sort of their folders or by date.
The commands on top of this rule are tested in tests/integration/test_report_probes.py."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from lm_eval_longctx.report import runs
from lm_eval_longctx.report.results import UnusableInput
from tests.report_fixtures import results_json, write


def one_task(model: str, task: str, date: float | None = None, **kwargs) -> dict:
    """A results file of ``results_json`` with only ``task`` in its results (and ``date`` when given)."""
    data = results_json(model=model, **kwargs)
    data["results"] = {task: data["results"][task]}
    if date is not None:
        data["date"] = date
    return data


def test_natural_key_compares_numbers_as_numbers():
    names = ["ckpt-1000", "ckpt-200", "Ckpt-30", "ckpt-200b", "a"]
    assert sorted(names, key=runs.natural_key) == ["a", "Ckpt-30", "ckpt-200", "ckpt-200b", "ckpt-1000"]


def test_short_name_keeps_the_last_two_folders_of_a_path_and_a_hub_id_whole():
    assert runs.short_name("/data/runs/exp1/org__m") == "exp1/org__m"
    assert runs.short_name("./out/m") == "out/m"
    assert runs.short_name("org/model/revision") == "org/model/revision"


def test_equal_labels_are_told_apart_by_their_folder_then_their_place():
    sources = ["/r/exp1/out", "/r/exp2/out", "/r/exp1/out", "/r/x"]
    assert runs.distinct_labels(["m", "m", "m", "n"], sources) == [
        "m [exp1/out] #1",
        "m [exp2/out]",
        "m [exp1/out] #3",
        "n",
    ]


def test_date_of_prefers_the_results_date_then_the_file_name():
    named = Path("results_2026-01-02T03-04-05.250000.json")
    from_name = datetime.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=datetime.timezone.utc).timestamp()
    assert runs.date_of({"date": 1_700_000_000}, named) == 1_700_000_000.0
    assert runs.date_of({}, named) == from_name
    assert runs.date_of({}, Path("results_2026-01-02T03-04-05.json")) == from_name - 0.25
    # a date that is not a finite number of seconds falls back on the name
    for bad in (True, float("nan"), "2026-01-01", None):
        assert runs.date_of({"date": bad}, named) == from_name
    assert runs.date_of({}, Path("results_latest.json")) is None
    assert runs.date_text(None) == "no date" and runs.date_text(from_name) == "2026-01-02 03:04:05 UTC"


def test_a_folder_gives_its_results_files_else_any_json(tmp_path):
    write(tmp_path / "run" / "results_b.json", "{}")
    write(tmp_path / "run" / "sub" / "results_a.json", "{}")
    write(tmp_path / "run" / "notes.json", "{}")
    write(tmp_path / "run" / "samples_x.jsonl", "")
    found = runs.input_files(tmp_path / "run")
    assert [f.relative_to(tmp_path / "run").as_posix() for f in found] == ["results_b.json", "sub/results_a.json"]
    write(tmp_path / "plain" / "b.json", "{}")
    write(tmp_path / "plain" / "a.json", "{}")
    assert [f.name for f in runs.input_files(tmp_path / "plain")] == ["a.json", "b.json"]
    assert runs.input_files(tmp_path / "run" / "notes.json") == [tmp_path / "run" / "notes.json"]  # a file: itself


def test_nothing_below_another_input_is_read(tmp_path):
    run = write(tmp_path / "run" / "results_1.json", "{}")
    base = write(tmp_path / "run" / "baseline" / "results_2.json", "{}")
    assert runs.input_files(tmp_path / "run", others=[base.parent]) == [run]
    assert runs.input_files(tmp_path / "run", others=[base]) == [run]
    assert runs.input_files(tmp_path / "run") == [base, run]  # baseline/results_2.json sorts before results_1.json


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_an_entry_named_like_a_results_file_that_is_not_a_regular_file_is_refused(tmp_path):
    folder = tmp_path / "run"
    write(folder / "results_1.json", "{}")
    os.mkfifo(folder / "results_2.json")  # reading it would wait forever: refused without opening it
    with pytest.raises(UnusableInput, match=r"results_2\.json: a FIFO named like a results file"):
        runs.input_files(folder)
    with pytest.raises(UnusableInput, match="a FIFO, not a regular file"):
        runs.input_files(folder / "results_2.json")
    (folder / "results_2.json").unlink()
    (folder / "results_3.json").mkdir()
    with pytest.raises(UnusableInput, match=r"results_3\.json: a folder named like a results file"):
        runs.input_files(folder)


def test_missing_and_empty_inputs_are_refused(tmp_path):
    with pytest.raises(UnusableInput, match="no such file or folder"):
        runs.input_files(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnusableInput, match="no results JSON files in this folder"):
        runs.input_files(tmp_path / "empty")
    (tmp_path / "link.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(UnusableInput, match=r"link\.json: no such results file \(a broken link\)"):
        runs.input_files(tmp_path / "link.json")


def test_a_task_in_two_files_is_refused_unless_the_newest_is_asked_for(tmp_path):
    folder = tmp_path / "run"
    # the older run has the later file name: the results' own date decides
    write(folder / "results_2026-09-09T00-00-00.json", one_task("org/m", "longppl_govreport", 1_700_000_000.0))
    write(folder / "results_2026-01-01T00-00-00.json", one_task("org/m", "longppl_govreport", 1_800_000_000.0))
    files = [runs.ResultsFile.read(f) for f in runs.input_files(folder)]
    with pytest.raises(UnusableInput, match="longppl_govreport is in 2 results files of org/m.*--newest"):
        runs.pick_tasks(files, newest=False, where=folder)
    chosen, notices = runs.pick_tasks(files, newest=True, where=folder)
    assert chosen["longppl_govreport"].path.name == "results_2026-01-01T00-00-00.json"
    assert len(notices) == 1 and notices[0].startswith(f"longppl_govreport: {chosen['longppl_govreport'].path}")
    assert "the newest, over" in notices[0]
    # two files of one date cannot be ordered
    for f in files:
        f.date = 1_700_000_000.0
    with pytest.raises(UnusableInput, match="two results files of one date"):
        runs.pick_tasks(files, newest=True, where=folder)
    files[0].date = None
    with pytest.raises(UnusableInput, match="--newest cannot order the results files of longppl_govreport"):
        runs.pick_tasks(files, newest=True, where=folder)


def test_a_run_is_its_tasks_each_from_its_own_file(tmp_path):
    folder = tmp_path / "run"
    a = write(folder / "results_a.json", one_task("org/m", "longppl_govreport", longppl=4.5))
    b = write(folder / "results_b.json", one_task("org/m", "forgetting_curve", copy_acc=0.75))
    samples = write(folder / "samples_longppl_govreport_x.jsonl", "")
    found = runs.one_run(folder)
    assert found.model == "org/m" and {t: f.path for t, f in found.files.items()} == {
        "longppl_govreport": a,
        "forgetting_curve": b,
    }
    run = runs.run_of(found)
    assert run.metrics["longppl_govreport/longppl"].value == 4.5
    assert run.metrics["forgetting_curve/copy_acc"].value == 0.75
    assert run.sources == {"longppl_govreport": str(a), "forgetting_curve": str(b)}
    assert run.n_samples == {"longppl_govreport": 50, "forgetting_curve": 50}
    assert run.files == [str(a), str(b)]
    assert runs.every_file([found]) == [a, samples, b, samples]  # the samples beside each file: no output over them
    assert runs.load_run(folder).metrics == run.metrics


def test_one_run_refuses_results_of_two_models(tmp_path):
    write(tmp_path / "run" / "results_a.json", results_json(model="org/a"))
    write(tmp_path / "run" / "results_b.json", results_json(model="org/b"))
    with pytest.raises(UnusableInput, match="results of 2 different models.*'org/a'.*'org/b'.*give the gate one"):
        runs.one_run(tmp_path / "run")


def test_runs_in_a_folder_one_per_subfolder_in_natural_or_date_order(tmp_path):
    root = tmp_path / "runs"
    for step, date in ((1000, 1_700_000_000.0), (200, 1_800_000_000.0)):
        data = results_json(model=f"org/run/ckpt-{step}")
        data["date"] = date
        write(root / f"ckpt-{step}" / "results_x.json", data)
    assert [r.source.name for r in runs.runs_in(root)] == ["ckpt-200", "ckpt-1000"]
    assert [r.source.name for r in runs.runs_in(root, order="date")] == ["ckpt-1000", "ckpt-200"]
    with pytest.raises(UnusableInput, match="order 'size': expected one of name, date"):
        runs.runs_in(root, order="size")
    write(root / "ckpt-200" / "results_other.json", results_json(model="org/other"))
    with pytest.raises(UnusableInput, match="ckpt-200: results of 2 different models in one folder"):
        runs.runs_in(root)


def test_date_order_needs_a_date_for_every_run(tmp_path):
    write(tmp_path / "runs" / "a" / "results_x.json", results_json(model="org/a"))
    with pytest.raises(UnusableInput, match="--order date: no date in the results of .*runs/a; use --order name"):
        runs.runs_in(tmp_path / "runs", order="date")
