"""The paired bootstrap of the regression gate, over the per-document values of lm-eval ``--log_samples`` files
(read by ``run_samples.read_samples``).

numpy only (and :mod:`lm_eval_longctx.metrics.per_token`, numpy only): no lm-eval, no torch.

lm-eval 0.4.13 writes, beside ``results_<date_id>.json``, one ``samples_<task>_<date_id>.jsonl`` per task. Each line
is one document under one filter::

    {"doc_id": 3, "doc": {...}, "filter": "none", "metrics": ["longppl", "ppl", ...],
     "doc_hash": sha256(json of the doc), "prompt_hash": ..., "target_hash": ...,
     "longppl": [nll_sum, n_key_tokens], "ppl": [nll_sum, n_tokens], "n_key_tokens": 12, ...}

The values are what the task's ``process_results`` returned for that document (tuples become lists), so the
corpus metric of any subset of documents can be recomputed from them. They are all the gate reads: ``resps``
(lm-eval writes ``str()`` of every response: JSON text for this suite's, a repr such as
``"SequenceScores(n=1403, long_nll=5.5488)"`` in files of earlier versions of the suite) and ``target`` (what is
predicted; ``""`` in earlier files) are passed over, so the files of earlier versions, whose per-metric values have
the same shape, are read alike. Which aggregation a metric uses is not in the files; it is found by recomputing the
reported corpus value from all the documents with each aggregation that fits the values' shape (mean for numbers;
token-weighted perplexity or a ratio of sums for pairs; the forgetting curve's memory lengths for
(length, copy_acc, lm_acc) triples), and kept only when it reproduces the reported value. Samples that reproduce
nothing are not used (the metric falls back to the unpaired test).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ..metrics import bootstrap, gain_map, per_token

# a recomputed corpus value reproduces the reported one within this relative tolerance (float summation order)
REPRODUCE_RTOL = 1e-6
DEFAULT_N_RESAMPLES = 10000
DEFAULT_SEED = 0
# Below these, a percentile bootstrap over documents covers clearly less than its nominal level (with n documents
# its spread is the plug-in one, too small by sqrt((n-1)/n), and its tails are normal-like where a t with n-1
# degrees of freedom is called for), so the gate uses the unpaired band instead.
MIN_PAIRED_DOCS = 10
MIN_STRATUM_DOCS = 5  # per tested length, for the forgetting curve's memory lengths (resampled within lengths)
_BLOCK = 1000  # resamples drawn at a time (bounds memory for many documents)
# ------------------------------------------------------------------------------------ aggregations
#
# Each aggregation maps a stack of resampled per-document values, shape (resamples, docs[, k]), to one corpus
# value per resample. They match lm_eval_longctx.metrics.per_token (the tasks' own aggregations) and lm-eval's mean.


def _mean(x):
    return x.mean(axis=1)


def _token_weighted_perplexity(x):
    nll, n = x[..., 0].sum(axis=1), x[..., 1].sum(axis=1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.exp(nll / np.where(n > 0, n, 1.0)), np.nan)


def _corpus_ratio(x):
    num, den = x[..., 0].sum(axis=1), x[..., 1].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _per_resample(fn):
    """``fn`` on each resample; a resample it cannot measure (a note, not a number) is NaN."""
    return lambda x: np.array(
        [v if isinstance(v, (int, float)) else np.nan for v in (fn(row) for row in x)], dtype=np.float64
    )


def _length_blocks(x):
    """For a stack (resamples, docs, 3) whose every row holds the same length in each column, sorted by length
    (what :func:`paired_bootstrap` draws with ``strata``): the tested lengths and each one's column slice; else
    None."""
    first = x[0, :, 0]
    if (
        len(first) == 0
        or np.any(np.diff(first) < 0)
        or not np.array_equal(x[:, :, 0], np.broadcast_to(first, x.shape[:2]))
    ):
        return None
    grid, starts = np.unique(first, return_index=True)
    ends = np.append(starts[1:], len(first))
    return grid.astype(np.int64), list(zip(starts, ends))


def _curve_stack(x, blocks):
    """Per resample and tested length: mean copy accuracy, mean LM accuracy, failed (any NaN in the length)."""
    copy_mean = np.stack([x[:, a:b, 1].mean(axis=1) for a, b in blocks], axis=1)
    lm_mean = np.stack([x[:, a:b, 2].mean(axis=1) for a, b in blocks], axis=1)
    failed = np.isnan(copy_mean) | np.isnan(lm_mean)
    return copy_mean, lm_mean, failed


def _memory_length_stack(grid, holds, tested, rule: str):
    """metrics.memory_length for each row of boolean (resamples, lengths) arrays."""
    ok = holds & tested
    if rule == "largest":
        return np.where(ok.any(axis=1), np.max(np.where(ok, grid, 0), axis=1), 0).astype(np.float64)
    if rule == "contiguous":
        end = np.where(ok.all(axis=1), len(grid), np.argmin(ok, axis=1))
        return np.where(end > 0, grid[np.maximum(end - 1, 0)], 0).astype(np.float64)
    raise ValueError(f"rule must be one of {per_token.MEMORY_LENGTH_RULES}, got {rule!r}")


def _memory_aggregations(settings: dict) -> dict:
    """The forgetting curve's aggregations over (length, copy_acc, lm_acc) items, with the run's thresholds.

    Vectorised over resamples drawn within lengths (every length keeps its number of samples, as in the task's
    design); any other stack goes through metrics.*_from_samples row by row (the same numbers, slower)."""
    s = settings or {}
    fine_t, fine_rule = float(s.get("fine_threshold", per_token.FINE_THRESHOLD)), str(s.get("fine_rule", "largest"))
    margin, coarse_rule = float(s.get("coarse_margin", per_token.COARSE_MARGIN)), str(s.get("coarse_rule", "largest"))

    def memory_length(fallback, rule, holds):
        def aggregate(x):
            lb = _length_blocks(x)
            if lb is None:
                return _per_resample(fallback)(x)
            copy_mean, lm_mean, failed = _curve_stack(x, lb[1])
            with np.errstate(invalid="ignore"):
                return _memory_length_stack(lb[0], holds(copy_mean, lm_mean), ~failed, rule)

        return aggregate

    fine = memory_length(
        lambda r: per_token.fine_memory_length_from_samples(r, fine_t, fine_rule),
        fine_rule,
        lambda copy_mean, _: copy_mean > fine_t + per_token.TIE_TOLERANCE,
    )
    coarse = memory_length(
        lambda r: per_token.coarse_memory_length_from_samples(r, margin, coarse_rule),
        coarse_rule,
        lambda copy_mean, lm_mean: per_token.copy_above_lm(copy_mean, lm_mean, margin),
    )

    def n_failed(x):
        lb = _length_blocks(x)
        if lb is None:
            return _per_resample(per_token.n_failed_lengths_from_samples)(x)
        return _curve_stack(x, lb[1])[2].sum(axis=1).astype(np.float64)

    return {"fine_memory_length": fine, "coarse_memory_length": coarse, "n_failed_lengths": n_failed}


def strata_for(aggregation: str, x):
    """Resampling strata: the forgetting curve's aggregations over all lengths resample within each length."""
    return x[:, 0] if aggregation in ("fine_memory_length", "coarse_memory_length", "n_failed_lengths") else None


def candidate_aggregations(metric: str, width: int, settings: dict) -> dict:
    """Aggregations that fit per-document values of ``width`` numbers (0: a plain number)."""
    effective = _effective_length_aggregations(metric, width, settings)
    if effective:
        return effective
    if width == 0:
        return {"mean": _mean}
    if width == 2:
        return {"token_weighted_perplexity": _token_weighted_perplexity, "corpus_ratio": _corpus_ratio}
    if width == 3:
        return {k: v for k, v in _memory_aggregations(settings).items() if k == metric}
    return {}


def _effective_length_aggregations(metric: str, width: int, settings: dict) -> dict:
    """The retrieval-gain map's effective lengths over per-document gains per length (and depth, or one gain per
    length in runs logged before), with the run's rule and lengths (the task's aggregations:
    metrics.gain_map.effective_length*_from_docs)."""
    s = settings or {}
    lengths = s.get("lengths_used") or s.get("context_lengths")
    if metric not in ("effective_length", "effective_length_abs") or not lengths or len(lengths) != width:
        return {}
    lengths, rule = tuple(int(n) for n in lengths), str(s.get("effective_rule", "contiguous"))
    threshold = float(s.get("effective_threshold", 0.5))
    if metric == "effective_length":
        fraction = float(s.get("effective_fraction", 0.5))
        one = lambda docs: gain_map.effective_length_from_docs(docs, lengths, fraction, rule, base_minimum=threshold)  # noqa: E731
    else:
        one = lambda docs: gain_map.effective_length_abs_from_docs(docs, lengths, threshold, rule)  # noqa: E731
    return {metric: _per_resample(one)}


def as_array(values: list):
    """Per-document values as a float array (docs,), (docs, k) or (docs, k, m) (the map's gain per length and
    depth); None when they are not all numbers of one shape."""

    def ok(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def numbers(v):
        return isinstance(v, list) and v and all(ok(x) for x in v)

    if all(ok(v) for v in values):
        return np.asarray(values, dtype=np.float64)
    if all(numbers(v) for v in values) and len({len(v) for v in values}) == 1:
        return np.asarray(values, dtype=np.float64)
    if all(isinstance(v, list) and v and all(numbers(x) for x in v) for v in values):
        if len({tuple(len(x) for x in v) for v in values}) == 1 and len({len(x) for x in values[0]}) == 1:
            return np.asarray(values, dtype=np.float64)
    return None


def reproduces(value: float, reported: float) -> bool:
    if not (math.isfinite(value) and math.isfinite(reported)):
        return False
    return abs(value - reported) <= REPRODUCE_RTOL * max(abs(reported), 1e-12) + 1e-12


def find_aggregation(metric: str, run_x, base_x, run_value: float, base_value: float, settings: dict):
    """(name, fn) of the aggregation that reproduces both reported values from all documents, else (None, None)."""
    width = 0 if run_x.ndim == 1 else run_x.shape[1]
    candidates = candidate_aggregations(metric, width, settings)
    if run_x.ndim > 2:  # per length and depth: only the map's effective lengths read such values
        candidates = _effective_length_aggregations(metric, width, settings)
    for name, fn in candidates.items():
        if reproduces(float(fn(run_x[None])[0]), run_value) and reproduces(float(fn(base_x[None])[0]), base_value):
            return name, fn
    return None, None


# ------------------------------------------------------------------------------------ the paired bootstrap


def level_for_z(z: float) -> float:
    """Two-sided coverage of +-z standard errors of a normal: the CI level that matches the unpaired band."""
    return 2 * NormalDist().cdf(z) - 1


@dataclass
class PairedResult:
    aggregation: str
    n_docs: int
    low: float  # CI of worse = (base - run) if higher is better else (run - base), at ``level``
    high: float
    level: float
    n_resamples: int
    n_degenerate: int  # resamples where the metric is undefined for either run (dropped)


def paired_bootstrap(
    run_x,
    base_x,
    fn,
    higher_is_better: bool,
    z: float,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = DEFAULT_SEED,
    name: str = "",
    aggregation: str = "",
    strata=None,
) -> PairedResult:
    """Percentile CI of the change in the corpus metric, resampling documents with replacement and recomputing
    the metric of both runs on the same resample (the pairing). ``name`` salts the seed so that each metric has
    its own reproducible stream whatever the order of the metrics. ``strata``: one label per document; documents
    are then drawn within their stratum (the forgetting curve's lengths, each with a fixed number of samples)."""
    n = len(run_x)
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])
    worse = []
    done = 0
    while done < n_resamples:
        b = min(_BLOCK, n_resamples - done)
        idx = bootstrap.indices(rng, n, b, strata)
        d = fn(run_x[idx]) - fn(base_x[idx])
        worse.append(-d if higher_is_better else d)
        done += b
    w = np.concatenate(worse)
    ok = w[np.isfinite(w)]
    level = level_for_z(z)
    if len(ok) < max(2, n_resamples // 2):
        low = high = float("nan")
    else:
        low, high = (float(v) for v in np.quantile(ok, [(1 - level) / 2, (1 + level) / 2]))
    return PairedResult(aggregation, n, low, high, level, n_resamples, int(n_resamples - len(ok)))
