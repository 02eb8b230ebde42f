"""Checkpoint regression gate: compare a run's results with a baseline's, per metric, with tolerances and a paired
per-document test where both runs logged samples (``lm-eval-longctx gate``; docs/report-tools.md)."""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import output_dirs
from . import paired, run_samples
from .bounds import LOWER_BOUND_LEGEND, bound_text
from .comparability import (
    CONTENT_IDENTIFIED,
    DOCS_KEY,
    NOT_NUMERIC_SETTINGS,
    UNVERIFIED,
    VERSION_KEY,
    differences,
    identified_by_content,
    is_model_level,
    matching_keys,
)
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
from .text import cut_middle, md_cell, md_code, visible

__all__ = ["CONTENT_IDENTIFIED", "UNVERIFIED", "identified_by_content", "compare", "GateConfig", "GateReport"]


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


def _signature(run: Run, task: str) -> dict:
    """The task's signature; a :class:`Run` built by hand (no files) compares its settings, version and documents."""
    if task in run.compared:
        return run.compared[task]
    sig = flatten(run.settings.get(task) or {})
    sig = {k: v for k, v in sig.items() if not any(k == p or k.startswith(p + ".") for p in NOT_NUMERIC_SETTINGS)}
    return {**sig, VERSION_KEY: run.versions.get(task), DOCS_KEY: run.n_samples.get(task)}


def settings_differences(run: Run, base: Run, tasks, ignore=()) -> dict[str, list[str]]:
    """Per task, the keys in which the run's signature differs from the baseline's (:mod:`.comparability`: the
    settings, generation settings, the run's dtype and prompt format, the task version, the number of documents).
    ``ignore``: dotted keys (or prefixes) to skip."""
    diffs = {}
    for task in tasks:
        keys = differences(_signature(run, task), _signature(base, task), ignore)
        if keys:
            diffs[task] = keys
    return diffs


def difference_text(run: Run, base: Run, diffs: dict[str, list[str]], limit: int = 90) -> str:
    """``task: key (baseline value -> run value), ...; task: ...`` for a message of one line."""
    parts = []
    for task, keys in diffs.items():
        a, b = _signature(run, task), _signature(base, task)
        shown = []
        for k in keys:
            va, vb = (json.dumps(s.get(k, "absent"), default=str) for s in (a, b))
            shown.append(f"{k} ({cut_middle(visible(vb), limit)} -> {cut_middle(visible(va), limit)})")
        parts.append(f"{task}: {', '.join(shown)}")
    return "; ".join(parts)


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
    one_sided: bool = False  # the direction is recorded in one of the two results files only
    baseline_lower_bound: bool = False  # a length that reaches the longest length tested (bounds.py)
    current_lower_bound: bool = False


@dataclass
class GateReport:
    rows: list[GateRow]
    z: float
    baseline_model: str
    run_model: str
    n_resamples: int = DEFAULT_N_RESAMPLES  # (a class field named `paired` hides the module in this body)
    seed: int = DEFAULT_SEED
    files_without_directions: list[str] = field(default_factory=list)  # of one-sided rows: the files recording none

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if any(r.status == "regressed" for r in self.rows) else EXIT_PASS

    def markdown(self) -> str:
        n_reg = sum(r.status == "regressed" for r in self.rows)
        verdict = f"**FAIL**: {n_reg} metric(s) regressed" if n_reg else "**PASS**: no metric regressed"
        level = paired.level_for_z(self.z)
        lines = [
            f"### Regression gate: {md_code(self.run_model)} vs baseline {md_code(self.baseline_model)}",
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
            arrow += ("; one file)" if r.one_sided else ")") if arrow else ""
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
            shown_baseline = bound_text(format_number(r.baseline, r.baseline_se), r.baseline_lower_bound)
            shown_current = bound_text(format_number(r.current, r.current_se), r.current_lower_bound)
            lines.append(
                f"| {md_code(r.metric)}{arrow} | {shown_baseline} | {shown_current} | {change} | {r.tolerance:.4g} "
                f"| {md_cell(test)} | {band} | {mark} |"
            )
        if any(r.baseline_lower_bound or r.current_lower_bound for r in self.rows):
            lines += ["", BOUND_NOTE]
        if self.files_without_directions:
            lines += [
                "",
                "*one file*: the direction (higher_is_better) is recorded in one of the two results files only; "
                f"these record none: {md_cell(', '.join(self.files_without_directions))}.",
            ]
        return "\n".join(lines) + "\n"


BOUND_NOTE = (
    f"{LOWER_BOUND_LEGEND}; compared as one: a bound on the run shows no regression, a bound on the baseline no "
    "improvement (where higher is better)."
)


def bound_verdicts(hib: bool, run_bound: bool, base_bound: bool) -> tuple[bool, bool]:
    """(whether a regression can be shown, whether an improvement can): a lower bound hides how much higher its
    value is, so with higher-is-better a bound on the run leaves its regression unknown and a bound on the baseline
    leaves the run's improvement unknown (mirrored when lower is better)."""
    if hib:
        return not run_bound, not base_bound
    return not base_bound, not run_bound


def format_number(value, se) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.4g}" if se is None else f"{value:.4g} ± {se:.2g}"


def _task_samples(run: Run, base: Run, task: str):
    """(run samples, baseline samples, None) when both runs logged this task's samples (same documents checked);
    else (None, None, why not)."""
    fr = run_samples.samples_file(run.sources[task], task) if task in run.sources else None
    fb = run_samples.samples_file(base.sources[task], task) if task in base.sources else None
    if fr is None or fb is None:
        missing = " and ".join(w for w, f in (("the run", fr), ("the baseline", fb)) if f is None)
        return None, None, f"no --log_samples file for {missing}"
    try:
        sr, sb = run_samples.read_samples(fr), run_samples.read_samples(fb)
        run_samples.check_same_documents(task, sr, sb)
    except run_samples.SamplesError as e:
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
    """The direction ``name`` is compared in, and the results files that record none when the other one does
    ([] otherwise).

    The direction is what the results files record (``higher_is_better``, which lm-eval writes from the task's
    declaration); run and baseline recording different ones is refused; the gate config's ``higher_is_better``
    wins over both."""
    task = split_name(name)[0]
    recorded = [
        (who, r.sources.get(task, ""), m.higher_is_better)
        for who, r in (("run", run), ("baseline", base))
        if (m := r.metrics.get(name)) is not None
    ]
    configured = config.tolerance(name)
    if "higher_is_better" in configured:
        return configured["higher_is_better"], []
    found = {hib for _, _, hib in recorded if hib is not None}
    if len(found) > 1:
        detail = ", ".join(f"the {who}'s {source or 'results'}: {json.dumps(hib)}" for who, source, hib in recorded)
        raise UnusableInput(
            f"{name}: higher_is_better differs between run and baseline ({detail}): results of other versions of "
            f"the task, or edited? Re-run one, or state the direction in the gate config (metrics: {{'{name}': "
            "{higher_is_better: ...}})"
        )
    if not found:
        return None, []
    return found.pop(), [source for _, source, hib in recorded if hib is None]


def _declares_report(run: Run, task: str) -> bool:
    """The task writes its report section into its results (contract of this suite's tasks): it declares its
    metrics' directions too."""
    cfg = (run.results.get(task, {}).get("configs") or {}).get(task)
    metadata = cfg.get("metadata") if isinstance(cfg, dict) else None
    return isinstance(metadata, dict) and isinstance(metadata.get("longctx_report"), dict)


def _check_directions_recorded(run: Run, who: str, tasks) -> None:
    """A task of this suite whose results file records no direction for any of its metrics: nothing of it would be
    gated. Refused, so that a results file cannot switch its gate off by leaving higher_is_better out."""
    for task in tasks:
        if not _declares_report(run, task):
            continue
        if all(m.higher_is_better is None for n, m in run.metrics.items() if split_name(n)[0] == task):
            raise UnusableInput(
                f"{run.sources.get(task, task)}: higher_is_better records no direction for any metric of {task} "
                f"(the {who}): nothing of it could be gated. Re-run the task, or state the directions in the gate "
                f"config (metrics: {{'{task}/*': {{higher_is_better: ...}}}})"
            )


def _closest(word: str, candidates) -> str:
    found = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.5)
    return f" (closest: {found[0]})" if found else ""


def check_config_applies(config: GateConfig, run: Run, base: Run) -> None:
    """Every ``metrics`` and ``only`` pattern of the config names a metric of the run or the baseline, and every
    ``ignore_settings`` key a recorded setting: a typo is an error, not a silently ignored line."""
    names = sorted(set(run.metrics) | set(base.metrics))
    for what, patterns in (("metrics", list(config.metrics)), ("only", config.only)):
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                raise UnusableInput(
                    f"gate config: {what} pattern {pattern!r} matches no metric of the run or the baseline"
                    f"{_closest(pattern, names)}; correct it or remove it"
                )
    signatures = [_signature(r, t) for r in (run, base) for t in _tasks_of(r)]
    for key in config.ignore_settings:
        if not matching_keys(key, signatures):
            keys = {k for sig in signatures for k in sig}
            raise UnusableInput(
                f"ignore_settings / --ignore-setting {key!r} names no setting recorded in the run or the baseline"
                f"{_closest(key, keys)}; correct it or remove it"
            )


def check_not_itself(run: Run, base: Run) -> None:
    """A baseline that is the run itself (the same results files, or a copy: files of the same names, which carry the
    run's date, and the same content) is refused: a CI job whose baseline path points at the run would pass every
    checkpoint. A rerun has another date."""

    def identity(files: list[str]) -> list[tuple[str, str]]:
        return sorted((Path(f).name, output_dirs.file_sha256(f)) for f in files)

    run_files = sorted(set(run.sources.values()))
    base_files = sorted(set(base.sources.values()))
    same_paths = [Path(f).resolve() for f in run_files] == [Path(f).resolve() for f in base_files]
    if same_paths or identity(run_files) == identity(base_files):
        how = "the same files" if same_paths else "files of the same content (a copy)"
        raise UnusableInput(
            f"the baseline is the run itself: {how} ({', '.join(run_files)}); a gate against itself passes every "
            "checkpoint. Give the baseline's own results, or --allow-same to compare a run with itself on purpose"
        )


def _tasks_of(run: Run) -> list[str]:
    return sorted(set(run.compared) | set(run.settings) | {split_name(n)[0] for n in run.metrics})


def compare(run: Run, base: Run, config: GateConfig | None = None) -> GateReport:
    """Gate ``run`` against ``base``; raises :class:`UnusableInput` for anything that makes the comparison void.

    Refused first: settings that differ in a gated task, or that describe the models (tokenizer, dtype, the run's
    prompt format) in any task both runs have; the message names every differing setting of every task.
    For each baseline metric with a direction (:func:`metric_direction`: ``higher_is_better`` of the results; the
    config's overrides it):
    ``worse = (base - run)`` if higher is better else ``(run - base)``; ``tolerance = max(abs, rel * |base|)``.
    With per-document samples of both runs (paired): regressed iff the whole CI of ``worse`` (paired bootstrap
    over documents, at the level matching z) lies above the tolerance. Otherwise (unpaired): regressed iff
    ``worse > tolerance`` and ``worse > z * sqrt(se_run^2 + se_base^2)`` (a missing stderr counts as 0).
    Improved is the mirror image; else ok. A value that is a lower bound (:mod:`.bounds`) is compared as one: what
    it leaves unknown is never a verdict (:func:`bound_verdicts`).
    """
    config = config or GateConfig()
    check_config_applies(config, run, base)
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
    # every task both runs have is compared: a difference in a gated task, or one that describes the models
    # (tokenizer, dtype, the run's prompt format) in any task, makes the numbers incomparable
    shared = sorted(set(_tasks_of(run)) & set(_tasks_of(base)))
    diffs = settings_differences(run, base, shared, config.ignore_settings)
    if any(t in tasks or any(is_model_level(k) for k in keys) for t, keys in diffs.items()):
        raise UnusableInput(
            "settings that change what the metrics mean differ between run and baseline (refusing to compare): "
            f"{difference_text(run, base, diffs)}. Compare runs measured the same way, or --ignore-setting KEY for "
            "a setting that does not change the numbers"
        )
    for who, r in (("run", run), ("baseline", base)):
        _check_directions_recorded(r, who, tasks)
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
        row.one_sided = bool(lacking)
        row.baseline_lower_bound, row.current_lower_bound = b.lower_bound, c.lower_bound
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
            can_regress, can_improve = bound_verdicts(hib, c.lower_bound, b.lower_bound)
            if not (can_regress and can_improve):
                row.note = "; ".join(x for x in (row.note, "a lower bound, compared as one") if x)
            regressed, improved = regressed and can_regress, improved and can_improve
            row.status = "regressed" if regressed else "improved" if improved else "ok"
        rows.append(row)
    for name in new:
        c = run.metrics[name]
        hib, lacking = direction[name]
        row = GateRow(name, None, None, c.value, c.stderr, hib, 0.0, 0.0, "new", one_sided=bool(lacking))
        row.current_lower_bound = c.lower_bound
        rows.append(row)
    order = {"regressed": 0, "improved": 1, "ok": 2, "not gated": 3, "new": 4}
    rows.sort(key=lambda r: order[r.status])
    without = sorted({f for _, files in direction.values() for f in files})
    return GateReport(rows, config.z, base.model, run.model, config.n_resamples, config.seed, without)
