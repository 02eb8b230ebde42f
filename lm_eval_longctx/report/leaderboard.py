"""Leaderboard over results files: one row per run (or model), columns per task metric, runs labelled by the
settings that tell them apart (``lm-eval-longctx leaderboard``). A length that reaches the longest length its run
tested is shown as a bound (``≥ 976``; the CSV's ``<metric>_lower_bound`` column, :mod:`.bounds`)."""

from __future__ import annotations

import csv
import fnmatch
import io
import json
from dataclasses import dataclass, field

from .audits import AuditSummary, audits_by_model, read_audits, unmatched_text
from .bounds import LENGTH_METRICS, LOWER_BOUND_LEGEND, bound_text
from .comparability import differences, is_model_level, signature
from .evidence import THIN_EVIDENCE, thin_notes
from .gate import format_number
from .results import Metric, UnusableInput, metrics_of, split_name
from .runs import ResultsFile, date_text, distinct_labels, input_files, runs_in
from .text import csv_cell, cut_middle, md_cell, visible


@dataclass
class BoardRow:
    model: str
    label: str  # the model, plus the settings that tell it apart from the model's other rows
    cells: dict  # metric -> Metric
    settings: dict  # task -> its signature (comparability.signature)
    sources: list
    files: dict = field(default_factory=dict)  # task -> the ResultsFile its cells come from

    def model_level(self) -> dict:
        return {k: v for sig in self.settings.values() for k, v in sig.items() if is_model_level(k)}


@dataclass
class Leaderboard:
    rows: list[BoardRow]
    metrics: list[str]
    files_without_metrics: dict[str, str] = field(default_factory=dict)  # file read -> its model: no metric selected
    notices: list[str] = field(default_factory=list)  # which file --newest took over which
    files_read: list[str] = field(default_factory=list)
    audits: dict[str, AuditSummary] = field(default_factory=dict)  # model -> its audit (claimed / effective columns)
    audit_notices: list[str] = field(default_factory=list)  # the audits that match no run

    def audit_cells(self, row: BoardRow) -> list[str]:
        """The claimed / effective pair of a row (RULER's layout), or "no audit"; none at all without audits."""
        if not self.audits:
            return []
        a = self.audits.get(row.model)
        return [str(a.claimed), a.effective_text()] if a else ["no audit", "no audit"]

    @property
    def models(self) -> list[str]:
        return [r.label for r in self.rows]

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        audit_head = ["claimed_window", "effective_length"] if self.audits else []
        w.writerow(["model", *audit_head] + [csv_cell(c) for m in self.metrics for c in self._csv_columns(m)])
        for row in self.rows:
            out = [csv_cell(row.label), *(csv_cell(c) for c in self.audit_cells(row))]
            for m in self.metrics:
                cell = row.cells.get(m)
                # missing: empty; NaN: "nan" (what the run reported)
                out += (
                    ["", ""] if cell is None else [repr(cell.value), "" if cell.stderr is None else repr(cell.stderr)]
                )
                if can_be_bound(m):
                    out.append("" if cell is None else "true" if cell.lower_bound else "false")
            w.writerow(out)
        return buf.getvalue()

    @staticmethod
    def _csv_columns(metric: str) -> list[str]:
        """A metric's CSV columns: value, stderr and, for a length that can reach the longest tested, whether it
        does (a lower bound)."""
        return [metric, f"{metric}_stderr", *([f"{metric}_lower_bound"] if can_be_bound(metric) else [])]

    def markdown(self) -> str:
        def head(m):
            hib = next((r.cells[m].higher_is_better for r in self.rows if m in r.cells), None)
            return f"{md_cell(m)} {'↑' if hib else '↓' if hib is False else ''}".strip()

        audit_head = ["claimed", "effective ↑"] if self.audits else []
        lines = [
            "| " + " | ".join(["model", *audit_head, *(head(m) for m in self.metrics)]) + " |",
            "|---" * (len(self.metrics) + 1 + len(audit_head)) + "|",
        ]
        for row in self.rows:
            vals = [cell_text(c) if (c := row.cells.get(m)) else "missing" for m in self.metrics]
            cells = [md_cell(row.label), *(md_cell(c) for c in self.audit_cells(row)), *vals]
            lines.append("| " + " | ".join(cells) + " |")
        if any(c.lower_bound for r in self.rows for c in r.cells.values()):
            lines += ["", LOWER_BOUND_LEGEND]
        if self.audits:
            lines.append("")
            lines.append(
                "claimed: the window the config claims; effective: the longest context length the model uses, with "
                "its 95% bootstrap interval over documents (lm-eval-longctx audit, docs/audit.md)"
            )
        for note in [*self.thin_evidence(), *self.audit_notices]:
            lines += ["", md_cell(note)]
        return "\n".join(lines) + "\n"

    def thin_evidence(self) -> list[str]:
        """One line per row and task shown whose numbers rest on thin evidence (:mod:`.evidence`)."""
        lines = []
        for row in self.rows:
            shown = {m.partition("/")[0] for m in self.metrics if m in row.cells}
            for task, file in row.files.items():
                if task in shown and (reasons := thin_notes(file.data, task)):
                    lines.append(f"{row.label}, {task}: {'; '.join(reasons)}")
        return [f"{THIN_EVIDENCE}: {line}" for line in lines]

    def column(self, metric: str) -> dict[str, float]:
        return {r.label: r.cells[metric].value for r in self.rows if metric in r.cells}


def can_be_bound(metric: str) -> bool:
    """Whether a "task/metric" column is a length that can reach the longest length tested (:mod:`.bounds`)."""
    return split_name(metric)[1] in LENGTH_METRICS


def cell_text(cell: Metric) -> str:
    """A value as the leaderboard shows it: ``value ± stderr``, a lower bound marked ``≥``."""
    return bound_text(format_number(cell.value, cell.stderr), cell.lower_bound)


def _label(row: BoardRow, others: list[BoardRow]) -> str:
    """The model name plus, when the model has other rows, the settings in which this row differs from them (a
    setting of the models, such as the dtype, once; a task's setting after the task's name)."""
    if not others:
        return row.model
    shown: dict[str, object] = {}
    level = row.model_level()
    for other in others:
        for k in differences(level, other.model_level()):
            shown.setdefault(k, level.get(k, "absent"))
    for task in sorted(row.settings):
        sig = row.settings[task]
        for other in others:
            if task in other.settings:
                for k in differences(sig, other.settings[task]):
                    shown.setdefault(k if is_model_level(k) else f"{task}.{k}", sig.get(k, "absent"))
    parts = [
        f"{k}={cut_middle(visible(v if isinstance(v, str) else json.dumps(v, default=str)), 40)}"
        for k, v in shown.items()
    ]
    return f"{row.model} [{'; '.join(parts)}]" if parts else row.model


def _compatible(row: BoardRow, sigs: dict) -> bool:
    """A file's tasks fit a row: the same settings in every task both have, and the same model-level settings."""
    level = {k: v for sig in sigs.values() for k, v in sig.items() if is_model_level(k)}
    if differences(row.model_level(), level):
        return False
    return all(not differences(row.settings[t], sig) for t, sig in sigs.items() if t in row.settings)


def _listed(paths: list, n: int = 4) -> str:
    return ", ".join(map(str, paths[:n])) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def _take_newer(row: BoardRow, task: str, f: ResultsFile, newest: bool, notices: list) -> bool:
    """Whether ``f`` replaces the file a row already holds ``task`` from (same model, same settings): refused
    without ``newest``; with it, the newer by date wins and the choice is noted."""
    held = row.files[task]
    both = f"{held.path} ({date_text(held.date)}) and {f.path} ({date_text(f.date)})"
    if not newest:
        raise UnusableInput(
            f"{row.model!r}: {task} under the same settings in two results files ({both}): the same run twice, or "
            "a rerun; give the one meant, --newest to take the newest by its date, or --per-run for one row per run"
        )
    if held.date is None or f.date is None or held.date == f.date:
        raise UnusableInput(f"{row.model!r}: --newest cannot tell which of {both} is newer ({task})")
    newer, older = (f, held) if f.date > held.date else (held, f)
    notices.append(f"{row.model}: {task} from {newer.path}, the newest, over {older.path}")
    return newer is f


def _headlines(data: dict, task: str, source) -> set[str] | None:
    """The "task/metric" names a task declares as its headlines (``longctx_report``), or None: not declared."""
    from .card.sections import declaration

    d = declaration(data, task, source)
    return {f"{task}/{m}" for m, _ in d.headlines} if d is not None and d.headlines else None


def _selected_cells(f: ResultsFile, patterns, all_metrics: bool) -> dict[str, Metric]:
    """The metrics of a results file the board shows: those matching ``patterns`` when given, else each task's
    declared headlines (every metric with ``all_metrics``, and of a task that declares none)."""
    cells = {}
    headlines: dict[str, set[str] | None] = {}
    for name, m in metrics_of(f.data, str(f.path)).items():
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        task = split_name(name)[0]
        if task not in headlines:
            headlines[task] = _headlines(f.data, task, f.path)
        declared = headlines[task]
        if not patterns and not all_metrics and declared is not None and name not in declared:
            continue  # a task's own headlines by default; every per-length metric with all_metrics
        if m.invalid is not None:
            raise UnusableInput(f"{f.path}: {name} is {m.invalid}, not a number")
        cells[name] = m
    return cells


def _merged_rows(files: list[ResultsFile], selected, newest: bool, notices: list, without: dict) -> list[BoardRow]:
    """One row per (model, settings), files merged where their signatures agree (:func:`build_leaderboard`)."""
    rows: list[BoardRow] = []
    for f in files:
        model = f.model or f.path.parent.name
        cells = selected(f)
        tasks = sorted({split_name(n)[0] for n in cells})
        if not tasks:
            without[str(f.path)] = model
            continue
        sigs = {t: signature(f.data, t, f.path, model) for t in tasks}
        target = next((r for r in rows if r.model == model and _compatible(r, sigs)), None)
        if target is None:
            target = BoardRow(model, model, {}, {}, [])
            rows.append(target)
        taken = [t for t in tasks if t not in target.files or _take_newer(target, t, f, newest, notices)]
        for t in taken:
            target.cells = {k: v for k, v in target.cells.items() if split_name(k)[0] != t}
            target.cells.update({k: v for k, v in cells.items() if split_name(k)[0] == t})
            target.settings[t] = sigs[t]
            target.files[t] = f
        target.sources.append(str(f.path))
    return rows


def _run_rows(paths: list, selected, newest: bool, notices: list, without: dict) -> tuple[list[BoardRow], list]:
    """One row per run (``report``'s rule, :mod:`.runs`: one per folder of results files), labelled as the report
    card labels runs: the model, and where two rows have one model, the folder each was read from."""
    found = [r for i, p in enumerate(paths) for r in runs_in(p, paths[:i] + paths[i + 1 :], newest=newest)]
    rows: list[BoardRow] = []
    read_from: list[str] = []  # the folder (or file) each row's run was read from
    for run in found:
        notices += run.notices
        model = run.model or next(iter(run.files.values()), run.read[0]).path.parent.name
        row = BoardRow(model, model, {}, {}, [])
        for task, f in run.files.items():
            cells = {k: v for k, v in selected(f).items() if split_name(k)[0] == task}
            if cells:
                row.cells.update(cells)
                row.settings[task] = signature(f.data, task, f.path, model)
                row.files[task] = f
        if not row.cells:
            without.update({str(f.path): model for f in run.read})
            continue
        row.sources = sorted({str(f.path) for f in row.files.values()})
        rows.append(row)
        read_from.append(str(run.source))
    labels = distinct_labels([r.model for r in rows], read_from)
    for row, label in zip(rows, labels):
        row.label = label
    return rows, [f for r in found for f in r.read]


def build_leaderboard(
    paths,
    patterns=(),
    one_row_per_model: bool = False,
    newest: bool = False,
    audits=(),
    all_metrics: bool = False,
    per_run: bool = False,
) -> Leaderboard:
    """One row per (model, settings): results files of one model are merged into a row only where their tasks'
    signatures agree (:mod:`.comparability`: settings up to content-identified paths, generation settings, dtype,
    prompt format, task version, number of documents) and their model-level settings (tokenizer, dtype) match. A
    task of a row in two files is refused (which is meant?), or with ``newest`` taken from the newer file by date.
    A model with runs under other settings gets one row per setting, labelled by what differs; with
    ``one_row_per_model`` that is an error instead. With ``per_run``, one row per run instead (a folder of results
    files, or a file: the rule of :mod:`.runs`), runs of one model told apart by their folders. One column per
    "task/metric": restricted to fnmatch ``patterns`` when given, else to each task's declared headline metrics
    (its ``longctx_report``; every metric of a task that declares none, and of every task with ``all_metrics``).
    NaN stays NaN; a metric a row lacks is missing. Files with no metric selected make no row; they are listed in
    ``files_without_metrics``. The files are read by the rule of :mod:`.runs` (a folder's files in natural order,
    none below another input). Each audit is joined to the rows of its checkpoint (:func:`.audits.audits_by_model`);
    one that matches no row gets a row of its own, and a notice that says so."""
    if per_run and one_row_per_model:
        raise UnusableInput("--per-run and --one-row-per-model ask for opposite rows; give one of them")
    without: dict[str, str] = {}
    notices: list[str] = []
    paths = list(paths)
    chosen: dict[str, dict[str, Metric]] = {}

    def selected(f: ResultsFile) -> dict[str, Metric]:
        if str(f.path) not in chosen:
            chosen[str(f.path)] = _selected_cells(f, patterns, all_metrics)
        return chosen[str(f.path)]

    if per_run:
        rows, files = _run_rows(paths, selected, newest, notices, without)
    else:
        files = [ResultsFile.read(f) for i, p in enumerate(paths) for f in input_files(p, paths[:i] + paths[i + 1 :])]
        rows = _merged_rows(files, selected, newest, notices, without)
    metrics: list[str] = []
    for row in rows:
        metrics += [name for name in row.cells if name not in metrics]
    read = [str(f.path) for f in files]
    if not metrics:
        if patterns:
            found = sorted({n for f in files for n in metrics_of(f.data, str(f.path))})
            raise UnusableInput(
                f"no metric matching {list(patterns)} in {len(read)} results file(s) ({_listed(read)}); their metrics: "
                f"{_listed(found, 8) or 'none'}"
            )
        raise UnusableInput(
            f"no metrics in {len(read)} results file(s) ({_listed(read)}): a --predict_only run, or no task "
            "finished; give results files with metrics"
        )
    for row in [] if per_run else rows:
        others = [r for r in rows if r.model == row.model and r is not row]
        row.label = _label(row, others)
        if others and one_row_per_model:
            raise UnusableInput(
                f"model {row.model!r} has results under different settings ({visible(row.label)} in "
                f"{', '.join(row.sources)}); one row per model would merge them"
            )
    labels = [r.label for r in rows]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UnusableInput(f"rows that cannot be told apart: {[visible(d) for d in dup]}")
    audited, unmatched = audits_by_model([r.model for r in rows], read_audits(audits))
    for a in unmatched:  # an audit without a run of its checkpoint: its own row, said so
        rows.append(BoardRow(a.model, a.model, {}, {}, [a.path]))
        audited[a.model] = a
    return Leaderboard(rows, sorted(metrics), without, notices, read, audited, [unmatched_text(a) for a in unmatched])
