"""Checkpoint regression gate: compare a run's results with a baseline's, per metric, with tolerances and a paired
per-document test where both runs logged samples (``lm-eval-longctx gate``; docs/report-tools.md)."""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..metrics import directions
from . import paired
from .paired import DEFAULT_N_RESAMPLES, DEFAULT_SEED
from .results import (
    DEFAULT_Z,
    EXIT_PASS,
    EXIT_REGRESSION,
    Metric,
    Run,
    UnusableInput,
    finite_number,
    flatten,
    read_text,
    split_name,
)


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
    n_resamples: int = DEFAULT_N_RESAMPLES  # (a class field named `paired` hides the module in this body)
    seed: int = DEFAULT_SEED

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
    v = finite_number(z)
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
                v = finite_number(t[k])
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
    return {
        k: v for k, v in flat.items() if (k == prefix or k.startswith(prefix + ".")) and v not in (None, "", {}, [])
    }


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
        keys = [
            k
            for k in sorted(set(a) | set(b))
            if not ignored(k) and a.get(k, KeyError) != b.get(k, KeyError) and not identified_by_content(k, a, b)
        ]
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
    declared: bool = False  # the direction is the task declaration's: a results file records none


@dataclass
class GateReport:
    rows: list[GateRow]
    z: float
    baseline_model: str
    run_model: str
    n_resamples: int = DEFAULT_N_RESAMPLES  # (a class field named `paired` hides the module in this body)
    seed: int = DEFAULT_SEED
    files_without_directions: list[str] = field(default_factory=list)  # of rows whose direction is declared

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if any(r.status == "regressed" for r in self.rows) else EXIT_PASS

    def markdown(self) -> str:
        n_reg = sum(r.status == "regressed" for r in self.rows)
        verdict = f"**FAIL**: {n_reg} metric(s) regressed" if n_reg else "**PASS**: no metric regressed"
        level = paired.level_for_z(self.z)
        lines = [
            f"### Regression gate: `{self.run_model}` vs baseline `{self.baseline_model}`",
            "",
            f"{verdict}. Regressed: *paired* rows, the whole {level:.1%} CI of the change (bootstrap over the same "
            f"documents of both runs, {self.n_resamples} resamples, seed {self.seed}) is worse than the baseline by "
            f"more than the tolerance; *unpaired* rows, the change is worse by more than the tolerance and by more "
            f"than z={self.z:g} x sqrt(se_run² + se_base²).",
            "",
            "| metric | baseline | current | change | tolerance | test | CI of change / z x stderr | status |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            arrow = " (higher better" if r.higher_is_better else " (lower better" if r.higher_is_better is False else ""
            arrow += ("; declared)" if r.declared else ")") if arrow else ""
            current, baseline, ci = r.current, r.baseline, r.ci
            delta = current - baseline if current is not None and baseline is not None else None
            change = f"{delta:+.4g}" if delta is not None and math.isfinite(delta) else ""
            mark = {"regressed": "❌ regressed", "improved": "✅ improved"}.get(r.status, r.status)
            if r.test == "paired" and ci is not None:
                test, band = f"paired ({r.note})", f"[{ci[0] + 0.0:+.4g}, {ci[1] + 0.0:+.4g}]"  # no -0
            elif r.test == "unpaired":
                test, band = "unpaired" + (f" ({r.note})" if r.note else ""), f"±{r.noise:.4g}"
            else:
                test, band = "—", ""
            lines.append(
                f"| `{r.metric}`{arrow} | {format_number(r.baseline, r.baseline_se)} | {format_number(r.current, r.current_se)} "
                f"| {change} | {r.tolerance:.4g} | {test} | {band} | {mark} |"
            )
        if self.files_without_directions:
            lines += [
                "",
                "*declared*: direction from the task declaration (lm_eval_longctx/metrics/directions.py); the "
                f"results file records none: {', '.join(self.files_without_directions)}.",
            ]
        return "\n".join(lines) + "\n"


def format_number(value, se) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.4g}" if se is None else f"{value:.4g} ± {se:.2g}"


def _task_samples(run: Run, base: Run, task: str):
    """(run samples, baseline samples, None) when both runs logged this task's samples (same documents checked);
    else (None, None, why not)."""
    fr = paired.samples_file(run.sources[task], task) if task in run.sources else None
    fb = paired.samples_file(base.sources[task], task) if task in base.sources else None
    if fr is None or fb is None:
        missing = " and ".join(w for w, f in (("the run", fr), ("the baseline", fb)) if f is None)
        return None, None, f"no --log_samples file for {missing}"
    try:
        sr, sb = paired.read_samples(fr), paired.read_samples(fb)
        paired.check_same_documents(task, sr, sb)
    except paired.SamplesError as e:
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
    xr, xb = paired.as_array([vr[d] for d in docs]), paired.as_array([vb[d] for d in docs])
    if xr is None or xb is None or xr.shape != xb.shape:
        return None, "per-document values are not numbers"
    if xr.ndim == 2 and xr.shape[1] == 3:  # (length, copy_acc, lm_acc): ordered by length, the same in both runs
        if not np.array_equal(xr[:, 0], xb[:, 0]):
            return None, "the runs tested other lengths on these documents"
        order = np.argsort(xr[:, 0], kind="stable")
        xr, xb = xr[order], xb[order]
    if len(docs) < paired.MIN_PAIRED_DOCS:
        return None, f"{len(docs)} documents: the paired bootstrap needs {paired.MIN_PAIRED_DOCS}"
    agg, fn = paired.find_aggregation(metric, xr, xb, c.value, b.value, run.settings.get(task) or {})
    if fn is None:
        return None, "per-document values do not reproduce the reported value"
    strata = paired.strata_for(agg, xr)
    if strata is not None:
        smallest = int(np.unique(strata, return_counts=True)[1].min())
        if smallest < paired.MIN_STRATUM_DOCS:
            return None, (
                f"{smallest} samples at some length: the paired bootstrap needs {paired.MIN_STRATUM_DOCS} per length"
            )
    res = paired.paired_bootstrap(xr, xb, fn, hib, config.z, config.n_resamples, config.seed, name, agg, strata=strata)
    if not (math.isfinite(res.low) and math.isfinite(res.high)):
        return None, f"metric undefined on {res.n_degenerate} of {res.n_resamples} resamples"
    return res, None


def metric_direction(name: str, run: Run, base: Run, config: GateConfig) -> tuple[bool | None, list[str]]:
    """The direction ``name`` is compared in, and the results files that record none when it is taken from the task
    declaration instead ([] otherwise).

    A metric of this suite's tasks has the direction its task declares (metrics/directions.py): a results file
    that records none does not switch its gate off, one that records another is refused. Other metrics have the
    direction the results files record (refused when run and baseline differ). The gate config's
    ``higher_is_better`` wins over both."""
    task, metric, _ = split_name(name)
    recorded = [
        (who, r.sources.get(task, ""), m.higher_is_better)
        for who, r in (("run", run), ("baseline", base))
        if (m := r.metrics.get(name)) is not None
    ]
    configured = config.tolerance(name)
    declared = directions.declared_direction(task, metric)
    if isinstance(declared, directions.UnknownMetric):
        found = {hib for _, _, hib in recorded if hib is not None}
        if len(found) > 1:
            raise UnusableInput(f"{name}: higher_is_better differs between run and baseline")
        return configured.get("higher_is_better", found.pop() if found else None), []
    if "higher_is_better" in configured:
        return configured["higher_is_better"], []
    for who, source, hib in recorded:
        if hib is not None and hib != declared:
            raise UnusableInput(
                f"{name}: the {who}'s results file {source} records higher_is_better {json.dumps(hib)}, but the "
                f"task declares {json.dumps(declared)} (lm_eval_longctx/metrics/directions.py): a file of another "
                "version of the suite, or edited? Re-run the task, or state the direction in the gate config "
                f"(metrics: {{'{name}': {{higher_is_better: ...}}}})"
            )
    lacking = [source for _, source, hib in recorded if hib is None] if declared is not None else []
    return declared, lacking


def compare(run: Run, base: Run, config: GateConfig | None = None) -> GateReport:
    """Gate ``run`` against ``base``; raises :class:`UnusableInput` for anything that makes the comparison void.

    For each baseline metric with a direction (:func:`metric_direction`: the task declaration for this suite's
    metrics, else ``higher_is_better`` of the results; the config's overrides both):
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
                raise UnusableInput(
                    f"{name}: the {who}'s value is {m.invalid}, not a number ({r.sources.get(split_name(name)[0], '')})"
                )
            if not math.isfinite(m.value) and name not in new:  # a new metric is shown, not compared
                raise UnusableInput(
                    f"{name}: the {who}'s value is {m.value}, not a finite number "
                    f"({r.sources.get(split_name(name)[0], '')})"
                )
    tasks = sorted({split_name(m)[0] for m in names})
    diffs = settings_differences(run, base, tasks, config.ignore_settings)
    if diffs:
        detail = "; ".join(f"{t}: {', '.join(keys)}" for t, keys in diffs.items())
        raise UnusableInput(
            f"settings that change the metrics' meaning differ between run and baseline (refusing to compare): {detail}"
        )
    direction = {name: metric_direction(name, run, base, config) for name in names + new}
    samples = {}
    if config.paired:
        for task in tasks:
            samples[task] = _task_samples(run, base, task)
    rows = []
    for name in names:
        b, c = base.metrics[name], run.metrics[name]
        tol_cfg = config.tolerance(name)
        hib, lacking = direction[name]
        tolerance = max(float(tol_cfg.get("abs", 0.0)), float(tol_cfg.get("rel", 0.0)) * abs(b.value))
        noise = config.z * math.hypot(c.stderr or 0.0, b.stderr or 0.0)
        row = GateRow(name, b.value, b.stderr, c.value, c.stderr, hib, tolerance, noise, "not gated")
        row.declared = bool(lacking)
        if hib is not None and not tol_cfg.get("skip"):
            worse = (b.value - c.value) if hib else (c.value - b.value)
            res, why = (
                (None, "paired test turned off")
                if not config.paired
                else _paired_test(name, c, b, hib, samples[split_name(name)[0]], run, config)
            )
            if res is not None:
                # the CI of worse, as a CI of the change (run - baseline) for the table
                row.test, row.note = (
                    "paired",
                    f"{res.n_docs} docs, {res.aggregation}"
                    + (f", {res.n_degenerate} resamples undefined, dropped" if res.n_degenerate else ""),
                )
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
        hib, lacking = direction[name]
        rows.append(GateRow(name, None, None, c.value, c.stderr, hib, 0.0, 0.0, "new", declared=bool(lacking)))
    order = {"regressed": 0, "improved": 1, "ok": 2, "not gated": 3, "new": 4}
    rows.sort(key=lambda r: order[r.status])
    without = sorted({f for _, files in direction.values() for f in files})
    return GateReport(rows, config.z, base.model, run.model, config.n_resamples, config.seed, without)


# ----------------------------------------------------------------------------------------------- leaderboard
