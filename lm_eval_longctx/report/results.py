"""Read lm-eval results JSONs (``--output_path``): what the regression gate (``gate.py``), the leaderboard
(``leaderboard.py``) and the correlation check (``correlate.py``) share.

Pure functions over the harness's own output files (no lm-eval, no torch), used by
``lm-eval-longctx gate|leaderboard|correlate`` and the ``scripts/`` wrappers.

A results file, as lm-eval 0.4.x writes it::

    {"results": {task: {"metric,filter": value, "metric_stderr,filter": value | "N/A", "alias": ...}},
     "higher_is_better": {task: {metric: bool | None}},
     "configs": {task: {..., "metadata": {"longctx_settings": {...}}}},
     "versions": {task: ...}, "n-samples": {task: {"original": n, "effective": n}},
     "config": {"model_args": ...}, "model_name": ...}

With ``--log_samples`` a ``samples_<task>_<date_id>.jsonl`` sits beside ``results_<date_id>.json``; the gate then
compares the runs document by document (:mod:`lm_eval_longctx.report.paired`).

Anything that makes an input unusable (unreadable or malformed file or field, a baseline metric missing from the
run or not a finite number, settings that differ, other documents, a file that cannot be written) raises
:class:`UnusableInput`; the CLI turns it into exit code 2 with the message, so that exit 1 means "regressed" only.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .. import output_dirs
from .bounds import metric_is_lower_bound, recorded_settings

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2
# metrics of the suite whose value is a text for the reader (which lengths were skipped, and why): not compared
TEXT_NOTES = frozenset({"skipped_lengths"})
DEFAULT_Z = 1.96
# what lm-eval reports for every task of a --predict_only run (the value 999)
PREDICT_ONLY_METRIC = "bypass"


class UnusableInput(ValueError):
    """The inputs cannot be compared (malformed file, missing metric, settings that differ): exit code 2."""


# ----------------------------------------------------------------------------------------------- files


def read_text(path, what: str = "file") -> str:
    """A UTF-8 text file (a byte-order mark is allowed); any failure is :class:`UnusableInput` naming the file. A
    FIFO, device or folder is refused before it is opened (reading a FIFO would wait for a writer)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        mode = None  # reported by the read below
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise UnusableInput(f"{p}: {kind}, not a regular file: give the {what} itself")
    try:
        return p.read_bytes().decode("utf-8-sig")
    except FileNotFoundError as e:
        raise UnusableInput(f"{p}: no such {what}") from e
    except OSError as e:
        raise UnusableInput(f"{p}: cannot read the {what}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise UnusableInput(f"{p}: the {what} is not UTF-8 text ({e.reason} at byte {e.start})") from e


def write_text(path, text: str, append: bool = False, what: str = "output") -> None:
    """Write (or append) text, whole or not at all: the file is then the old one or the new one
    (``output_dirs.atomic_file``; a FIFO or device such as /dev/stdout is written in place). A missing folder or any
    other failure is :class:`UnusableInput` naming the file and the cause."""
    try:
        before = (output_dirs.read_regular_file(path) or b"") if append else b""
        output_dirs.write_atomically(path, before + text.encode("utf-8"), create_folder=False)
    except OSError as e:
        raise UnusableInput(f"{path}: cannot write the {what}: {e.strerror or e}") from e


# ----------------------------------------------------------------------------------------------- loading


@dataclass
class Metric:
    value: float
    stderr: float | None  # None: the harness wrote "N/A" (no stderr for this aggregation) or none at all
    higher_is_better: bool | None  # None: informational metric (e.g. token counts); never gated
    invalid: str | None = None  # the raw value when it is not a number (null, a string, ...): never compared
    lower_bound: bool = False  # a length that reaches the longest length tested: the true one may be longer (bounds)


@dataclass
class Run:
    """One model's results: tasks merged from one or more results files."""

    metrics: dict[str, Metric]  # "task/metric" (filter appended as ",filter" when it is not "none")
    settings: dict[str, dict]  # task -> configs.<task>.metadata.longctx_settings (or {} when absent)
    versions: dict[str, object]
    n_samples: dict[str, object]  # task -> n-samples.<task>.effective
    model: str
    sources: dict[str, str] = field(default_factory=dict)  # task -> file it came from
    compared: dict[str, dict] = field(default_factory=dict)  # task -> its signature (comparability.signature)
    results: dict[str, dict] = field(default_factory=dict)  # task -> the parsed results file it came from
    files: list[str] = field(default_factory=list)  # every results file read for this run, chosen or not
    notices: list[str] = field(default_factory=list)  # which file --newest took over which


def split_name(name: str) -> tuple[str, str, str]:
    """ "task/metric[,filter]" -> (task, metric, filter)."""
    task, rest = name.split("/", 1)
    metric, _, filt = rest.partition(",")
    return task, metric, filt or "none"


def load_results(path) -> dict:
    """Parse one results file and check it has the harness's shape."""
    p = Path(path)
    text = read_text(p, "results file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UnusableInput(f"{p}: malformed JSON ({e})") from e
    except (ValueError, RecursionError) as e:  # an integer of more than 4300 digits; nesting too deep
        raise UnusableInput(f"{p}: malformed JSON ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise UnusableInput(f"{p}: not an lm-eval results file (no top-level 'results' object)")
    for key in ("higher_is_better", "configs", "versions", "n-samples"):
        if key in data and not isinstance(data[key], dict):
            raise UnusableInput(f"{p}: '{key}' is not an object")
    for task, entries in data["results"].items():
        if isinstance(entries, dict):
            _check_format(entries, task, p)
    return data


def model_name(data: dict, fallback: str = "") -> str:
    """``model_name`` as the harness records it, else ``pretrained=`` from the model_args, else ``fallback``."""
    name = data.get("model_name")
    if isinstance(name, str) and name:
        return name
    args = (data.get("config") or {}).get("model_args")
    if isinstance(args, dict) and args.get("pretrained"):
        return str(args["pretrained"])
    if isinstance(args, str):
        for part in args.split(","):
            k, _, v = part.partition("=")
            if k.strip() == "pretrained" and v:
                return v.strip()
    return fallback


def _number(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x)
    except OverflowError:  # an integer beyond any float
        return None


def finite_number(x):
    v = _number(x)
    return v if v is not None and math.isfinite(v) else None


# the fields of a task's entry in lm-eval 0.4's "results" that are not "metric,filter"
ENTRY_FIELDS = frozenset({"alias", "name", "sample_len", "samples", " "})


def _check_format(entries: dict, task: str, source) -> None:
    """Refuse a task entry in lm-eval 0.3's format (``"acc": 0.5``, no ``,filter``): read as 0.4, it has no metric."""
    if any("," in k for k in entries):
        return
    bare = [k for k, v in entries.items() if k not in ENTRY_FIELDS and isinstance(v, (int, float))]
    if bare:
        raise UnusableInput(
            f"{source}: results.{task}.{bare[0]} has no ',filter' in its name (lm-eval 0.3's format, or another "
            "tool's): these tools read lm-eval 0.4 results ('metric,none'); re-run the task with lm-eval 0.4"
        )


def _check_size(raw, where: str, source) -> None:
    if isinstance(raw, int) and not isinstance(raw, bool) and _number(raw) is None:
        raise UnusableInput(
            f"{source}: {where} is an integer of {len(str(abs(raw)))} digits, beyond any floating-point number: "
            "not a value a task reports; correct or remove it"
        )


def tasks_with_metrics(data: dict) -> list[str]:
    """The tasks of a results dict whose entry holds at least one ``metric,filter`` value (groups without their
    own metrics are left out)."""
    return [
        task
        for task, entries in (data.get("results") or {}).items()
        if isinstance(entries, dict)
        and any("," in k and "_stderr," not in k and k.split(",", 1)[0] != PREDICT_ONLY_METRIC for k in entries)
    ]


def metrics_of(data: dict, source: str = "") -> dict[str, Metric]:
    """Flatten ``results`` into ``{"task/metric": Metric}`` (stderr and direction attached).

    A value that is not a number (null, a string, a list) is kept with ``invalid`` set, so that a tool that uses it
    can refuse it by name; a malformed stderr or direction is an error at once. The suite's text notes
    (``TEXT_NOTES``: ``forgetting_curve``'s ``skipped_lengths``) are for the reader, not metrics: they are left out.
    A length that reaches the longest length its run tested is marked ``lower_bound`` (:mod:`.bounds`)."""
    hib_all = data.get("higher_is_better") or {}
    out = {}
    for task, entries in data["results"].items():
        if not isinstance(entries, dict):
            raise UnusableInput(f"{source}: results.{task} is not an object")
        settings = recorded_settings(data, task)
        hib = hib_all.get(task) or {}
        if not isinstance(hib, dict):
            raise UnusableInput(f"{source}: higher_is_better.{task} is not an object")
        _check_format(entries, task, source)
        for key, raw in entries.items():
            if "," not in key or "_stderr," in key:
                continue  # "alias", "name", ... and the stderr entries (read below)
            metric, filt = key.split(",", 1)
            if metric in TEXT_NOTES and isinstance(raw, str) and hib.get(metric) is None:
                continue  # a note, shown in lm-eval's table
            if metric == PREDICT_ONLY_METRIC:
                continue  # --predict_only: lm-eval's placeholder (999), not a measurement
            _check_size(raw, f"results.{task}.{key}", source)
            value = _number(raw)
            invalid = None if value is not None else json.dumps(raw)
            se_key = f"{metric}_stderr,{filt}"
            se_raw = entries.get(se_key)
            _check_size(se_raw, f"results.{task}.{se_key}", source)
            se = None
            if se_raw is not None and se_raw != "N/A":
                se = _number(se_raw)
                if se is None or se < 0:
                    raise UnusableInput(
                        f"{source}: results.{task}.{se_key} is {json.dumps(se_raw)}, not a stderr "
                        f'(a number >= 0 or "N/A")'
                    )
                if not math.isfinite(se):
                    se = None  # lm-eval's bootstrap can give NaN on tiny samples: no estimate, as "N/A"
            direction = hib.get(metric)
            if direction is not None and not isinstance(direction, bool):
                raise UnusableInput(
                    f"{source}: higher_is_better.{task}.{metric} is {json.dumps(direction)}, not true, false or null"
                )
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{metric},{filt}"
            bound = metric_is_lower_bound(metric, value, entries, settings, filt)
            out[name] = Metric(float("nan") if value is None else value, se, direction, invalid, bound)
    return out


def _kind(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _object(value, where: str, source) -> dict:
    """``value`` when it is an object, ``{}`` when it is absent (null); anything else names the field and file."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnusableInput(f"{source}: {where} is {_kind(value)}, expected an object")
    return value


def longctx_settings(data: dict, task: str, source="") -> dict:
    """``configs.<task>.metadata.longctx_settings`` ({} when absent: a task of another suite); a field on the way
    that is not an object is :class:`UnusableInput` naming it."""
    cfg = _object((data.get("configs") or {}).get(task), f"configs.{task}", source)
    metadata = _object(cfg.get("metadata"), f"configs.{task}.metadata", source)
    return _object(metadata.get("longctx_settings"), f"configs.{task}.metadata.longctx_settings", source)


def n_samples_effective(data: dict, task: str, source=""):
    """``n-samples.<task>.effective`` (None when absent); an ``n-samples.<task>`` that is not an object is refused."""
    return _object((data.get("n-samples") or {}).get(task), f"n-samples.{task}", source).get("effective")


# ----------------------------------------------------------------------------------------------- gate config


def flatten(d, prefix: str = "") -> dict:
    """Nested dicts -> {"a.b.c": leaf}; lists and scalars are leaves."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
