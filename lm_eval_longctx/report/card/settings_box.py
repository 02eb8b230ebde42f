"""The settings on the report card: each task's compact settings table (the keys its declaration names, and any
that differ between the runs), all its recorded settings, and the visible box naming every setting that differs
between the runs, task by task (:func:`..gate.settings_differences`: the same comparison the gate refuses on)."""

from __future__ import annotations

import re

from ..comparability import DOCS_KEY, VERSION_KEY
from ..gate import settings_differences
from ..results import flatten
from ..text import cut, esc
from .card_runs import CardRun
from .page import label_heading, table

SHOWN_CHARACTERS = 80  # a longer value is cut (with an ellipsis) and shown whole on hover


def setting_text(value) -> str:
    if isinstance(value, list):
        return ", ".join(setting_text(v) for v in value) if value else "[]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def setting_value(value, missing: bool = False) -> str:
    """A setting's value as HTML: ``absent``, or the value in ``<code>`` (a content hash shortened, a long value
    cut, each with an ellipsis and whole on hover)."""
    if missing:
        return '<span class="muted">absent</span>'
    text = setting_text(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40,}", value):  # a content hash: its start tells apart
        return f'<code title="{esc(text)}">{esc(text[:12])}…</code>'
    return shown_code(text)


def shown_code(text: str) -> str:
    if len(text) <= SHOWN_CHARACTERS:
        return f"<code>{esc(text)}</code>"
    return f'<code title="{esc(text)}">{esc(cut(text, SHOWN_CHARACTERS))}</code>'


def _rows(rows: list[tuple[str, list[str], bool]], labels: list[str], css: str = "settings") -> str:
    """(name HTML, value HTML per run, differs) rows: a table with a column per run, or, for one run or runs that
    all agree, a grid of name-value pairs."""
    same = len(labels) > 1 and all(len(set(values)) == 1 for _, values, _ in rows)
    if len(labels) == 1 or same:
        items = "".join(
            f"<div{' class=differ' if differ else ''}><dt>{name}</dt><dd>{values[0]}</dd></div>"
            for name, values, differ in rows
        )
        note = f'<p class="muted">The same in all {len(labels)} runs:</p>' if same else ""
        return f'{note}<dl class="{css}">{items}</dl>'
    head = "<th>setting</th>" + "".join(label_heading(i, label) for i, label in enumerate(labels))
    body = "".join(
        f"<tr{' class=differ' if differ else ''}><th>{name}</th>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
        for name, values, differ in rows
    )
    return table(head, body, css)


def _values(r: CardRun, task: str) -> dict:
    """What the page shows of a run's task: its recorded settings, and the other compared values (generation
    settings, the run's dtype and prompt format)."""
    return {**r.run.compared.get(task, {}), **flatten(r.run.settings.get(task) or {})}


def settings_table(runs: list[CardRun], task: str, shown: list[str], differing: set[str]) -> str:
    """The compact settings of one task (``shown``, then the keys that differ), one column per run (rows that differ
    highlighted), and all recorded settings in a closed ``<details>``."""
    have = [r for r in runs if task in r.run.settings or task in r.run.versions]
    if not have:
        return ""
    values = [_values(r, task) for r in have]
    keys = [k for k in shown if any(k in v for v in values)]
    keys += sorted(k for k in differing if k not in keys and k not in (DOCS_KEY, VERSION_KEY))
    rows = [
        (f"<code>{esc(k)}</code>", [setting_value(v.get(k), k not in v) for v in values], k in differing) for k in keys
    ]
    rows.append(("documents scored", [setting_value(r.run.n_samples.get(task)) for r in have], DOCS_KEY in differing))
    rows.append(("task version", [setting_value(r.run.versions.get(task)) for r in have], VERSION_KEY in differing))
    flat = [flatten(r.run.settings.get(task) or {}) for r in have]
    full_keys = sorted({k for f in flat for k in f})
    full = [(f"<code>{esc(k)}</code>", [setting_value(f.get(k), k not in f) for f in flat], False) for k in full_keys]
    labels = [r.label for r in have]
    return (
        f"<h3>Settings of {esc(task)}</h3>{_rows(rows, labels)}"
        f"<details><summary>all {len(full_keys)} recorded settings of {esc(task)} "
        f"(configs.{esc(task)}.metadata.longctx_settings)</summary>{_rows(full, labels, 'settings all')}"
        "</details>"
    )


def settings_diffs(runs: list[CardRun]) -> dict:
    """(run label, compared-with label) -> {task: differing keys}: each run against the first run, or in a
    checkpoint series against the checkpoint before; every task both have."""
    out = {}
    series = runs[0].step is not None
    for i, r in enumerate(runs[1:], start=1):
        base = runs[i - 1] if series else runs[0]
        common = sorted(set(r.run.compared) & set(base.run.compared))
        diffs = settings_differences(r.run, base.run, common)
        if diffs:
            out[(r.label, base.label)] = diffs
    return out


def settings_differ_box(runs: list[CardRun], diffs: dict) -> str:
    """The visible box naming what differs between each run and the first one (or, for checkpoints, the one
    before), task by task, with the values."""
    if len(runs) < 2:
        return ""
    if not diffs:
        return (
            '<div class="box ok">Same settings in every run for the tasks they share (longctx_settings, generation '
            "settings, dtype, prompt format, task version, documents scored; paths identified by equal content "
            "hashes and runtime settings are not compared).</div>"
        )
    items = []
    for (run_label, base_label), per_task in diffs.items():
        run = next(r for r in runs if r.label == run_label)
        base = next(r for r in runs if r.label == base_label)
        for task, keys in per_task.items():
            a, b = run.run.compared.get(task, {}), base.run.compared.get(task, {})
            shown = [
                f"<code>{esc(k)}</code>: {shown_code(setting_text(b.get(k, 'absent')))} → "
                f"{shown_code(setting_text(a.get(k, 'absent')))}"
                for k in keys
            ]
            items.append(
                f"<li><strong>{esc(task)}</strong>, {esc(base_label)} → {esc(run_label)}: {'; '.join(shown)}</li>"
            )
    return (
        '<div class="box warn" id="settings-differ"><h2>Settings differ</h2><p>These runs were not measured the '
        "same way: their numbers below are shown side by side but do not compare directly.</p>"
        f"<ul>{''.join(items)}</ul></div>"
    )
