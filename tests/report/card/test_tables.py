"""report/card/tables.py: the report card's tables of numbers: a metric's cell (its value marked so that it can be
read back, ± z·stderr or the interval on the metric's own scale), the headline tables (a column per run, or a row
per run when there are many), every metric of a task, and the first headline of each task at a glance. The whole
page is tested in tests/report/card/test_report.py."""

from __future__ import annotations

import math
import re

from lm_eval_longctx.report.card import tables
from lm_eval_longctx.report.card.card_runs import CardRun
from lm_eval_longctx.report.card.sections import Declaration, Section
from lm_eval_longctx.report.results import Metric, Run
from tests.report_fixtures import PageNumbers


def card_run(label: str, metrics: dict[str, Metric]) -> CardRun:
    return CardRun(label, Run(metrics, {}, {}, {}, label), {}, f"/runs/{label}")


def page_of(html: str) -> PageNumbers:
    page = PageNumbers()
    page.feed(html)
    return page


def test_a_linear_metric_is_shown_plus_minus_z_stderr_and_marked():
    cell = tables.metric_cell("run <1>", "t/gain", Metric(0.5, 0.1, True), z=2.0)
    ((attrs, text),) = page_of(cell).numbers
    assert attrs == {
        "class": "num",
        "data-run": "run <1>",
        "data-metric": "t/gain",
        "data-value": "0.5",
        "data-stderr": "0.1",
    }
    assert text.split() == ["0.5", "±", "0.2"]  # 2 × 0.1
    assert "run &lt;1&gt;" in cell  # escaped in the attribute


def test_a_perplexity_shows_its_interval_on_the_log_scale():
    cell = tables.metric_cell("r", "t/ppl", Metric(10.0, 1.0, False), z=1.96)
    # exp(ln 10 ± 1.96 × 1 / 10): 8.22 and 12.17, not 10 ± 1.96
    low, high = 10 * math.exp(-0.196), 10 * math.exp(0.196)
    assert f"[{low:.4g}, {high:.4g}]" in cell and "±" not in cell


def test_an_accuracy_interval_stays_within_zero_and_one():
    cell = tables.metric_cell("r", "t/acc", Metric(0.98, 0.02, True), z=1.96)
    assert "[0.9408, 1]" in cell  # 0.98 − 1.96 × 0.02 = 0.9408; 0.98 + 0.0392 cut at 1


def test_cells_without_a_stderr_a_value_or_a_metric():
    assert "±" not in tables.metric_cell("r", "t/gain", Metric(0.5, None, True))
    value, ci = re.findall(r"<td[^>]*>(.*?)</td>", tables.metric_cell("r", "t/gain", Metric(0.5, None, True), 1, True))
    assert value == "0.5" and "no stderr" in ci
    absent = tables.metric_cell("r", "t/gain", None, ci_column=True)
    assert absent.count("<td") == 2 and 'title="not in this run"' in absent
    invalid = tables.metric_cell("r", "t/gain", Metric(math.nan, None, True, invalid="<null>"))
    assert 'data-invalid="&lt;null&gt;"' in invalid and "not a number: &lt;null&gt;" in invalid
    assert "data-value" not in invalid  # never read back as a number


def test_direction_marks():
    assert "↑" in tables.direction_mark(Metric(1.0, None, True))
    assert "↓" in tables.direction_mark(Metric(1.0, None, False))
    assert tables.direction_mark(Metric(1.0, None, None)) == "" and tables.direction_mark(None) == ""
    assert tables.metric_heading("task_a/gain", None, with_task=True).startswith('<span class="task">task_a</span>')
    assert "task_a" not in tables.metric_heading("task_a/gain", None, with_task=False)


def test_one_run_gets_a_value_and_a_ci_column():
    run = card_run("a", {"t/gain": Metric(0.5, 0.1, True)})
    html = tables.headline_table([run], [("t/gain", "how much it gains")], z=1.96)
    assert "<th>value</th><th>95% CI (± 1.96·stderr)</th>" in html
    assert "[0.304, 0.696]" in html  # 0.5 ± 1.96 × 0.1
    assert html.count("how much it gains") == 2  # in its column, and inline for narrow screens
    assert tables.headline_table([run], []) == ""


def test_runs_are_columns_up_to_a_limit_then_rows():
    names = [("t/gain", "gain"), ("t/loss", "")]
    few = [card_run(f"r{k}", {"t/gain": Metric(k, 0.1, True)}) for k in range(tables.RUNS_AS_COLUMNS)]
    html = tables.headline_table(few, names)
    assert [a["data-run"] for a, _ in page_of(html).numbers] == [r.label for r in few]
    assert html.count('title="not in this run"') == len(few)  # t/loss in none of them
    assert "".join(f"<th>r{k}</th>" for k in range(len(few))) in html
    many = [card_run(f"r{k}", {"t/gain": Metric(k, 0.1, True)}) for k in range(tables.RUNS_AS_COLUMNS + 1)]
    html = tables.headline_table(many, names)
    rows = re.findall(r"<tr><th>(r\d+)</th>", html)
    assert rows == [r.label for r in many]
    assert '<dl class="meanings"><div><dt><code>gain</code></dt><dd>gain</dd></div></dl>' in html


def test_every_metric_of_a_task_from_every_run():
    a = card_run("a", {"t/x": Metric(1.0, None, None), "u/y": Metric(2.0, None, None)})
    b = card_run("b", {"t/w": Metric(3.0, None, None)})
    html = tables.all_metrics_table([a, b], "t")
    assert "all 2 metrics of t" in html and "u/y" not in html
    assert [(attrs["data-run"], attrs["data-metric"]) for attrs, _ in page_of(html).numbers] == [
        ("b", "t/w"),
        ("a", "t/x"),
    ]
    assert tables.all_metrics_table([a, b], "v") == ""


def test_at_a_glance_shows_the_first_headline_of_each_task():
    run = card_run(
        "a", {"t/x": Metric(1.0, None, True), "t/y": Metric(2.0, None, True), "u/z": Metric(3.0, None, None)}
    )
    declared = Declaration("s", "S", headlines=[("y", "the y"), ("x", "the x")])
    sections = [Section("s", "S", "", 0.0, ["t"], {"t": declared}, []), Section("g", "u", "", 1.0, ["u"], {}, [])]
    html = tables.at_a_glance([run], sections, z=1.0)
    assert [attrs["data-metric"] for attrs, _ in page_of(html).numbers] == ["t/y", "u/z"]
    assert "a 68% normal interval" in html  # ± 1 stderr


def test_a_lower_bound_is_shown_with_its_mark_and_marked_as_one():
    for ci_column in (False, True):
        cell = tables.metric_cell(
            "r", "t/effective_length", Metric(976.0, None, True, lower_bound=True), ci_column=ci_column
        )
        ((attrs, text),) = page_of(cell).numbers
        assert text.strip() == "≥ 976" and attrs["data-value"] == "976.0" and attrs["data-lower-bound"] == "true"
    ((attrs, text),) = page_of(tables.metric_cell("r", "t/effective_length", Metric(512.0, None, True))).numbers
    assert text.strip() == "512" and "data-lower-bound" not in attrs
