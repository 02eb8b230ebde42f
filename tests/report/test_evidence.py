"""report/evidence.py: a task whose numbers rest on few documents, few samples per tested length or few key tokens is
named, in each results JSON, on the report card and under the leaderboard; enough evidence gives no note."""

from __future__ import annotations

import doctest

from lm_eval_longctx.cli import main
from lm_eval_longctx.report import evidence
from tests.report_fixtures import suite_results_json, write_results


def test_the_docstring_examples_run():
    assert doctest.testmod(evidence).failed == 0


def thick(model: str) -> dict:
    """A results file of the suite whose every task rests on enough evidence."""
    data = suite_results_json(model)
    for task, n in data["n-samples"].items():
        n["original"] = n["effective"] = 30
        settings = data["configs"][task]["metadata"]["longctx_settings"]
        if "num_cases" in settings:
            settings["num_cases"] = 15
    data["configs"]["forgetting_curve"]["metadata"]["longctx_settings"]["samples_per_length"] = 10
    data["results"]["longppl_govreport"]["n_key_tokens,none"] = 3.4  # 102 key tokens over 30 documents
    return data


def test_each_kind_of_thin_evidence_is_one_reason_and_enough_is_none():
    assert all(not record["thin"] for record in evidence.evidence_record(thick("org/a")).values())
    data = suite_results_json("org/a")  # 2 documents a task, 3 LongEval cases a size, 72.5 key tokens a document
    record = evidence.evidence_record(data)
    assert record["longppl_govreport"] == {
        "documents": 2,
        "key_tokens": 145,
        "thin": ["2 documents (the paired comparison of runs needs 10)"],
    }
    assert record["longeval_lines_acc"]["thin"] == ["3 cases per size (the paired comparison of runs needs 10)"]
    data["results"]["longppl_govreport"]["n_key_tokens,none"] = 3.4
    assert evidence.evidence_record(data)["longppl_govreport"]["thin"][1] == (
        "7 key tokens over 2 documents (fewer than 100)"
    )
    # the samples a length holds are what the copy lengths rest on, not the documents of all lengths
    curve = thick("org/a")
    curve["configs"]["forgetting_curve"]["metadata"]["longctx_settings"]["samples_per_length"] = 5
    assert evidence.evidence_record(curve)["forgetting_curve"] == {
        "documents": 30,
        "samples_per_length": 5,
        "thin": ["5 samples per copy length (the paired comparison of runs needs 10)"],
    }
    # a task of another suite has no record; results without counts give no reason
    data["configs"]["other"] = {"task": "other", "metadata": {}}
    data["results"]["other"] = {"acc,none": 0.5}
    assert "other" not in evidence.evidence_record(data)
    assert evidence.task_evidence({}, None, {}) == {"thin": []}


def test_a_saved_results_json_holds_the_record():
    data = suite_results_json("org/a")
    evidence.add_evidence(data)
    assert data[evidence.EVIDENCE_KEY]["longppl_govreport"]["key_tokens"] == 145
    empty: dict = {"results": {}}
    evidence.add_evidence(empty)
    assert evidence.EVIDENCE_KEY not in empty


def test_the_leaderboard_and_the_card_name_thin_evidence_and_say_nothing_of_enough(tmp_path, capsys):
    write_results(tmp_path / "thin", suite_results_json("org/thin"))
    write_results(tmp_path / "thick", thick("org/thick"))
    assert (
        main(["leaderboard", str(tmp_path / "thin"), str(tmp_path / "thick"), "--html", str(tmp_path / "b.html")]) == 0
    )
    md = capsys.readouterr().out
    assert "thin evidence: org/thin, longppl_govreport: 2 documents (the paired comparison of runs needs 10)" in md
    assert "org/thick," not in md
    assert "thin evidence: org/thin, longppl_govreport" in (tmp_path / "b.html").read_text(encoding="utf-8")
    for name in ("thin", "thick"):
        out = tmp_path / f"{name}.html"
        assert main(["report", str(tmp_path / name), "-o", str(out)]) == 0
        page = out.read_text(encoding="utf-8")
        assert ("thin evidence: 3 cases per size" in page) == (name == "thin")
