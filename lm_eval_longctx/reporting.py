"""Read lm-eval results JSONs (``--output_path``): checkpoint regression gate, leaderboard, correlation check.

Pure functions over the harness's own results files (numpy / scipy only: no lm-eval, no torch), used by
``lm-eval-longctx gate|leaderboard|correlate`` and the ``scripts/`` wrappers.

A results file, as lm-eval 0.4.x writes it::

    {"results": {task: {"metric,filter": value, "metric_stderr,filter": value | "N/A", "alias": ...}},
     "higher_is_better": {task: {metric: bool | None}},
     "configs": {task: {..., "metadata": {"longctx_settings": {...}}}},
     "versions": {task: ...}, "n-samples": {task: {"original": n, "effective": n}},
     "config": {"model_args": ...}, "model_name": ...}

Anything that makes a file unusable (not JSON, no ``results``, a baseline metric missing from the run, settings
that differ) raises :class:`UnusableInput`; the CLI turns it into exit code 2 with the message.
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

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2
DEFAULT_Z = 1.96


class UnusableInput(ValueError):
    """The inputs cannot be compared (malformed file, missing metric, settings that differ): exit code 2."""


# ----------------------------------------------------------------------------------------------- loading


@dataclass
class Metric:
    value: float
    stderr: float | None  # None: the harness wrote "N/A" (no stderr for this aggregation) or none at all
    higher_is_better: bool | None  # None: informational metric (e.g. token counts); never gated


@dataclass
class Run:
    """One model's results: tasks merged from one or more results files."""

    metrics: dict[str, Metric]  # "task/metric" (filter appended as ",filter" when it is not "none")
    settings: dict[str, dict]  # task -> configs.<task>.metadata.longctx_settings (or {} when absent)
    versions: dict[str, object]
    n_samples: dict[str, object]  # task -> n-samples.<task>.effective
    model: str
    sources: dict[str, str] = field(default_factory=dict)  # task -> file it came from


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
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise UnusableInput(f"{p}: cannot read: {e}") from e
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


def metrics_of(data: dict, source: str = "") -> dict[str, Metric]:
    """Flatten ``results`` into ``{"task/metric": Metric}`` (stderr and direction attached)."""
    hib_all = data.get("higher_is_better") or {}
    out = {}
    for task, entries in data["results"].items():
        if not isinstance(entries, dict):
            raise UnusableInput(f"{source}: results.{task} is not an object")
        hib = hib_all.get(task) or {}
        for key, raw in entries.items():
            if "," not in key or "_stderr," in key:
                continue  # "alias", "name", ... and the stderr entries (read below)
            metric, filt = key.split(",", 1)
            value = _number(raw)
            if value is None:
                continue  # non-numeric entries (lists, strings) are not metrics the gate can compare
            se = _number(entries.get(f"{metric}_stderr,{filt}"))
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{metric},{filt}"
            direction = hib.get(metric)
            out[name] = Metric(value, se if se is not None and math.isfinite(se) else None,
                               direction if isinstance(direction, bool) else None)
    return out


def load_run(path) -> Run:
    """A results file, or a folder of them merged per task (the newest file, by lm-eval's timestamped name, wins)."""
    files = find_results_files(path)
    run = Run({}, {}, {}, {}, "")
    names = set()
    for f in files:
        data = load_results(f)
        names.add(model_name(data))
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
    names.discard("")
    run.model = ", ".join(sorted(names)) or Path(path).name
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

    def tolerance(self, name: str) -> dict:
        for pattern, tol in self.metrics.items():
            if fnmatch.fnmatchcase(name, pattern):
                return {**self.default, **tol}
        return dict(self.default)

    def selected(self, name: str) -> bool:
        return not self.only or any(fnmatch.fnmatchcase(name, p) for p in self.only)


_TOL_KEYS = {"abs", "rel", "higher_is_better", "skip"}


def parse_gate_config(data) -> GateConfig:
    """Validate a parsed config (dict) into a :class:`GateConfig`; unknown keys are errors, not ignored."""
    if data is None:
        return GateConfig()
    if not isinstance(data, dict):
        raise UnusableInput("gate config: the top level must be a mapping")
    unknown = set(data) - {"z", "default", "metrics", "ignore_settings", "only"}
    if unknown:
        raise UnusableInput(f"gate config: unknown keys {sorted(unknown)}")

    def tol(where, t):
        if not isinstance(t, dict) or set(t) - _TOL_KEYS:
            raise UnusableInput(f"gate config: {where} must be a mapping with keys among {sorted(_TOL_KEYS)}")
        for k in ("abs", "rel"):
            if k in t and (_number(t[k]) is None or t[k] < 0):
                raise UnusableInput(f"gate config: {where}.{k} must be a number >= 0")
        if "higher_is_better" in t and not isinstance(t["higher_is_better"], bool):
            raise UnusableInput(f"gate config: {where}.higher_is_better must be true or false")
        return dict(t)

    cfg = GateConfig()
    if "z" in data:
        if _number(data["z"]) is None or data["z"] < 0:
            raise UnusableInput("gate config: z must be a number >= 0")
        cfg.z = float(data["z"])
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
    return cfg


def load_gate_config(path) -> GateConfig:
    """JSON (``.json``) or YAML (anything else), parsed as data only (``yaml.safe_load``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise UnusableInput(f"{p}: cannot read gate config: {e}") from e
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml  # PyYAML, an lm-eval dependency

            data = yaml.safe_load(text)
    except Exception as e:  # json.JSONDecodeError / yaml.YAMLError
        raise UnusableInput(f"{p}: malformed gate config ({e})") from e
    return parse_gate_config(data)


# ----------------------------------------------------------------------------------------------- gate


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


# settings recorded for the record that change no number: where a per-token export went, and the
# `runtime` group of every task's record (speed, memory, files: settings.Setting.affects_numbers)
NOT_NUMERIC_SETTINGS = ("export_tokens", "runtime")


def settings_differences(run: Run, base: Run, tasks, ignore=()) -> dict[str, list[str]]:
    """Per task, the keys that differ between the run and the baseline: longctx_settings (dotted), the task
    version, and the number of documents scored (``--limit``). ``ignore``: dotted keys (or prefixes) to skip."""

    ignore = (*ignore, *NOT_NUMERIC_SETTINGS)

    def ignored(key):
        return any(key == i or key.startswith(i + ".") for i in ignore)

    diffs = {}
    for task in tasks:
        a, b = flatten(run.settings.get(task) or {}), flatten(base.settings.get(task) or {})
        keys = [k for k in sorted(set(a) | set(b)) if not ignored(k) and a.get(k, KeyError) != b.get(k, KeyError)]
        if run.versions.get(task) != base.versions.get(task):
            keys.append("<task version>")
        if run.n_samples.get(task) != base.n_samples.get(task):
            keys.append("<n-samples effective>")
        if keys:
            diffs[task] = keys
    return diffs


@dataclass
class GateRow:
    metric: str
    baseline: float
    baseline_se: float | None
    current: float | None
    current_se: float | None
    higher_is_better: bool | None
    tolerance: float
    noise: float  # z * sqrt(se_run^2 + se_base^2)
    status: str  # regressed | improved | ok | not gated | new


@dataclass
class GateReport:
    rows: list[GateRow]
    z: float
    baseline_model: str
    run_model: str

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if any(r.status == "regressed" for r in self.rows) else EXIT_PASS

    def markdown(self) -> str:
        n_reg = sum(r.status == "regressed" for r in self.rows)
        verdict = f"**FAIL**: {n_reg} metric(s) regressed" if n_reg else "**PASS**: no metric regressed"
        lines = [
            f"### Regression gate: `{self.run_model}` vs baseline `{self.baseline_model}`", "",
            f"{verdict} (regressed = worse by more than the tolerance and more than "
            f"z={self.z:g} x combined stderr).", "",
            "| metric | baseline | current | change | tolerance | z x stderr | status |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            arrow = {True: " (higher better)", False: " (lower better)"}.get(r.higher_is_better, "")
            change = "" if r.current is None or not math.isfinite(r.baseline) else f"{r.current - r.baseline:+.4g}"
            mark = {"regressed": "❌ regressed", "improved": "✅ improved"}.get(r.status, r.status)
            lines.append(f"| `{r.metric}`{arrow} | {_fmt(r.baseline, r.baseline_se)} | {_fmt(r.current, r.current_se)} "
                         f"| {change} | {r.tolerance:.4g} | {r.noise:.4g} | {mark} |")
        return "\n".join(lines) + "\n"


def _fmt(value, se) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.4g}" if se is None else f"{value:.4g} ± {se:.2g}"


def compare(run: Run, base: Run, config: GateConfig | None = None) -> GateReport:
    """Gate ``run`` against ``base``; raises :class:`UnusableInput` for anything that makes the comparison void.

    For each baseline metric with a direction (``higher_is_better`` of the results, or of the config):
    ``worse = (base - run)`` if higher is better else ``(run - base)``; ``tolerance = max(abs, rel * |base|)``;
    ``noise = z * sqrt(se_run^2 + se_base^2)`` (a missing stderr counts as 0). Regressed iff
    ``worse > tolerance and worse > noise``; improved iff ``-worse`` exceeds both likewise; else ok.
    """
    config = config or GateConfig()
    names = [m for m in base.metrics if config.selected(m)]
    if not names:
        raise UnusableInput("the baseline has no metrics to gate" + (" matching 'only'" if config.only else ""))
    missing = [m for m in names if m not in run.metrics]
    if missing:
        raise UnusableInput(f"metrics in the baseline but missing from the run: {', '.join(missing)}")
    tasks = sorted({m.split("/", 1)[0] for m in names})
    diffs = settings_differences(run, base, tasks, config.ignore_settings)
    if diffs:
        detail = "; ".join(f"{t}: {', '.join(keys)}" for t, keys in diffs.items())
        raise UnusableInput(f"settings that change the metrics' meaning differ between run and baseline "
                            f"(refusing to compare): {detail}")
    rows = []
    for name in names:
        b, c = base.metrics[name], run.metrics[name]
        tol_cfg = config.tolerance(name)
        hib = c.higher_is_better if c.higher_is_better is not None else b.higher_is_better
        if c.higher_is_better is not None and b.higher_is_better is not None and c.higher_is_better != b.higher_is_better:
            raise UnusableInput(f"{name}: higher_is_better differs between run and baseline")
        if "higher_is_better" in tol_cfg:
            hib = tol_cfg["higher_is_better"]
        if not (math.isfinite(b.value) and math.isfinite(c.value)):
            raise UnusableInput(f"{name}: non-finite value (baseline {b.value}, run {c.value})")
        tolerance = max(float(tol_cfg.get("abs", 0.0)), float(tol_cfg.get("rel", 0.0)) * abs(b.value))
        noise = config.z * math.hypot(c.stderr or 0.0, b.stderr or 0.0)
        if hib is None or tol_cfg.get("skip"):
            status = "not gated"
        else:
            worse = (b.value - c.value) if hib else (c.value - b.value)
            if worse > tolerance and worse > noise:
                status = "regressed"
            elif -worse > tolerance and -worse > noise:
                status = "improved"
            else:
                status = "ok"
        rows.append(GateRow(name, b.value, b.stderr, c.value, c.stderr, hib, tolerance, noise, status))
    for name in run.metrics:
        if name not in base.metrics and config.selected(name):
            c = run.metrics[name]
            rows.append(GateRow(name, float("nan"), None, c.value, c.stderr, c.higher_is_better, 0.0, 0.0, "new"))
    order = {"regressed": 0, "improved": 1, "ok": 2, "not gated": 3, "new": 4}
    rows.sort(key=lambda r: order[r.status])
    return GateReport(rows, config.z, base.model, run.model)


# ----------------------------------------------------------------------------------------------- leaderboard


@dataclass
class Leaderboard:
    models: list[str]
    metrics: list[str]
    cells: dict  # (model, metric) -> Metric

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["model"] + [c for m in self.metrics for c in (m, f"{m}_stderr")])
        for model in self.models:
            row = [model]
            for m in self.metrics:
                cell = self.cells.get((model, m))
                row += ["", ""] if cell is None else [repr(cell.value), "" if cell.stderr is None else repr(cell.stderr)]
            w.writerow(row)
        return buf.getvalue()

    def markdown(self) -> str:
        def head(m):
            hib = next((c.higher_is_better for (mo, me), c in self.cells.items() if me == m), None)
            return f"{m} {'↑' if hib else '↓' if hib is False else ''}".strip()

        lines = ["| model | " + " | ".join(head(m) for m in self.metrics) + " |",
                 "|---" * (len(self.metrics) + 1) + "|"]
        for model in self.models:
            vals = [_fmt(c.value, c.stderr) if (c := self.cells.get((model, m))) else "—" for m in self.metrics]
            lines.append(f"| {model} | " + " | ".join(vals) + " |")
        return "\n".join(lines) + "\n"

    def column(self, metric: str) -> dict[str, float]:
        return {mo: c.value for (mo, me), c in self.cells.items() if me == metric}


def build_leaderboard(paths, patterns=()) -> Leaderboard:
    """One row per model (results files of the same model merged; later files win per metric), one column per
    "task/metric" (restricted to fnmatch ``patterns`` when given)."""
    models, cells, metrics = [], {}, []
    files = [f for p in paths for f in find_results_files(p)]
    for f in files:
        data = load_results(f)
        model = model_name(data, fallback=f.parent.name)
        if model not in models:
            models.append(model)
        for name, m in metrics_of(data, str(f)).items():
            if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            cells[(model, name)] = m
            if name not in metrics:
                metrics.append(name)
    if not metrics:
        raise UnusableInput("no metrics found" + (f" matching {list(patterns)}" if patterns else ""))
    return Leaderboard(models, sorted(metrics), cells)


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


def correlate(scores: dict, benchmark: dict, n_resamples: int = 5000, seed: int = 0, level: float = 0.95) -> dict:
    """Correlations between our metric and a downstream benchmark over the models present in both."""
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
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    out_mask = projection_outliers(x, y)
    keep = ~out_mask
    if keep.sum() >= 3 and np.ptp(x[keep]) > 0 and np.ptp(y[keep]) > 0:
        sk = stats.spearmanr(x[keep], y[keep])
        sk_rho, sk_p = float(sk.statistic), float(sk.pvalue)
    else:
        sk_rho = sk_p = float("nan")
    return {
        "n_models": len(models),
        "models": models,
        "pearson": {"r": float(pr.statistic), "p": float(pr.pvalue)},
        "spearman": {"rho": float(sr.statistic), "p": float(sr.pvalue)},
        "skipped_spearman": {
            "rho": sk_rho, "p": sk_p, "n_removed": int(out_mask.sum()),
            "removed": [m for m, o in zip(models, out_mask) if o],
            "method": "Wilcox skipped correlation: bivariate outliers removed by the projection method (centre = "
                      "marginal medians of the robustly standardised scores; on each projection, flag distances > "
                      "median + sqrt(chi2_0.975,2) x ideal-fourths IQR), then Spearman on the rest; p is the plain "
                      "Spearman p of the kept points (not Wilcox's adjusted test)",
        },
        "spearman_bootstrap_ci": bootstrap_spearman_ci(x, y, n_resamples, level, seed),
        "scores": {m: [float(a), float(b)] for m, a, b in zip(models, x, y)},
    }


def read_score_csv(path, column: str | None = None, model_column: str = "model") -> dict[str, float]:
    """``{model: score}`` from a CSV with a model column and a numeric ``column`` (the only other one if None)."""
    p = Path(path)
    try:
        rows = list(csv.DictReader(p.read_text().splitlines()))
    except OSError as e:
        raise UnusableInput(f"{p}: cannot read: {e}") from e
    if not rows:
        raise UnusableInput(f"{p}: empty CSV")
    cols = list(rows[0].keys())
    if model_column not in cols:
        raise UnusableInput(f"{p}: no '{model_column}' column (columns: {cols})")
    if column is None:
        others = [c for c in cols if c != model_column and not c.endswith("_stderr")]
        if len(others) != 1:
            raise UnusableInput(f"{p}: several score columns {others}: choose one")
        column = others[0]
    if column not in cols:
        raise UnusableInput(f"{p}: no '{column}' column (columns: {cols})")
    out = {}
    for r in rows:
        v = (r[column] or "").strip()
        if v == "":
            continue  # model without this score
        try:
            out[r[model_column]] = float(v)
        except ValueError as e:
            raise UnusableInput(f"{p}: {column} of {r[model_column]!r} is not a number: {v!r}") from e
    return out
