"""Correlation check between our scores and a benchmark's: Spearman and Pearson with bootstrap CIs, permutation
tests and projection outliers (``lm-eval-longctx correlate``)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
from scipy import stats

from ..metrics import bootstrap
from .results import UnusableInput, read_text
from .text import visible

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
    idx = bootstrap.indices(np.random.default_rng(seed), len(x), n_resamples)
    rho = _row_spearman(x[idx], y[idx])
    ok = rho[np.isfinite(rho)]
    alpha = (1 - level) / 2
    low, high = np.quantile(ok, [alpha, 1 - alpha]) if len(ok) else (float("nan"), float("nan"))
    return {
        "low": float(low),
        "high": float(high),
        "level": level,
        "n_resamples": n_resamples,
        "seed": seed,
        "n_degenerate": int(n_resamples - len(ok)),
        "method": "percentile bootstrap over models",
    }


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
    return {
        "p": (1 + hits) / (1 + MC_PERMUTATIONS),
        "method": f"Monte Carlo permutation ({MC_PERMUTATIONS} permutations, seed {seed})",
    }


def describe_left_out(left_out: dict) -> str:
    return "; ".join(f"{visible(m)} ({why})" for m, why in left_out.items())


def correlate(
    scores: dict,
    benchmark: dict,
    n_resamples: int = 5000,
    seed: int = 0,
    level: float = 0.95,
    left_out: dict | None = None,
) -> dict:
    """Correlations between our metric and a downstream benchmark over the models present in both.

    p-values are permutation p-values (exact with few models), not the asymptotic t / normal approximations;
    every statistic carries the number of models it was computed on (``n``). ``left_out`` in the result names
    every model of either set that is not used, with the reason; ``left_out`` given: models the caller already
    left out (``{model: reason}``, e.g. a results file without the metric), whose reasons take precedence."""
    models = [m for m in scores if m in benchmark]
    dropped = {m: why for m, why in (left_out or {}).items() if m not in models}
    for m in scores:
        if m not in benchmark:
            dropped.setdefault(m, "no score in the benchmark CSV")
    for m in benchmark:
        if m not in scores:
            dropped.setdefault(m, "not in the scores")
    dropped = dict(sorted(dropped.items()))
    bad = [m for m in models if not (math.isfinite(scores[m]) and math.isfinite(benchmark[m]))]
    if bad:
        raise UnusableInput(f"non-finite scores for: {', '.join(bad)}")
    if len(models) < 4:
        raise UnusableInput(
            f"need at least 4 models present in both score sets, got {len(models)}: {models}"
            + (f"; left out: {describe_left_out(dropped)}" if dropped else "")
        )
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
        "left_out": dropped,
        "pearson": {
            "r": float(pr.statistic),
            "p": pp["p"],
            "p_method": pp["method"],
            "n": n,
            "p_asymptotic": float(pr.pvalue),
        },
        "spearman": {
            "rho": float(sr.statistic),
            "p": sp["p"],
            "p_method": sp["method"],
            "n": n,
            "p_asymptotic": float(sr.pvalue),
        },
        "skipped_spearman": {
            "rho": sk_rho,
            "p": skp["p"],
            "p_method": skp["method"],
            "n": n_kept,
            "n_removed": int(out_mask.sum()),
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
        header = next(csv.reader(io.StringIO(text, newline="")), [])
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise UnusableInput(f"{p}: malformed CSV ({e})") from e
    for name in dict.fromkeys(header):
        at = [i + 1 for i, h in enumerate(header) if h == name]
        if len(at) > 1:  # a dict of the row would keep the last of them, silently
            raise UnusableInput(
                f"{p}: column {visible(name)!r} appears {len(at)} times in the header (columns "
                f"{', '.join(map(str, at))}): which one is meant? Rename or remove the others"
            )
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
    seen: dict[str, int] = {}
    for line, r in enumerate(rows, 2):
        if None in r:
            raise UnusableInput(f"{p}:{line}: more cells than columns")
        model = (r[model_column] or "").strip()
        if not model:
            raise UnusableInput(f"{p}:{line}: empty {model_column!r}")
        if model in seen:
            raise UnusableInput(
                f"{p}:{line}: model {model!r} is listed twice (also on line {seen[model]}); which score is meant?"
            )
        seen[model] = line
        v = (r[column] or "").strip()
        if v == "":
            continue  # model without this score
        try:
            out[model] = float(v)
        except ValueError as e:
            raise UnusableInput(f"{p}:{line}: {column} of {model!r} is not a number: {v!r}") from e
    return out
