"""The gate's and the leaderboard's tables in the report card's format: ``gate --html``, ``leaderboard --html``,
and the gate table of the report card's checkpoint section."""

from __future__ import annotations

import math

from ..bounds import LOWER_BOUND_LEGEND, bound_text
from ..gate import BOUND_NOTE, GateReport, format_number
from ..leaderboard import Leaderboard, cell_text
from ..paired import level_for_z
from ..results import split_name
from ..text import esc
from .page import html_page, marks, table
from .tables import metric_heading


def gate_table(report: GateReport, run_label: str | None = None, base_label: str | None = None) -> str:
    """The gate's rows as an HTML table (the columns of :meth:`GateReport.markdown`); values marked as in the card."""
    run_label = report.run_model if run_label is None else run_label
    base_label = report.baseline_model if base_label is None else base_label
    columns = ("metric", "baseline", "current", "change", "tolerance", "test", "CI of change / z × stderr", "status")
    out = []
    for r in report.rows:
        arrow = " ↑" if r.higher_is_better else " ↓" if r.higher_is_better is False else ""
        arrow += " (one file)" if r.one_sided and arrow else ""
        delta = r.current - r.baseline if r.current is not None and r.baseline is not None else None
        change = f"{delta:+.4g}" if delta is not None and math.isfinite(delta) else ""
        if r.test == "paired" and r.ci is not None:
            test, band = "paired", f"[{r.ci[0] + 0.0:+.4g}, {r.ci[1] + 0.0:+.4g}]"
        elif r.test == "unpaired":
            test, band = "unpaired", f"±{r.noise:.4g}"
        else:
            test, band = "—", ""
        note = f'<br><span class="note">({esc(r.note)})</span>' if r.note and r.test else ""
        task, metric, _ = split_name(r.metric) if "/" in r.metric else ("", r.metric, "")
        cls = {"regressed": "fail", "improved": "pass"}.get(r.status, "none")
        cells = []
        for label, value, se, bound in (
            (base_label, r.baseline, r.baseline_se, r.baseline_lower_bound),
            (run_label, r.current, r.current_se, r.current_lower_bound),
        ):
            if value is None:
                cells.append('<td class="absent">—</td>')
            else:
                shown = bound_text(format_number(value, se), bound)
                cells.append(f'<td class="num" {marks(label, r.metric, value, se, bound)}>{esc(shown)}</td>')
        out.append(
            f'<tr><th><span class="task">{esc(task)}</span><br><span class="nowrap"><code>{esc(metric)}</code>'
            f'{esc(arrow)}</span></th>{"".join(cells)}<td class="num">{esc(change)}</td>'
            f'<td class="num">{esc(f"{r.tolerance:.4g}")}</td><td>{esc(test)}{note}</td><td class="num">{esc(band)}</td>'
            f'<td class="verdict {cls}">{esc(r.status)}</td></tr>'
        )
    bounded = any(r.baseline_lower_bound or r.current_lower_bound for r in report.rows)
    note = f'<p class="muted">{esc(BOUND_NOTE)}</p>' if bounded else ""
    return table("".join(f"<th>{c}</th>" for c in columns), "".join(out), "gate") + note


def gate_verdict(report: GateReport) -> tuple[str, str]:
    """(verdict text, css class) of a gate report."""
    n_reg = sum(r.status == "regressed" for r in report.rows)
    return (f"FAIL: {n_reg} metric(s) regressed", "fail") if n_reg else ("PASS: no metric regressed", "pass")


def _gate_explanation(report: GateReport) -> str:
    level = level_for_z(report.z)
    return (
        f"Regressed: <em>paired</em> rows, the whole {level:.1%} CI of the change (bootstrap over the same documents "
        f"of both runs, {report.n_resamples} resamples, seed {report.seed}) is worse than the baseline by more than "
        f"the tolerance; <em>unpaired</em> rows, the change is worse by more than the tolerance and by more than "
        f"z = {report.z:g} × sqrt(se_run² + se_base²)."
    )


def gate_page(report: GateReport) -> str:
    """``lm-eval-longctx gate --html``: the gate's verdict and table as a page."""
    verdict, cls = gate_verdict(report)
    body = (
        f'<section class="card"><p class="verdict {cls}">{esc(verdict)}</p>'
        f"<p>Run <code>{esc(report.run_model)}</code> against baseline <code>{esc(report.baseline_model)}</code>. "
        f"{_gate_explanation(report)}</p>{gate_table(report)}"
    )
    if report.files_without_directions:
        body += (
            '<p class="muted">(one file): the direction (higher_is_better) is recorded in one of the two results '
            f"files only; these record none: {esc(', '.join(report.files_without_directions))}.</p>"
        )
    body += "</section>"
    return html_page("Regression gate", body, f"{report.run_model} vs baseline {report.baseline_model}")


def leaderboard_page(board: Leaderboard) -> str:
    """``lm-eval-longctx leaderboard --html``: one row per run, one column per metric (value ± stderr)."""
    head = []
    for m in board.metrics:
        first = next((r.cells[m] for r in board.rows if m in r.cells), None)
        head.append(f"<th>{metric_heading(m, first, with_task=True)}</th>")
    if board.audits:  # RULER's layout: the window claimed and the one used, before the metrics
        head = ["<th>claimed</th>", "<th>effective ↑</th>", *head]
    rows = []
    for row in board.rows:
        cells = [f'<td class="num">{esc(c)}</td>' for c in board.audit_cells(row)]
        for m in board.metrics:
            c = row.cells.get(m)
            if c is None:
                cells.append('<td class="absent">missing</td>')
            else:
                attrs = marks(row.label, m, c.value, c.stderr, c.lower_bound)
                cells.append(f'<td class="num" {attrs}>{esc(cell_text(c))}</td>')
        rows.append(f"<tr><th>{esc(row.label)}</th>{''.join(cells)}</tr>")
    notes = [LOWER_BOUND_LEGEND] if any(c.lower_bound for r in board.rows for c in r.cells.values()) else []
    notes += [*board.thin_evidence(), *board.audit_notices]
    body = (
        '<section class="card"><p class="lead">One row per run (model and settings); value ± the harness\'s stderr. '
        "Rows of one model under other settings are labelled by what differs.</p>"
        f"{table('<th>model</th>' + ''.join(head), ''.join(rows))}"
        + "".join(f'<p class="muted">{esc(n)}</p>' for n in notes)
        + "</section>"
    )
    return html_page("Leaderboard", body, f"{len(board.rows)} rows, {len(board.metrics)} metrics")
