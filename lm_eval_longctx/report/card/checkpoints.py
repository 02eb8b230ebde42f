"""The report card's section for checkpoints of one training run: the regression gate between consecutive
checkpoints, and each headline metric against the step."""

from __future__ import annotations

from ..gate import GateConfig, compare
from ..results import DEFAULT_Z, UnusableInput
from ..text import esc
from .card_runs import CardRun
from .page import png_img, table
from .pictures import matplotlib_missing, trend_png
from .sections import Section, headline_names
from .tool_pages import gate_table, gate_verdict


def checkpoint_section(runs: list[CardRun], sections: list[Section], z: float = DEFAULT_Z) -> str:
    """The gate between consecutive checkpoints, and each headline metric against the step."""
    parts = [
        '<section class="card" id="checkpoints"><h2>Across checkpoints</h2><p class="lead">The runs are checkpoints '
        f"of one training run (steps {esc(', '.join(str(r.step) for r in runs))}).</p>"
        '<h3>Regression gate between consecutive checkpoints</h3><p class="muted">Each checkpoint against the one '
        "before (<code>lm-eval-longctx gate</code> with the default tolerances): a paired per-document test where "
        "both runs have <code>--log_samples</code> files, else the stderr band.</p>"
    ]
    rows, details = [], []
    for base, run in zip(runs, runs[1:]):
        pair = f"{esc(base.step)} → {esc(run.step)}"
        try:
            report = compare(run.run, base.run, GateConfig(z=z))
        except UnusableInput as e:
            rows.append(
                f'<tr><td data-label="steps">{pair}</td><td class="verdict none" colspan="4" data-label="verdict">'
                f"not compared: {esc(e)}</td></tr>"
            )
            continue
        verdict, cls = gate_verdict(report)
        regressed = [r.metric for r in report.rows if r.status == "regressed"]
        improved = [r.metric for r in report.rows if r.status == "improved"]
        n_paired = sum(r.test == "paired" for r in report.rows)
        n_unpaired = sum(r.test == "unpaired" for r in report.rows)
        rows.append(
            f'<tr><td data-label="steps">{pair}</td><td class="verdict {cls}" data-label="verdict">{esc(verdict)}</td>'
            f'<td data-label="regressed">{esc(", ".join(regressed) or "—")}</td>'
            f'<td data-label="improved">{esc(", ".join(improved) or "—")}</td>'
            f'<td data-label="tests">{n_paired} paired, {n_unpaired} unpaired</td></tr>'
        )
        details.append(
            f"<details><summary>gate table, step {pair}</summary>{gate_table(report, run.label, base.label)}</details>"
        )
    head = "".join(f"<th>{c}</th>" for c in ("steps", "verdict", "regressed", "improved", "tests"))
    parts.append(table(head, "".join(rows), "stack") + "".join(details))
    parts.append(f'<h3>Headline metrics against the step</h3><p class="muted">Error bars: ± {z:g} × stderr.</p>')
    missing = matplotlib_missing()
    charts = []
    for section in [] if missing else sections:
        for t in section.tasks:
            for name, _meaning in headline_names(runs, section, t):
                png = trend_png(runs, name, z)
                if png:
                    charts.append(png_img(png, f"{name} against the training step"))
    parts.append(
        f'<div class="trends">{"".join(charts)}</div>'
        if charts
        else f'<p class="muted">{esc(missing or "no headline metric with a value at two steps")}</p>'
    )
    parts.append("</section>")
    return "".join(parts)
