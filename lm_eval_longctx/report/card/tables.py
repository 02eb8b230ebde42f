"""The report card's tables of numbers: a metric's cell (value ± z·stderr, marked with run, metric and value so
that it can be read back), the headline tables, every metric of a task, and the first headline of every task at a
glance. Directions (the arrows) are the results' ``higher_is_better``."""

from __future__ import annotations

from ..bounds import bound_text
from ..intervals import interval, is_symmetric
from ..paired import level_for_z
from ..results import DEFAULT_Z, Metric, split_name
from ..text import esc
from .card_runs import CardRun
from .page import fmt, label_heading, marks, table
from .sections import Section, headline_names, metrics_of_task

RUNS_AS_COLUMNS = 4  # more runs than this: tables get a row per run


def metric_cell(label: str, name: str, m: Metric | None, z: float = DEFAULT_Z, ci_column: bool = False) -> str:
    """A metric's value (± z·stderr, or its CI in a column of its own), marked with the run, metric and value; a
    lower bound (a length that reaches the longest length tested) as ``≥ 976``."""
    if m is None:
        return '<td class="absent" title="not in this run">—</td>' + ('<td class="absent"></td>' if ci_column else "")
    if m.invalid is not None:  # the results file holds null or a string here: shown as it is, not as a number
        attrs = f'data-run="{esc(label)}" data-metric="{esc(name)}" data-invalid="{esc(m.invalid)}"'
        cell = f'<td class="num bad" {attrs}>not a number: {esc(m.invalid)}</td>'
        return cell + ('<td class="absent"></td>' if ci_column else "")
    attrs = marks(label, name, m.value, m.stderr, m.lower_bound)
    shown = esc(bound_text(fmt(m.value), m.lower_bound))
    bounds = interval(name, m.value, m.stderr, z)
    if ci_column:
        ci = (
            f"[{esc(fmt(bounds[0]))}, {esc(fmt(bounds[1]))}]"
            if bounds is not None
            else '<span class="muted">no stderr</span>'
        )
        return f'<td class="num" {attrs}>{shown}</td><td class="num">{ci}</td>'
    if bounds is None:
        pm = ""
    elif is_symmetric(name, m.value):
        pm = f' <span class="pm">± {esc(fmt(z * (m.stderr or 0.0)))}</span>'
    else:  # a perplexity's or an accuracy's interval is not value ± one half-width
        pm = f' <span class="pm">[{esc(fmt(bounds[0]))}, {esc(fmt(bounds[1]))}]</span>'
    return f'<td class="num" {attrs}>{shown}{pm}</td>'


def direction_mark(m: Metric | None) -> str:
    if m is None or m.higher_is_better is None:
        return ""
    if m.higher_is_better:
        return ' <span class="dir" title="higher is better">↑</span>'
    return ' <span class="dir" title="lower is better">↓</span>'


def metric_heading(name: str, first: Metric | None, with_task: bool) -> str:
    task, metric, _ = split_name(name)
    shown = f'<span class="nowrap"><code>{esc(metric)}</code>{direction_mark(first)}</span>'
    return f'<span class="task">{esc(task)}</span><br>{shown}' if with_task else shown


def headline_table(
    runs: list[CardRun], names: list[tuple[str, str]], z: float = DEFAULT_Z, with_task: bool = False
) -> str:
    """Rows of metrics (with what each means), a column per run; one run: its value and CI in two columns; more runs
    than fit side by side (:data:`RUNS_AS_COLUMNS`): a row per run, the meanings below."""
    if not names:
        return ""
    if len(runs) > RUNS_AS_COLUMNS:
        return _rows_per_run(runs, names, z, with_task)
    single = len(runs) == 1
    level = f"{level_for_z(z):.0%}"
    if single:
        head = f"<th>metric</th><th>value</th><th>{esc(level)} CI (± {z:g}·stderr)</th>"
    else:
        head = "<th>metric</th>" + "".join(label_heading(i, r.label) for i, r in enumerate(runs))
    head += '<th class="meaning">what it means</th>'
    rows = []
    for name, meaning in names:
        first = next((r.run.metrics[name] for r in runs if name in r.run.metrics), None)
        cells = "".join(metric_cell(r.label, name, r.run.metrics.get(name), z, ci_column=single) for r in runs)
        inline = f'<span class="meaning-inline" aria-hidden="true">{esc(meaning)}</span>' if meaning else ""
        rows.append(
            f"<tr><th>{metric_heading(name, first, with_task)}{inline}</th>{cells}"
            f'<td class="meaning">{esc(meaning)}</td></tr>'
        )
    return table(head, "".join(rows), "headline")


def _rows_per_run(runs: list[CardRun], names: list[tuple[str, str]], z: float, with_task: bool) -> str:
    firsts = {n: next((r.run.metrics[n] for r in runs if n in r.run.metrics), None) for n, _ in names}
    head = "<th>run</th>" + "".join(f"<th>{metric_heading(n, firsts[n], with_task)}</th>" for n, _ in names)
    rows = "".join(
        f"<tr><th>{esc(r.label)}</th>"
        + "".join(metric_cell(r.label, n, r.run.metrics.get(n), z) for n, _ in names)
        + "</tr>"
        for r in runs
    )
    meanings = "".join(
        f"<div><dt><code>{esc(split_name(n)[1])}</code></dt><dd>{esc(meaning)}</dd></div>"
        for n, meaning in names
        if meaning
    )
    return f'{table(head, rows, "headline")}<dl class="meanings">{meanings}</dl>'


def all_metrics_table(runs: list[CardRun], task: str, z: float = DEFAULT_Z) -> str:
    """Every metric of the task, per-length ones included, in a closed ``<details>``."""
    names = metrics_of_task(runs, task)
    if not names:
        return ""
    head = "<th>metric</th>" + "".join(label_heading(i, r.label) for i, r in enumerate(runs))
    rows = "".join(
        f"<tr><th><code>{esc(split_name(n)[1])}</code></th>"
        + "".join(metric_cell(r.label, n, r.run.metrics.get(n), z) for r in runs)
        + "</tr>"
        for n in names
    )
    return f"<details><summary>all {len(names)} metrics of {esc(task)}</summary>{table(head, rows)}</details>"


def at_a_glance(runs: list[CardRun], sections: list[Section], z: float = DEFAULT_Z) -> str:
    """The first headline metric of every task, one table."""
    names = []
    for section in sections:
        for t in section.tasks:
            names += headline_names(runs, section, t)[:1]
    return (
        '<section class="card" id="glance"><h2>At a glance</h2><p class="lead">The first headline number of each '
        f"task (± {z:g} × the harness's stderr, a {level_for_z(z):.0%} normal interval; none where it gives "
        "N/A); the sections below give the rest, the pictures and the settings.</p>"
        f"{headline_table(runs, names, z, with_task=True)}"
        "</section>"
    )
