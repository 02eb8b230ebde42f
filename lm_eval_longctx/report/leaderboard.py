"""Leaderboard over results files: one row per run (or model), columns per task metric, runs labelled by the
settings that tell them apart (``lm-eval-longctx leaderboard``)."""

from __future__ import annotations

import csv
import fnmatch
import io
import json
from dataclasses import dataclass, field

from .gate import NOT_NUMERIC_SETTINGS, format_number, identified_by_content
from .results import (
    UnusableInput,
    find_results_files,
    flatten,
    load_results,
    longctx_settings,
    metrics_of,
    model_name,
    n_samples_effective,
    split_name,
)


def settings_signature(data: dict, task: str, source="") -> dict:
    """What makes a task's numbers comparable across results files: longctx_settings (flattened; paths identified
    by a recorded content hash left out), the task version and the number of documents scored. A malformed field
    is :class:`UnusableInput` naming it and ``source``."""
    flat = flatten(longctx_settings(data, task, source))
    sig = {
        k: v
        for k, v in flat.items()
        if not identified_by_content(k, flat) and not any(k == i or k.startswith(i + ".") for i in NOT_NUMERIC_SETTINGS)
    }
    sig["<task version>"] = (data.get("versions") or {}).get(task)
    sig["<n-samples effective>"] = n_samples_effective(data, task, source)
    return sig


@dataclass
class BoardRow:
    model: str
    label: str  # the model, plus the settings that tell it apart from the model's other rows
    cells: dict  # metric -> Metric
    settings: dict  # task -> settings signature
    sources: list


@dataclass
class Leaderboard:
    rows: list[BoardRow]
    metrics: list[str]
    files_without_metrics: dict[str, str] = field(default_factory=dict)  # file read -> its model: no metric selected

    @property
    def models(self) -> list[str]:
        return [r.label for r in self.rows]

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model"] + [c for m in self.metrics for c in (m, f"{m}_stderr")])
        for row in self.rows:
            out = [row.label]
            for m in self.metrics:
                cell = row.cells.get(m)
                # missing: empty; NaN: "nan" (what the run reported)
                out += (
                    ["", ""] if cell is None else [repr(cell.value), "" if cell.stderr is None else repr(cell.stderr)]
                )
            w.writerow(out)
        return buf.getvalue()

    def markdown(self) -> str:
        def head(m):
            hib = next((r.cells[m].higher_is_better for r in self.rows if m in r.cells), None)
            return f"{m} {'↑' if hib else '↓' if hib is False else ''}".strip()

        lines = [
            "| model | " + " | ".join(head(m) for m in self.metrics) + " |",
            "|---" * (len(self.metrics) + 1) + "|",
        ]
        for row in self.rows:
            vals = [format_number(c.value, c.stderr) if (c := row.cells.get(m)) else "missing" for m in self.metrics]
            lines.append(f"| {row.label} | " + " | ".join(vals) + " |")
        return "\n".join(lines) + "\n"

    def column(self, metric: str) -> dict[str, float]:
        return {r.label: r.cells[metric].value for r in self.rows if metric in r.cells}


def _label(model: str, row_settings: dict, others: list[dict]) -> str:
    """The model name plus, when the model has other rows, the settings in which this row differs from them."""
    if not others:
        return model
    parts = []
    for task in sorted(row_settings):
        sig = row_settings[task]
        keys = sorted(
            {
                k
                for o in others
                if task in o
                for k in set(sig) | set(o[task])
                if sig.get(k, KeyError) != o[task].get(k, KeyError)
            }
        )
        for k in keys:
            v = sig.get(k, "absent")
            v = v if isinstance(v, (int, float, bool)) or v is None else str(v)
            text = json.dumps(v) if not isinstance(v, str) else v
            parts.append(f"{task}.{k}={text[:24]}{'…' if len(text) > 24 else ''}")
    return f"{model} [{'; '.join(parts)}]" if parts else model


def build_leaderboard(paths, patterns=(), one_row_per_model: bool = False) -> Leaderboard:
    """One row per (model, settings): results files of one model are merged into a row only where their tasks'
    settings agree (same longctx_settings up to content-identified paths, task version, number of documents; the
    later file wins for a task with the same settings). A model with runs under other settings gets one row per
    setting, labelled by what differs; with ``one_row_per_model`` that is an error instead. One column per
    "task/metric" (restricted to fnmatch ``patterns`` when given). NaN stays NaN; a metric a row lacks is missing.
    Files with no metric selected make no row; they are listed in ``files_without_metrics``."""
    rows: list[BoardRow] = []
    metrics: list[str] = []
    without: dict[str, str] = {}
    files = [f for p in paths for f in find_results_files(p)]
    for f in files:
        data = load_results(f)
        model = model_name(data, fallback=f.parent.name)
        cells = {}
        for name, m in metrics_of(data, str(f)).items():
            if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            if m.invalid is not None:
                raise UnusableInput(f"{f}: {name} is {m.invalid}, not a number")
            cells[name] = m
            if name not in metrics:
                metrics.append(name)
        tasks = sorted({split_name(n)[0] for n in cells})
        if not tasks:
            without[str(f)] = model
            continue
        sigs = {t: settings_signature(data, t, f) for t in tasks}
        target = next(
            (r for r in rows if r.model == model and all(r.settings.get(t, sigs[t]) == sigs[t] for t in tasks)), None
        )
        if target is None:
            target = BoardRow(model, model, {}, {}, [])
            rows.append(target)
        for t in tasks:
            target.cells = {k: v for k, v in target.cells.items() if split_name(k)[0] != t}
        target.cells.update(cells)
        target.settings.update(sigs)
        target.sources.append(str(f))
    if not metrics:
        raise UnusableInput("no metrics found" + (f" matching {list(patterns)}" if patterns else ""))
    for row in rows:
        others = [r.settings for r in rows if r.model == row.model and r is not row]
        if others and one_row_per_model:
            raise UnusableInput(
                f"model {row.model!r} has results under different settings "
                f"({_label(row.model, row.settings, others)} in {', '.join(row.sources)}); "
                "one row per model would merge them"
            )
        row.label = _label(row.model, row.settings, others)
    labels = [r.label for r in rows]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UnusableInput(f"rows that cannot be told apart: {dup}")
    return Leaderboard(rows, sorted(metrics), without)


# ----------------------------------------------------------------------------------------------- correlation
