"""The report card page: the runs, the settings that differ, the numbers at a glance, the checkpoint section, one
section per declared report section (headlines, pictures, every metric, settings) and the key-token viewer."""

from __future__ import annotations

import dataclasses

from ..audits import AuditSummary, audits_by_model, read_audits, unmatched_text
from ..evidence import THIN_EVIDENCE, thin_notes
from ..outputs import check_outputs
from ..paired import level_for_z
from ..results import DEFAULT_Z, UnusableInput
from ..text import esc
from .audit_part import audit_section
from .card_runs import CardRun, load_runs
from .checkpoints import checkpoint_section
from .page import html_page, table, write_page
from .pictures import draw
from .sections import Section, headline_names, sections, settings_shown
from .settings_box import settings_differ_box, settings_diffs, settings_table
from .tables import all_metrics_table, at_a_glance, headline_table
from .viewer_part import export_files_of, viewer_section


def runs_table(runs: list[CardRun], all_sections: list[Section]) -> str:
    """One row per run: label, step, model, tasks, the files read (a block per run on a narrow screen)."""
    series = runs[0].step is not None
    columns = ["#", "run", *(["step"] if series else []), "model", "tasks", "read from"]
    rows = []
    for i, r in enumerate(runs, start=1):
        tasks = ", ".join(t for s in all_sections for t in s.tasks if t in r.run.compared)
        files = "<br>".join(f"<code>{esc(f)}</code>" for f in sorted(set(r.run.sources.values())))
        cells = [str(i), esc(r.label), *([str(r.step)] if series else []), f"<code>{esc(r.run.model)}</code>"]
        cells += [esc(tasks), files]
        rows.append("<tr>" + "".join(f'<td data-label="{c}">{v}</td>' for c, v in zip(columns, cells)) + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in columns)
    return table(head, "".join(rows), "stack")


def task_section(runs: list[CardRun], section: Section, diffs: dict, z: float = DEFAULT_Z) -> str:
    """One section (one or more tasks): headline numbers, pictures, every metric, the settings."""
    tasks = section.tasks
    parts = [
        f'<section class="card" id="task-{esc(section.key)}"><h2>{esc(section.title)}</h2>'
        f'<p class="lead">{esc(section.lead)}</p>'
    ]
    differing = {t: sorted({k for pair in diffs.values() for k in pair.get(t, ())}) for t in tasks}
    for t in tasks:
        if differing[t]:
            parts.append(
                f'<div class="box warn"><strong>Settings differ</strong> for {esc(t)} between the runs: '
                f"{esc(', '.join(differing[t]))}. Their numbers are not measured the same way.</div>"
            )
    missing = [r.label for r in runs if not any(t in r.run.compared for t in tasks)]
    if missing and len(runs) > 1:
        parts.append(f'<p class="muted">Not in these runs: {esc(", ".join(missing))}.</p>')
    names = [n for t in tasks for n in headline_names(runs, section, t)]
    parts.append(headline_table(runs, names, z))
    for r in runs:
        for t in tasks:
            if t in r.notes:
                parts.append(f'<p class="box warn">{esc(r.label)}: skipped lengths: {esc(r.notes[t])}</p>')
            if t in r.results and (reasons := thin_notes(r.results[t], t)):
                parts.append(f'<p class="box warn">{esc(r.label)}: {THIN_EVIDENCE}: {esc("; ".join(reasons))}</p>')
    for name in section.pictures:
        parts.append(draw(name, runs, tasks, z))
    for t in tasks:
        parts.append(all_metrics_table(runs, t, z))
    for t in tasks:
        parts.append(settings_table(runs, t, settings_shown(section, t), set(differing[t])))
    parts.append("</section>")
    return "".join(parts)


@dataclasses.dataclass
class JoinedAudits:
    """The audits joined to the runs of their checkpoints (:func:`..audits.audits_by_model`)."""

    shown: list[AuditSummary]  # each under the model name of its run, then those that match no run
    without_audit: list[CardRun]
    unmatched: list[AuditSummary]

    def notes(self) -> list[str]:
        """What does not join, said on the page: the runs without an audit, the audits without a run."""
        lines = [f"No audit of {r.label} ({r.run.model}) was given." for r in self.without_audit]
        return lines + [unmatched_text(a) for a in self.unmatched]


def join_audits(runs: list[CardRun], audits: list[AuditSummary]) -> JoinedAudits:
    """Each audit to the runs of its checkpoint, shown under the first such run's model name."""
    if not audits:
        return JoinedAudits([], [], [])
    matched, unmatched = audits_by_model([r.run.model for r in runs], audits)
    shown: dict[int, AuditSummary] = {}
    for r in runs:
        a = matched.get(r.run.model)
        if a is not None and id(a) not in shown:
            shown[id(a)] = dataclasses.replace(a, model=r.run.model)
    without = [r for r in runs if r.run.model not in matched]
    return JoinedAudits([*shown.values(), *unmatched], without, unmatched)


def report_card_html(
    runs: list[CardRun],
    exports=(),
    title: str | None = None,
    z: float = DEFAULT_Z,
    audits: list | None = None,
    audit_notes=(),
) -> str:
    """The report card of ``runs`` as one HTML page; ``audits`` (``audits.AuditSummary``, joined to the runs by
    :func:`join_audits`) add their section, ``audit_notes`` what did not join."""
    if not runs and audits:
        return html_page(
            title or f"Long-context audit: {audits[0].model}", audit_section(audits), "", "Written by lm-eval-longctx."
        )
    if not runs:
        raise UnusableInput("no runs to report")
    if not any(r.run.metrics for r in runs):
        files = sorted({f for r in runs for f in r.run.files})
        raise UnusableInput(
            f"no metrics in {', '.join(files[:4])}{' ...' if len(files) > 4 else ''}: a --predict_only run, or no "
            "task finished; give results files with metrics"
        )
    single = len(runs) == 1
    title = title or (
        f"Long-context report card: {runs[0].label}" if single else f"Long-context report card: {len(runs)} runs"
    )
    if single:
        subtitle = f"model {runs[0].run.model}"
    elif runs[0].step is not None:
        subtitle = f"{len(runs)} checkpoints, steps {runs[0].step} to {runs[-1].step}"
    else:
        subtitle = ", ".join(r.label for r in runs)
    diffs = settings_diffs(runs)
    all_sections = sections(runs)
    body = [
        '<section class="card" id="runs"><h2>'
        + ("Run" if single else "Runs")
        + "</h2>"
        + runs_table(runs, all_sections),
        settings_differ_box(runs, diffs),
        "".join(f'<p class="box warn">{esc(note)}</p>' for note in audit_notes),
        "</section>",
        audit_section(audits) if audits else "",
        at_a_glance(runs, all_sections, z),
    ]
    if runs[0].step is not None:
        body.append(checkpoint_section(runs, all_sections, z))
    for section in all_sections:
        body.append(task_section(runs, section, diffs, z))
    if exports:
        body.append(viewer_section(runs, exports))
    footer = (
        f"± and CIs: {z:g} × the stderr lm-eval reports (a {level_for_z(z):.0%} normal interval), none where it "
        "reports N/A; a perplexity's on the log scale (exp(ln v ± z·se/v): above 0, skewed as a perplexity is), an "
        "accuracy's within [0, 1]. Written by <code>lm-eval-longctx report</code>; docs/tools/report-card.md."
    )
    return html_page(title, "\n".join(b for b in body if b), subtitle, footer)


def build_report_card(
    paths,
    out_path,
    labels=(),
    exports=(),
    title: str | None = None,
    order: str = "name",
    newest: bool = False,
    audits=(),
) -> dict:
    """Read the RESULTS inputs (and the ``audits`` folders), write the report card to ``out_path``; return what was
    written, the order the runs were found in and what ``newest`` chose."""
    audited = read_audits(audits)
    loaded = load_runs(paths, labels, order=order, newest=newest)
    check_outputs([("-o", out_path)], [*loaded.files, *export_files_of(exports), *(a.path for a in audited)])
    runs = loaded.runs
    joined = join_audits(runs, audited)
    page = report_card_html(runs, exports, title, audits=joined.shown, audit_notes=joined.notes())
    write_page(out_path, page)
    return {
        "path": str(out_path),
        "bytes": len(page.encode("utf-8")),
        "runs": [r.label for r in runs],
        "checkpoints": runs[0].step is not None,
        "settings_differ": bool(settings_diffs(runs)),
        "order": loaded.order,
        "notices": loaded.notices,
        "audit_notices": [unmatched_text(a) for a in joined.unmatched],
    }
