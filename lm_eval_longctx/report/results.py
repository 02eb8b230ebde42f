"""Read lm-eval results JSONs (``--output_path``): checkpoint regression gate, leaderboard, correlation check.

Pure functions over the harness's own output files (numpy / scipy / yaml only: no lm-eval, no torch), used by
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

import csv
import fnmatch
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from . import paired as pairing

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2
DEFAULT_Z = 1.96


class UnusableInput(ValueError):
    """The inputs cannot be compared (malformed file, missing metric, settings that differ): exit code 2."""


# ----------------------------------------------------------------------------------------------- files


def read_text(path, what: str = "file") -> str:
    """A UTF-8 text file (a byte-order mark is allowed); any failure is :class:`UnusableInput` naming the file."""
    p = Path(path)
    try:
        return p.read_bytes().decode("utf-8-sig")
    except FileNotFoundError as e:
        raise UnusableInput(f"{p}: no such {what}") from e
    except OSError as e:
        raise UnusableInput(f"{p}: cannot read the {what}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise UnusableInput(f"{p}: the {what} is not UTF-8 text ({e.reason} at byte {e.start})") from e


def write_text(path, text: str, append: bool = False, what: str = "output") -> None:
    """Write (or append) text; a missing folder or any other failure is :class:`UnusableInput` naming the file."""
    try:
        with open(path, "a" if append else "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as e:
        raise UnusableInput(f"{path}: cannot write the {what}: {e.strerror or e}") from e


# ----------------------------------------------------------------------------------------------- loading


@dataclass
class Metric:
    value: float
    stderr: float | None  # None: the harness wrote "N/A" (no stderr for this aggregation) or none at all
    higher_is_better: bool | None  # None: informational metric (e.g. token counts); never gated
    invalid: str | None = None  # the raw value when it is not a number (null, a string, ...): never compared


@dataclass
class Run:
    """One model's results: tasks merged from one or more results files."""

    metrics: dict[str, Metric]  # "task/metric" (filter appended as ",filter" when it is not "none")
    settings: dict[str, dict]  # task -> configs.<task>.metadata.longctx_settings (or {} when absent)
    versions: dict[str, object]
    n_samples: dict[str, object]  # task -> n-samples.<task>.effective
    model: str
    sources: dict[str, str] = field(default_factory=dict)  # task -> file it came from


def split_name(name: str) -> tuple[str, str, str]:
    """"task/metric[,filter]" -> (task, metric, filter)."""
    task, rest = name.split("/", 1)
    metric, _, filt = rest.partition(",")
    return task, metric, filt or "none"


def find_results_files(path) -> list[Path]:
    """A results JSON, or every ``results_*.json`` under a folder (lm-eval's naming), sorted by name (= time)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(p.rglob("results_*.json"), key=lambda f: (f.name, str(f)))
        if not files:
            files = sorted(p.rglob("*.json"), key=lambda f: (f.name, str(f)))
        if not files:
            raise UnusableInput(f"{p}: no results JSON files in this folder")
        return files
    raise UnusableInput(f"{p}: no such file or folder" if not p.exists() else f"{p}: not a regular file or folder")


def load_results(path) -> dict:
    """Parse one results file and check it has the harness's shape."""
    p = Path(path)
    text = read_text(p, "results file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UnusableInput(f"{p}: malformed JSON ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise UnusableInput(f"{p}: not an lm-eval results file (no top-level 'results' object)")
    for key in ("higher_is_better", "configs", "versions", "n-samples"):
        if key in data and not isinstance(data[key], dict):
            raise UnusableInput(f"{p}: '{key}' is not an object")
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
    return float(x)


def _finite_number(x):
    v = _number(x)
    return v if v is not None and math.isfinite(v) else None


def metrics_of(data: dict, source: str = "") -> dict[str, Metric]:
    """Flatten ``results`` into ``{"task/metric": Metric}`` (stderr and direction attached).

    A value that is not a number (null, a string, a list) is kept with ``invalid`` set, so that a tool that uses it
    can refuse it by name; a malformed stderr or direction is an error at once."""
    hib_all = data.get("higher_is_better") or {}
    out = {}
    for task, entries in data["results"].items():
        if not isinstance(entries, dict):
            raise UnusableInput(f"{source}: results.{task} is not an object")
        hib = hib_all.get(task) or {}
        if not isinstance(hib, dict):
            raise UnusableInput(f"{source}: higher_is_better.{task} is not an object")
        for key, raw in entries.items():
            if "," not in key or "_stderr," in key:
                continue  # "alias", "name", ... and the stderr entries (read below)
            metric, filt = key.split(",", 1)
            value = _number(raw)
            invalid = None if value is not None else json.dumps(raw)
            se_key = f"{metric}_stderr,{filt}"
            se_raw = entries.get(se_key)
            se = None
            if se_raw is not None and se_raw != "N/A":
                se = _number(se_raw)
                if se is None or se < 0:
                    raise UnusableInput(f"{source}: results.{task}.{se_key} is {json.dumps(se_raw)}, not a stderr "
                                        f"(a number >= 0 or \"N/A\")")
                if not math.isfinite(se):
                    se = None  # lm-eval's bootstrap can give NaN on tiny samples: no estimate, as "N/A"
            direction = hib.get(metric)
            if direction is not None and not isinstance(direction, bool):
                raise UnusableInput(f"{source}: higher_is_better.{task}.{metric} is {json.dumps(direction)}, "
                                    "not true, false or null")
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{metric},{filt}"
            out[name] = Metric(float("nan") if value is None else value, se, direction, invalid)
    return out


def load_run(path) -> Run:
    """A results file, or a folder of them merged per task (the newest file, by lm-eval's timestamped name, wins).

    A folder whose files name different models is refused: their results are not one run."""
    files = find_results_files(path)
    run = Run({}, {}, {}, {}, "")
    names: dict[str, list[str]] = {}
    for f in files:
        data = load_results(f)
        names.setdefault(model_name(data), []).append(f.name)
        for task in data["results"]:
            run.sources[task] = str(f)
            run.metrics = {k: v for k, v in run.metrics.items() if not k.startswith(task + "/")}
            cfg = (data.get("configs") or {}).get(task) or {}
            settings = (cfg.get("metadata") or {}).get("longctx_settings") if isinstance(cfg, dict) else None
            run.settings[task] = settings if isinstance(settings, dict) else {}
            run.versions[task] = (data.get("versions") or {}).get(task)
            ns = (data.get("n-samples") or {}).get(task)
            run.n_samples[task] = ns.get("effective") if isinstance(ns, dict) else None
        run.metrics.update(metrics_of(data, str(f)))
    named = {k: v for k, v in names.items() if k}
    if len(named) > 1:
        detail = "; ".join(f"{m!r} in {', '.join(fs[:3])}{' ...' if len(fs) > 3 else ''}" for m, fs in named.items())
        raise UnusableInput(f"{path}: results of {len(named)} different models ({detail}); give the gate one "
                            "model's folder or file")
    run.model = next(iter(named), "") or Path(path).name
    return run


# ----------------------------------------------------------------------------------------------- gate config


@dataclass
class GateConfig:
    """Tolerances and options; ``metrics`` maps fnmatch patterns on "task/metric" to {"abs", "rel", ...}.

    The first matching pattern, in file order, wins; ``default`` applies otherwise.
    """

    z: float = DEFAULT_Z
    default: dict = field(default_factory=lambda: {"abs": 0.0, "rel": 0.0})
    metrics: dict = field(default_factory=dict)
    ignore_settings: list = field(default_factory=list)  # dotted keys of longctx_settings not compared
    only: list = field(default_factory=list)  # patterns: gate only these metrics (default: all)
    paired: bool = True  # use per-document samples when both runs have them
    n_resamples: int = pairing.DEFAULT_N_RESAMPLES
    seed: int = pairing.DEFAULT_SEED

    def tolerance(self, name: str) -> dict:
        for pattern, tol in self.metrics.items():
            if fnmatch.fnmatchcase(name, pattern):
                return {**self.default, **tol}
        return dict(self.default)

    def selected(self, name: str) -> bool:
        return not self.only or any(fnmatch.fnmatchcase(name, p) for p in self.only)


_TOL_KEYS = {"abs", "rel", "higher_is_better", "skip"}
MIN_RESAMPLES = 100


def check_z(z, where: str = "z") -> float:
    v = _finite_number(z)
    if v is None or v < 0:
        raise UnusableInput(f"{where} must be a finite number >= 0, got {z!r}")
    return v


def check_n_resamples(n, where: str = "n_resamples") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_RESAMPLES:
        raise UnusableInput(f"{where} must be an integer >= {MIN_RESAMPLES}, got {n!r}")
    return n


def parse_gate_config(data) -> GateConfig:
    """Validate a parsed config (dict) into a :class:`GateConfig`; unknown keys are errors, not ignored."""
    if data is None:
        return GateConfig()
    if not isinstance(data, dict):
        raise UnusableInput("gate config: the top level must be a mapping")
    known = {"z", "default", "metrics", "ignore_settings", "only", "paired", "n_resamples", "seed"}
    unknown = set(data) - known
    if unknown:
        raise UnusableInput(f"gate config: unknown keys {sorted(unknown)} (known: {sorted(known)})")

    def tol(where, t):
        if not isinstance(t, dict) or set(t) - _TOL_KEYS:
            raise UnusableInput(f"gate config: {where} must be a mapping with keys among {sorted(_TOL_KEYS)}")
        for k in ("abs", "rel"):
            if k in t:
                v = _finite_number(t[k])
                if v is None or v < 0:
                    raise UnusableInput(f"gate config: {where}.{k} must be a finite number >= 0, got {t[k]!r}")
        for k in ("higher_is_better", "skip"):
            if k in t and not isinstance(t[k], bool):
                raise UnusableInput(f"gate config: {where}.{k} must be true or false")
        return dict(t)

    cfg = GateConfig()
    if "z" in data:
        cfg.z = check_z(data["z"], "gate config: z")
    if "default" in data:
        cfg.default = {"abs": 0.0, "rel": 0.0, **tol("default", data["default"])}
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise UnusableInput("gate config: metrics must map 'task/metric' patterns to tolerances")
    cfg.metrics = {str(k): tol(f"metrics[{k!r}]", v) for k, v in metrics.items()}
    for key in ("ignore_settings", "only"):
        v = data.get(key) or []
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise UnusableInput(f"gate config: {key} must be a list of strings")
        setattr(cfg, key, list(v))
    if "paired" in data:
        if not isinstance(data["paired"], bool):
            raise UnusableInput("gate config: paired must be true or false")
        cfg.paired = data["paired"]
    if "n_resamples" in data:
        cfg.n_resamples = check_n_resamples(data["n_resamples"], "gate config: n_resamples")
    if "seed" in data:
        if isinstance(data["seed"], bool) or not isinstance(data["seed"], int) or data["seed"] < 0:
            raise UnusableInput(f"gate config: seed must be an integer >= 0, got {data['seed']!r}")
        cfg.seed = data["seed"]
    return cfg


def load_gate_config(path) -> GateConfig:
    """JSON (``.json``) or YAML (anything else), parsed as data only (``yaml.safe_load``)."""
    p = Path(path)
    text = read_text(p, "gate config")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml  # PyYAML, an lm-eval dependency

            data = yaml.safe_load(text)
    except Exception as e:  # json.JSONDecodeError / yaml.YAMLError
        raise UnusableInput(f"{p}: malformed gate config ({e})") from e
    return parse_gate_config(data)


# ----------------------------------------------------------------------------------------------- settings


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


# Settings that name where something was read from, and the recorded content hashes that identify what was read.
# When one of those hashes is recorded (on both sides) and equal, the path itself changes no number and is not
# compared: the same texts under another path, the same key spans in another folder (its manifest records the
# evaluator, K, d, alpha, beta and the texts' hash), the same token stream from another copy of the tokenizer.
_DATA_HASHES = ("data.texts_sha256", "data.stream_sha256", "data.prompts_sha256")
CONTENT_IDENTIFIED = {
    "data_files": _DATA_HASHES,
    "data.data_files": _DATA_HASHES,
    "testcases": ("data.prompts_sha256",),
    "source.testcases": ("data.prompts_sha256",),
    "key_spans_dir": ("key_spans_manifest",),
    "tokenizer": ("data.stream_sha256",),
}
# A span folder whose files were not verified against its manifest's checksums is identified by its path only.
UNVERIFIED = {"key_spans_dir": "key_spans_verified"}
# Settings recorded for the record that change no number: where a per-token export went, and the `runtime` group
# of every task's record (speed, memory, devices, cache folders: declared as not affecting numbers).
NOT_NUMERIC_SETTINGS = ("export_tokens", "runtime")


def _recorded(flat: dict, prefix: str) -> dict:
    return {k: v for k, v in flat.items()
            if (k == prefix or k.startswith(prefix + ".")) and v not in (None, "", {}, [])}


def identified_by_content(key: str, a: dict, b: dict | None = None) -> bool:
    """Whether the path-like setting ``key`` is identified by a content hash recorded in flat settings ``a`` (and,
    given ``b``, recorded equal in both)."""
    flag = UNVERIFIED.get(key)
    if flag and (a.get(flag) is False or (b is not None and b.get(flag) is False)):
        return False
    found = False
    for ident in CONTENT_IDENTIFIED.get(key, ()):
        ra = _recorded(a, ident)
        rb = ra if b is None else _recorded(b, ident)
        if ra or rb:
            if ra != rb:
                return False
            found = True
    return found


def settings_differences(run: Run, base: Run, tasks, ignore=()) -> dict[str, list[str]]:
    """Per task, the keys that differ between the run and the baseline: longctx_settings (dotted), the task
    version, and the number of documents scored (``--limit``). ``ignore``: dotted keys (or prefixes) to skip.
    Paths identified by equal content hashes (:data:`CONTENT_IDENTIFIED`) and :data:`NOT_NUMERIC_SETTINGS` (the
    ``runtime`` group, ``export_tokens``) are not differences."""

    def ignored(key):
        return any(key == i or key.startswith(i + ".") for i in (*ignore, *NOT_NUMERIC_SETTINGS))

    diffs = {}
    for task in tasks:
        a, b = flatten(run.settings.get(task) or {}), flatten(base.settings.get(task) or {})
        keys = [k for k in sorted(set(a) | set(b))
                if not ignored(k) and a.get(k, KeyError) != b.get(k, KeyError) and not identified_by_content(k, a, b)]
        if run.versions.get(task) != base.versions.get(task):
            keys.append("<task version>")
        if run.n_samples.get(task) != base.n_samples.get(task):
            keys.append("<n-samples effective>")
        if keys:
            diffs[task] = keys
    return diffs


# ----------------------------------------------------------------------------------------------- gate


@dataclass
class GateRow:
    metric: str
    baseline: float | None  # None: a metric the baseline does not have (status "new")
    baseline_se: float | None
    current: float | None
    current_se: float | None
    higher_is_better: bool | None
    tolerance: float
    noise: float  # unpaired: z * sqrt(se_run^2 + se_base^2)
    status: str  # regressed | improved | ok | not gated | new
    test: str = ""  # "paired" | "unpaired" | "" (not gated / new)
    ci: tuple | None = None  # paired: CI of the change (run - baseline) at the level matching z
    note: str = ""  # why a gated row is unpaired; the paired test's aggregation and documents


@dataclass
class GateReport:
    rows: list[GateRow]
    z: float
    baseline_model: str
    run_model: str
    n_resamples: int = pairing.DEFAULT_N_RESAMPLES
    seed: int = pairing.DEFAULT_SEED

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if any(r.status == "regressed" for r in self.rows) else EXIT_PASS

    def markdown(self) -> str:
        n_reg = sum(r.status == "regressed" for r in self.rows)
        verdict = f"**FAIL**: {n_reg} metric(s) regressed" if n_reg else "**PASS**: no metric regressed"
        level = pairing.level_for_z(self.z)
        lines = [
            f"### Regression gate: `{self.run_model}` vs baseline `{self.baseline_model}`", "",
            f"{verdict}. Regressed: *paired* rows, the whole {level:.1%} CI of the change (bootstrap over the same "
            f"documents of both runs, {self.n_resamples} resamples, seed {self.seed}) is worse than the baseline by "
            f"more than the tolerance; *unpaired* rows, the change is worse by more than the tolerance and by more "
            f"than z={self.z:g} x sqrt(se_run² + se_base²).", "",
            "| metric | baseline | current | change | tolerance | test | CI of change / z x stderr | status |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            arrow = {True: " (higher better)", False: " (lower better)"}.get(r.higher_is_better, "")
            known = r.current is not None and r.baseline is not None
            change = f"{r.current - r.baseline:+.4g}" if known and math.isfinite(r.current - r.baseline) else ""
            mark = {"regressed": "❌ regressed", "improved": "✅ improved"}.get(r.status, r.status)
            if r.test == "paired":
                test, band = f"paired ({r.note})", f"[{r.ci[0] + 0.0:+.4g}, {r.ci[1] + 0.0:+.4g}]"  # no -0
            elif r.test == "unpaired":
                test, band = "unpaired" + (f" ({r.note})" if r.note else ""), f"±{r.noise:.4g}"
            else:
                test, band = "—", ""
            lines.append(f"| `{r.metric}`{arrow} | {_fmt(r.baseline, r.baseline_se)} | {_fmt(r.current, r.current_se)} "
                         f"| {change} | {r.tolerance:.4g} | {test} | {band} | {mark} |")
        return "\n".join(lines) + "\n"


def _fmt(value, se) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.4g}" if se is None else f"{value:.4g} ± {se:.2g}"


def _task_samples(run: Run, base: Run, task: str):
    """(run samples, baseline samples, None) when both runs logged this task's samples (same documents checked);
    else (None, None, why not)."""
    fr = pairing.samples_file(run.sources[task], task) if task in run.sources else None
    fb = pairing.samples_file(base.sources[task], task) if task in base.sources else None
    if fr is None or fb is None:
        missing = " and ".join(w for w, f in (("the run", fr), ("the baseline", fb)) if f is None)
        return None, None, f"no --log_samples file for {missing}"
    try:
        sr, sb = pairing.read_samples(fr), pairing.read_samples(fb)
        pairing.check_same_documents(task, sr, sb)
    except pairing.SamplesError as e:
        raise UnusableInput(str(e)) from e
    return sr, sb, None


def _paired_test(name, c: Metric, b: Metric, hib: bool, samples, run: Run, config: GateConfig):
    """(PairedResult, None), or (None, why the paired test cannot be used for this metric)."""
    task, metric, filt = split_name(name)
    sr, sb, why = samples
    if sr is None:
        return None, why
    vr, vb = sr.values(metric, filt), sb.values(metric, filt)
    if not vr and not vb:
        return None, "no per-document values"
    if set(vr) != set(vb):
        return None, "the runs have this metric on different documents"
    docs = sorted(vr)
    xr, xb = pairing.as_array([vr[d] for d in docs]), pairing.as_array([vb[d] for d in docs])
    if xr is None or xb is None or xr.shape != xb.shape:
        return None, "per-document values are not numbers"
    if xr.ndim == 2 and xr.shape[1] == 3:  # (length, copy_acc, lm_acc): ordered by length, the same in both runs
        if not np.array_equal(xr[:, 0], xb[:, 0]):
            return None, "the runs tested other lengths on these documents"
        order = np.argsort(xr[:, 0], kind="stable")
        xr, xb = xr[order], xb[order]
    if len(docs) < pairing.MIN_PAIRED_DOCS:
        return None, f"{len(docs)} documents: the paired bootstrap needs {pairing.MIN_PAIRED_DOCS}"
    agg, fn = pairing.find_aggregation(metric, xr, xb, c.value, b.value, run.settings.get(task) or {})
    if fn is None:
        return None, "per-document values do not reproduce the reported value"
    strata = pairing.strata_for(agg, xr)
    if strata is not None:
        smallest = int(np.unique(strata, return_counts=True)[1].min())
        if smallest < pairing.MIN_STRATUM_DOCS:
            return None, (f"{smallest} samples at some length: the paired bootstrap needs "
                          f"{pairing.MIN_STRATUM_DOCS} per length")
    res = pairing.paired_bootstrap(xr, xb, fn, hib, config.z, config.n_resamples, config.seed, name, agg,
                                   strata=strata)
    if not (math.isfinite(res.low) and math.isfinite(res.high)):
        return None, f"metric undefined on {res.n_degenerate} of {res.n_resamples} resamples"
    return res, None


def compare(run: Run, base: Run, config: GateConfig | None = None) -> GateReport:
    """Gate ``run`` against ``base``; raises :class:`UnusableInput` for anything that makes the comparison void.

    For each baseline metric with a direction (``higher_is_better`` of the results, or of the config):
    ``worse = (base - run)`` if higher is better else ``(run - base)``; ``tolerance = max(abs, rel * |base|)``.
    With per-document samples of both runs (paired): regressed iff the whole CI of ``worse`` (paired bootstrap
    over documents, at the level matching z) lies above the tolerance. Otherwise (unpaired): regressed iff
    ``worse > tolerance`` and ``worse > z * sqrt(se_run^2 + se_base^2)`` (a missing stderr counts as 0).
    Improved is the mirror image; else ok.
    """
    config = config or GateConfig()
    names = [m for m in base.metrics if config.selected(m)]
    if not names:
        raise UnusableInput("the baseline has no metrics to gate" + (" matching 'only'" if config.only else ""))
    missing = [m for m in names if m not in run.metrics]
    if missing:
        raise UnusableInput(f"metrics in the baseline but missing from the run: {', '.join(missing)}")
    new = [m for m in run.metrics if m not in base.metrics and config.selected(m)]
    for name in names + new:
        for who, r in (("baseline", base), ("run", run)):
            m = r.metrics.get(name)
            if m is None:
                continue
            if m.invalid is not None:
                raise UnusableInput(f"{name}: the {who}'s value is {m.invalid}, not a number "
                                    f"({r.sources.get(split_name(name)[0], '')})")
            if not math.isfinite(m.value) and name not in new:  # a new metric is shown, not compared
                raise UnusableInput(f"{name}: the {who}'s value is {m.value}, not a finite number "
                                    f"({r.sources.get(split_name(name)[0], '')})")
    tasks = sorted({split_name(m)[0] for m in names})
    diffs = settings_differences(run, base, tasks, config.ignore_settings)
    if diffs:
        detail = "; ".join(f"{t}: {', '.join(keys)}" for t, keys in diffs.items())
        raise UnusableInput(f"settings that change the metrics' meaning differ between run and baseline "
                            f"(refusing to compare): {detail}")
    samples = {}
    if config.paired:
        for task in tasks:
            samples[task] = _task_samples(run, base, task)
    rows = []
    for name in names:
        b, c = base.metrics[name], run.metrics[name]
        tol_cfg = config.tolerance(name)
        hib = c.higher_is_better if c.higher_is_better is not None else b.higher_is_better
        if c.higher_is_better is not None and b.higher_is_better is not None and c.higher_is_better != b.higher_is_better:
            raise UnusableInput(f"{name}: higher_is_better differs between run and baseline")
        if "higher_is_better" in tol_cfg:
            hib = tol_cfg["higher_is_better"]
        tolerance = max(float(tol_cfg.get("abs", 0.0)), float(tol_cfg.get("rel", 0.0)) * abs(b.value))
        noise = config.z * math.hypot(c.stderr or 0.0, b.stderr or 0.0)
        row = GateRow(name, b.value, b.stderr, c.value, c.stderr, hib, tolerance, noise, "not gated")
        if hib is not None and not tol_cfg.get("skip"):
            worse = (b.value - c.value) if hib else (c.value - b.value)
            res, why = (None, "paired test turned off") if not config.paired else _paired_test(
                name, c, b, hib, samples[split_name(name)[0]], run, config)
            if res is not None:
                # the CI of worse, as a CI of the change (run - baseline) for the table
                row.test, row.note = "paired", f"{res.n_docs} docs, {res.aggregation}" + (
                    f", {res.n_degenerate} resamples undefined, dropped" if res.n_degenerate else "")
                row.ci = (-res.high, -res.low) if hib else (res.low, res.high)
                regressed, improved = res.low > tolerance, res.high < -tolerance
            else:
                row.test, row.note = "unpaired", why or ""
                regressed = worse > tolerance and worse > noise
                improved = -worse > tolerance and -worse > noise
            row.status = "regressed" if regressed else "improved" if improved else "ok"
        rows.append(row)
    for name in new:
        c = run.metrics[name]
        rows.append(GateRow(name, None, None, c.value, c.stderr, c.higher_is_better, 0.0, 0.0, "new"))
    order = {"regressed": 0, "improved": 1, "ok": 2, "not gated": 3, "new": 4}
    rows.sort(key=lambda r: order[r.status])
    return GateReport(rows, config.z, base.model, run.model, config.n_resamples, config.seed)


# ----------------------------------------------------------------------------------------------- leaderboard


def settings_signature(data: dict, task: str) -> dict:
    """What makes a task's numbers comparable across results files: longctx_settings (flattened; paths identified
    by a recorded content hash left out), the task version and the number of documents scored."""
    cfg = (data.get("configs") or {}).get(task) or {}
    s = (cfg.get("metadata") or {}).get("longctx_settings") if isinstance(cfg, dict) else None
    flat = flatten(s) if isinstance(s, dict) else {}
    sig = {k: v for k, v in flat.items() if not identified_by_content(k, flat)
           and not any(k == i or k.startswith(i + ".") for i in NOT_NUMERIC_SETTINGS)}
    sig["<task version>"] = (data.get("versions") or {}).get(task)
    ns = (data.get("n-samples") or {}).get(task)
    sig["<n-samples effective>"] = ns.get("effective") if isinstance(ns, dict) else None
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
                out += ["", ""] if cell is None else [repr(cell.value), "" if cell.stderr is None else repr(cell.stderr)]
            w.writerow(out)
        return buf.getvalue()

    def markdown(self) -> str:
        def head(m):
            hib = next((r.cells[m].higher_is_better for r in self.rows if m in r.cells), None)
            return f"{m} {'↑' if hib else '↓' if hib is False else ''}".strip()

        lines = ["| model | " + " | ".join(head(m) for m in self.metrics) + " |",
                 "|---" * (len(self.metrics) + 1) + "|"]
        for row in self.rows:
            vals = [_fmt(c.value, c.stderr) if (c := row.cells.get(m)) else "missing" for m in self.metrics]
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
        keys = sorted({k for o in others if task in o for k in set(sig) | set(o[task])
                       if sig.get(k, KeyError) != o[task].get(k, KeyError)})
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
    "task/metric" (restricted to fnmatch ``patterns`` when given). NaN stays NaN; a metric a row lacks is missing."""
    rows: list[BoardRow] = []
    metrics: list[str] = []
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
            continue
        sigs = {t: settings_signature(data, t) for t in tasks}
        target = next((r for r in rows if r.model == model
                       and all(r.settings.get(t, sigs[t]) == sigs[t] for t in tasks)), None)
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
            raise UnusableInput(f"model {row.model!r} has results under different settings "
                                f"({_label(row.model, row.settings, others)} in {', '.join(row.sources)}); "
                                "one row per model would merge them")
        row.label = _label(row.model, row.settings, others)
    labels = [r.label for r in rows]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UnusableInput(f"rows that cannot be told apart: {dup}")
    return Leaderboard(rows, sorted(metrics))


# ----------------------------------------------------------------------------------------------- correlation

MAD_NORMAL = 0.6744897501960817  # MAD / this = sigma for normal data


def ideal_fourths(d) -> tuple[float, float]:
    """Lower and upper ideal fourths (Frigge, Hoaglin & Iglewicz 1989), the quartiles of Wilcox's boxplot rule."""
    x = np.sort(np.asarray(d, float))
    n = len(x)
    j = int(math.floor(n / 4 + 5 / 12))
    h = n / 4 + 5 / 12 - j
    return (1 - h) * x[j - 1] + h * x[j], (1 - h) * x[n - j] + h * x[n - j - 1]


def projection_outliers(x, y, rule: str = "boxplot") -> np.ndarray:
    """Bivariate outliers by Wilcox's projection method (Wilcox 2005, R function ``outpro``); boolean mask.

    Both variables are first standardised robustly ((v - median) / MADN, so the units of the two scores do not
    matter; Wilcox works on raw data). Centre = the coordinate-wise median (``outpro``'s cop=3). For each point i
    with B_i = X_i - centre != 0, every point j is projected onto the line through the centre along B_i; its
    distance from the centre is d_ij = |(X_j - centre) . B_i| / ||B_i||. Point j is flagged when, for some i,
    d_ij > median_j(d_ij) + sqrt(chi2_{0.975, 2}) * spread_j(d_ij), where spread is the interquartile range by the
    ideal fourths (``rule="boxplot"``, ``outpro``'s default MM=FALSE) or MAD/0.6745 (``rule="mad"``, MM=TRUE).
    Projections with zero spread flag nothing. On bivariate normal data the boxplot rule flags about 4-5% of points
    (n = 10..30), the MAD-median rule about 15-20% (it is applied over n projections), hence the default.
    """
    if rule not in ("boxplot", "mad"):
        raise ValueError(f"rule must be 'boxplot' or 'mad', got {rule!r}")
    pts = np.column_stack([x, y]).astype(float)
    med = np.median(pts, axis=0)
    madn = np.median(np.abs(pts - med), axis=0) / MAD_NORMAL
    scale = np.where(madn > 0, madn, np.std(pts, axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    z = (pts - med) / scale
    a = z - np.median(z, axis=0)
    cutoff = math.sqrt(stats.chi2.ppf(0.975, 2))
    flagged = np.zeros(len(z), bool)
    for b in a:
        nb = np.linalg.norm(b)
        if nb == 0:
            continue
        d = np.abs(a @ b) / nb
        m = np.median(d)
        if rule == "mad":
            spread = np.median(np.abs(d - m)) / MAD_NORMAL
        else:
            lo, hi = ideal_fourths(d)
            spread = hi - lo
        if spread > 0:
            flagged |= d > m + cutoff * spread
    return flagged


def _row_spearman(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman rho of each row pair (average ranks for ties); NaN where a row is constant."""
    rx, ry = stats.rankdata(xs, axis=1), stats.rankdata(ys, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=1) / den, np.nan)


def bootstrap_spearman_ci(x, y, n_resamples: int = 5000, level: float = 0.95, seed: int = 0) -> dict:
    """Percentile bootstrap CI of Spearman's rho over models (pairs resampled with replacement, seeded).

    Written out rather than scipy.stats.bootstrap because with few models some resamples repeat one model only
    (rho undefined); those are dropped and counted (``n_degenerate``) instead of turning the whole CI into NaN.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_resamples, len(x)))
    rho = _row_spearman(x[idx], y[idx])
    ok = rho[np.isfinite(rho)]
    alpha = (1 - level) / 2
    low, high = (np.quantile(ok, [alpha, 1 - alpha]) if len(ok) else (float("nan"), float("nan")))
    return {"low": float(low), "high": float(high), "level": level, "n_resamples": n_resamples, "seed": seed,
            "n_degenerate": int(n_resamples - len(ok)), "method": "percentile bootstrap over models"}


EXACT_PERMUTATION_MAX_N = 9  # 9! = 362880 pairings: exact enumeration; above, Monte Carlo (seeded)
MC_PERMUTATIONS = 20000


def _row_pearson(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    xm = xs - xs.mean(axis=-1, keepdims=True)
    ym = ys - ys.mean(axis=-1, keepdims=True)
    den = np.sqrt((xm * xm).sum(axis=-1) * (ym * ym).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xm * ym).sum(axis=-1) / den, np.nan)


def permutation_test(x, y, statistic: str = "pearson", seed: int = 0) -> dict:
    """Two-sided permutation p-value of a correlation: the share of pairings of x with a permutation of y whose
    |r| is at least the observed |r|. Exact (all n! pairings, the observed one included) for n <= 9; otherwise
    Monte Carlo with 20000 seeded permutations, p = (1 + hits) / (1 + 20000). Spearman = Pearson of the ranks."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if statistic == "spearman":
        x, y = stats.rankdata(x), stats.rankdata(y)
    elif statistic != "pearson":
        raise ValueError(f"statistic must be 'pearson' or 'spearman', got {statistic!r}")
    n = len(x)
    observed = float(_row_pearson(x[None], y[None])[0])
    threshold = abs(observed) * (1 - 1e-12) - 1e-15  # ties with the observed |r| count (float summation order)
    if n <= EXACT_PERMUTATION_MAX_N:
        import itertools

        perms = np.fromiter(itertools.chain.from_iterable(itertools.permutations(range(n))), dtype=np.int64)
        r = _row_pearson(x[None], y[perms.reshape(-1, n)])
        return {"p": float(np.mean(np.abs(r) >= threshold)), "method": f"exact permutation (all {len(r)} pairings)"}
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, MC_PERMUTATIONS, 5000):
        b = min(5000, MC_PERMUTATIONS - start)
        idx = rng.permuted(np.tile(np.arange(n), (b, 1)), axis=1)
        hits += int(np.sum(np.abs(_row_pearson(x[None], y[idx])) >= threshold))
    return {"p": (1 + hits) / (1 + MC_PERMUTATIONS),
            "method": f"Monte Carlo permutation ({MC_PERMUTATIONS} permutations, seed {seed})"}


def correlate(scores: dict, benchmark: dict, n_resamples: int = 5000, seed: int = 0, level: float = 0.95) -> dict:
    """Correlations between our metric and a downstream benchmark over the models present in both.

    p-values are permutation p-values (exact with few models), not the asymptotic t / normal approximations;
    every statistic carries the number of models it was computed on (``n``)."""
    models = [m for m in scores if m in benchmark]
    bad = [m for m in models if not (math.isfinite(scores[m]) and math.isfinite(benchmark[m]))]
    if bad:
        raise UnusableInput(f"non-finite scores for: {', '.join(bad)}")
    if len(models) < 4:
        raise UnusableInput(f"need at least 4 models present in both score sets, got {len(models)}: {models}")
    x = np.array([scores[m] for m in models], float)
    y = np.array([benchmark[m] for m in models], float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        raise UnusableInput("one of the score sets is constant: correlation undefined")
    n = len(models)
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    pp, sp = permutation_test(x, y, "pearson", seed), permutation_test(x, y, "spearman", seed)
    out_mask = projection_outliers(x, y)
    keep = ~out_mask
    n_kept = int(keep.sum())
    if n_kept >= 3 and np.ptp(x[keep]) > 0 and np.ptp(y[keep]) > 0:
        sk_rho = float(stats.spearmanr(x[keep], y[keep]).statistic)
        skp = permutation_test(x[keep], y[keep], "spearman", seed)
    else:
        sk_rho, skp = float("nan"), {"p": float("nan"), "method": "undefined (fewer than 3 distinct points kept)"}
    ci = bootstrap_spearman_ci(x, y, n_resamples, level, seed)
    ci["n"] = n
    return {
        "n_models": n,
        "models": models,
        "pearson": {"r": float(pr.statistic), "p": pp["p"], "p_method": pp["method"], "n": n,
                    "p_asymptotic": float(pr.pvalue)},
        "spearman": {"rho": float(sr.statistic), "p": sp["p"], "p_method": sp["method"], "n": n,
                     "p_asymptotic": float(sr.pvalue)},
        "skipped_spearman": {
            "rho": sk_rho, "p": skp["p"], "p_method": skp["method"], "n": n_kept, "n_removed": int(out_mask.sum()),
            "removed": [m for m, o in zip(models, out_mask) if o],
            "method": "Wilcox skipped correlation: bivariate outliers removed by the projection method (centre = "
                      "marginal medians of the robustly standardised scores; on each projection, flag distances > "
                      "median + sqrt(chi2_0.975,2) x ideal-fourths IQR), then Spearman on the rest; p is the "
                      "permutation p of the kept points (not Wilcox's adjusted test, which accounts for the removal)",
        },
        "spearman_bootstrap_ci": ci,
        "scores": {m: [float(a), float(b)] for m, a, b in zip(models, x, y)},
    }


def read_score_csv(path, column: str | None = None, model_column: str = "model") -> dict[str, float]:
    """``{model: score}`` from a UTF-8 CSV with a model column and a numeric ``column`` (the only other one if None).

    A model listed twice, an empty model name, a malformed CSV or a non-numeric score is :class:`UnusableInput`;
    an empty cell means "no score for this model"."""
    p = Path(path)
    text = read_text(p, "CSV file")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise UnusableInput(f"{p}: malformed CSV ({e})") from e
    if not rows:
        raise UnusableInput(f"{p}: empty CSV")
    cols = list(rows[0].keys())
    if model_column not in cols:
        raise UnusableInput(f"{p}: no '{model_column}' column (columns: {cols})")
    if column is None:
        others = [c for c in cols if c != model_column and c is not None and not c.endswith("_stderr")]
        if len(others) != 1:
            raise UnusableInput(f"{p}: several score columns {others}: choose one")
        column = others[0]
    if column not in cols:
        raise UnusableInput(f"{p}: no '{column}' column (columns: {cols})")
    out = {}
    seen = {}
    for line, r in enumerate(rows, 2):
        if None in r:
            raise UnusableInput(f"{p}:{line}: more cells than columns")
        model = (r[model_column] or "").strip()
        if not model:
            raise UnusableInput(f"{p}:{line}: empty {model_column!r}")
        if model in seen:
            raise UnusableInput(f"{p}:{line}: model {model!r} is listed twice (also on line {seen[model]}); "
                                "which score is meant?")
        seen[model] = line
        v = (r[column] or "").strip()
        if v == "":
            continue  # model without this score
        try:
            out[model] = float(v)
        except ValueError as e:
            raise UnusableInput(f"{p}:{line}: {column} of {model!r} is not a number: {v!r}") from e
    return out
