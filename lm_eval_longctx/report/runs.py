"""Which results files a report command reads: one rule for gate, leaderboard, correlate and report.

* An input is a results file or a folder. A folder is searched for lm-eval's ``results_*.json`` (when it holds
  none, for any ``*.json``), regular files only: an entry of that name that is a FIFO, a device or a folder is
  refused before anything is opened (reading a FIFO would wait forever). Nothing under another folder given to the
  same command is read (a baseline folder inside the run folder belongs to the baseline).
* One model's results files in one folder are one run when each task is in one file (lm_eval called once per
  task). A task in several files means several runs of that model there: refused, naming the files, unless the
  command is told to take the newest (``--newest``), by the results' own ``date`` (lm-eval records when the run
  started), else the date in the file's name.
* Runs found inside a folder are ordered by a natural sort of their folders (``ckpt-200`` before ``ckpt-1000``),
  or by their dates; the commands print the order they used.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .comparability import signature
from .results import (
    Metric,
    Run,
    UnusableInput,
    load_results,
    longctx_settings,
    metrics_of,
    model_name,
    n_samples_effective,
    split_name,
    tasks_with_metrics,
)

RESULTS_GLOB = "results_*.json"
_RESULTS_NAME = re.compile(r"^results_.*\.json$")
_ANY_JSON = re.compile(r"^.*\.json$")
# lm-eval's date_id: datetime.now().isoformat().replace(":", "-"), at the end of the results file's stem
_DATE_ID = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)$")
ORDERS = ("name", "date")


def natural_key(text: str) -> list:
    """Sort key with the numbers of ``text`` compared as numbers: ckpt-200 < ckpt-1000."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", text)]


def file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: Path, what: str = "file") -> None:
    """Refuse ``path`` unless it is a regular file (after links), without opening it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as e:
        raise UnusableInput(f"{path}: no such {what}" + (" (a broken link)" if os.path.islink(path) else "")) from e
    except OSError as e:
        raise UnusableInput(f"{path}: cannot read the {what}: {e.strerror or e}") from e
    if not stat.S_ISREG(mode):
        raise UnusableInput(f"{path}: {file_kind(mode)}, not a regular file: give the {what} itself")


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def input_files(path, others=()) -> list[Path]:
    """The results files of one input: the file itself, or the regular results files below the folder that are not
    under one of the ``others`` (the command's other inputs), in a natural order of their paths."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise UnusableInput(f"{p}: no such file or folder")
    if not p.is_dir():
        regular_file(p, "results file")
        return [p]
    root = p.resolve()
    other_paths = {Path(o).resolve() for o in others}
    skip = {o for o in other_paths if o.is_dir() and o != root and _inside(o, root)}
    other_files = {o for o in other_paths if not o.is_dir()}
    found: dict[str, list[Path]] = {"results": [], "json": []}
    for folder, dirs, names in os.walk(p, onerror=None):  # links to folders are not followed (no loops)
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if (here / d).resolve() not in skip)
        for name in names + [d for d in dirs if _RESULTS_NAME.match(d)]:
            kind = "results" if _RESULTS_NAME.match(name) else "json" if _ANY_JSON.match(name) else None
            if kind is None:
                continue
            f = here / name
            if f.resolve() in other_files:
                continue  # another input of the command
            try:
                mode = os.stat(f).st_mode
            except OSError:
                mode = None
            if mode is not None and stat.S_ISREG(mode):
                found[kind].append(f)
            elif kind == "results":
                what = "a broken link" if mode is None else file_kind(mode)
                raise UnusableInput(
                    f"{f}: {what} named like a results file, not a regular file; move it out of {p}, or give the "
                    "results files themselves"
                )
    files = found["results"] or found["json"]
    if not files:
        raise UnusableInput(f"{p}: no results JSON files in this folder (lm-eval writes results_<date>.json)")
    return sorted(files, key=lambda f: natural_key(str(f.relative_to(p))))


def date_of(data: dict, path: Path) -> float | None:
    """When the run started: the results' own ``date`` (seconds since the epoch), else the date in the file name."""
    d = data.get("date")
    if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d):
        return float(d)
    m = _DATE_ID.search(path.stem)
    if m:
        for fmt in ("%Y-%m-%dT%H-%M-%S.%f", "%Y-%m-%dT%H-%M-%S"):
            try:
                when = datetime.datetime.strptime(m.group(1), fmt)
            except ValueError:
                continue
            return when.replace(tzinfo=datetime.timezone.utc).timestamp()
    return None


def date_text(date: float | None) -> str:
    if date is None:
        return "no date"
    return datetime.datetime.fromtimestamp(date, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class ResultsFile:
    path: Path
    data: dict
    model: str  # the model the harness recorded ("" when none)
    date: float | None
    tasks: list[str]  # the tasks it reports metrics for

    @classmethod
    def read(cls, path) -> ResultsFile:
        p = Path(path)
        data = load_results(p)
        return cls(p, data, model_name(data), date_of(data, p), tasks_with_metrics(data))


@dataclass
class FoundRun:
    """One run: a model's tasks, each from the results file it was read from."""

    source: Path  # the input, or the folder inside it that holds the run
    model: str
    files: dict[str, ResultsFile]  # task -> its file
    read: list[ResultsFile] = field(default_factory=list)  # every file of the run, chosen or not
    notices: list[str] = field(default_factory=list)  # what --newest chose over what

    @property
    def date(self) -> float | None:
        dates = [f.date for f in self.files.values() if f.date is not None]
        return max(dates) if dates else None


def pick_tasks(files: list[ResultsFile], newest: bool, where) -> tuple[dict[str, ResultsFile], list[str]]:
    """task -> the file it is read from: each task from its only file; a task in several files is refused
    (several runs of the model), or with ``newest`` taken from the newest file (the choice is returned as a
    notice)."""
    by_task: dict[str, list[ResultsFile]] = {}
    for f in files:
        for task in f.tasks:
            by_task.setdefault(task, []).append(f)
    chosen, notices = {}, []
    for task, candidates in by_task.items():
        if len(candidates) == 1:
            chosen[task] = candidates[0]
            continue
        listed = ", ".join(f"{c.path} ({date_text(c.date)})" for c in candidates)
        if not newest:
            raise UnusableInput(
                f"{where}: {task} is in {len(candidates)} results files of {candidates[0].model or 'one model'} "
                f"({listed}): several runs; give the results file meant, or --newest to take the newest by its date"
            )
        undated = [str(c.path) for c in candidates if c.date is None]
        if undated:
            raise UnusableInput(
                f"{where}: --newest cannot order the results files of {task}: {', '.join(undated)} records no date "
                "(lm-eval's 'date', or a date in the file name); give the results file meant"
            )
        ordered = sorted(candidates, key=lambda c: c.date or 0.0)
        if ordered[-1].date == ordered[-2].date:
            raise UnusableInput(f"{where}: --newest: {task} has two results files of one date ({listed})")
        chosen[task] = ordered[-1]
        notices.append(
            f"{task}: {ordered[-1].path} ({date_text(ordered[-1].date)}), the newest, over "
            + ", ".join(f"{c.path} ({date_text(c.date)})" for c in ordered[:-1])
        )
    return chosen, notices


def _models(files: list[ResultsFile]) -> dict[str, list[ResultsFile]]:
    out: dict[str, list[ResultsFile]] = {}
    for f in files:
        out.setdefault(f.model, []).append(f)
    return out


def _one_model(files: list[ResultsFile], where: str, way_out: str, place: str = "") -> str:
    """The one model the files name ("" when none does); results of several models are an error."""
    named = {m: fs for m, fs in _models(files).items() if m}
    if len(named) > 1:
        detail = "; ".join(
            f"{m!r} in {', '.join(f.path.name for f in fs[:3])}{' ...' if len(fs) > 3 else ''}"
            for m, fs in named.items()
        )
        raise UnusableInput(f"{where} {len(named)} different models{place} ({detail}); {way_out}")
    return next(iter(named), "")


def one_run(path, others=(), newest: bool = False, what: str = "the gate") -> FoundRun:
    """The run an input means (gate): every results file below it, of one model."""
    files = [ResultsFile.read(f) for f in input_files(path, others)]
    model = _one_model(files, f"{path}: results of", f"give {what} one model's folder or file")
    chosen, notices = pick_tasks(files, newest, path)
    return FoundRun(Path(path), model, chosen, files, notices)


def runs_in(path, others=(), newest: bool = False, order: str = "name") -> list[FoundRun]:
    """The runs of one input (report): the file itself, or one run per folder holding results files (lm-eval writes
    ``<output_path>/<model>/results_<date>.json``), ordered by a natural sort of the folders or by date."""
    if order not in ORDERS:
        raise UnusableInput(f"order {order!r}: expected one of {', '.join(ORDERS)}")
    p = Path(path)
    files = [ResultsFile.read(f) for f in input_files(p, others)]
    if not p.is_dir():
        chosen, notices = pick_tasks(files, newest, p)
        return [FoundRun(p, files[0].model, chosen, files, notices)]
    folders: dict[Path, list[ResultsFile]] = {}
    for f in files:
        folders.setdefault(f.path.parent, []).append(f)
    runs = []
    for folder, fs in folders.items():
        model = _one_model(
            fs, f"{folder}: results of", "give each model's results file as its own input", " in one folder"
        )
        chosen, notices = pick_tasks(fs, newest, folder)
        runs.append(FoundRun(folder, model, chosen, fs, notices))
    if order == "date":
        undated = [str(r.source) for r in runs if r.date is None]
        if undated:
            raise UnusableInput(f"--order date: no date in the results of {', '.join(undated)}; use --order name")
        runs.sort(key=lambda r: r.date or 0.0)
    else:
        runs.sort(key=lambda r: natural_key(str(r.source.relative_to(p))))
    return runs


def short_name(name: str) -> str:
    """A folder's last two parts (hub ids stay whole): what tells apart runs of one model read from two folders."""
    if name.startswith(("/", ".", "~")) or "\\" in name:
        return "/".join(Path(name).parts[-2:])
    return name


def distinct_labels(labels: list[str], sources: list[str]) -> list[str]:
    """The labels of runs, those that are equal told apart by the folder each run was read from (its last two
    parts, :func:`short_name`), then by their place."""
    out = list(labels)
    for suffix in (lambda i: f" [{short_name(sources[i])}]", lambda i: f" #{i + 1}"):
        now = list(out)
        for i, label in enumerate(now):
            if now.count(label) > 1:
                out[i] = label + suffix(i)
    return out


def every_file(runs) -> list[Path]:
    """Every results file the runs read, and the samples files beside them: what no output may replace."""
    out: list[Path] = []
    for run in runs:
        for f in run.read:
            out.append(f.path)
            out += sorted(f.path.parent.glob("samples_*.jsonl"))
    return out


def run_of(found: FoundRun, fallback_name: str = "") -> Run:
    """The :class:`~.results.Run` of a found run: each task's metrics, settings and signature from the file it was
    chosen from."""
    run = Run({}, {}, {}, {}, found.model or fallback_name)
    parsed: dict[str, dict[str, Metric]] = {}
    for task, f in found.files.items():
        source = str(f.path)
        if source not in parsed:
            parsed[source] = metrics_of(f.data, source)
        run.metrics.update({k: v for k, v in parsed[source].items() if split_name(k)[0] == task})
        run.sources[task] = source
        run.results[task] = f.data
        run.settings[task] = longctx_settings(f.data, task, source)
        run.versions[task] = (f.data.get("versions") or {}).get(task)
        run.n_samples[task] = n_samples_effective(f.data, task, source)
        run.compared[task] = signature(f.data, task, source, found.model)
    run.files = [str(f.path) for f in found.read]
    run.notices = list(found.notices)
    return run


def load_run(path, others=(), newest: bool = False) -> Run:
    """The run an input means (gate): a results file, or a folder of one model's results files (each task from its
    one file; with ``newest``, from the newest file that has it), never reading below one of ``others`` (the
    command's other inputs)."""
    return run_of(one_run(path, others, newest), Path(path).name)
