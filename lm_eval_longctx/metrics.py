"""Metrics: pure functions over per-token numpy arrays (no model, no lm-eval).

Conventions: ``long_lp`` and ``short_lp`` are float arrays of log-probs of the same targets under
the long and the truncated context; NaN in ``short_lp`` means "no truncated context" (positions
before K), and such a position is never a key token.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np


def long_short_difference(long_lp: np.ndarray, short_lp: np.ndarray) -> np.ndarray:
    """LSD = log P(x | long) - log P(x | short); NaN where there is no short context."""
    return np.asarray(long_lp, dtype=np.float64) - np.asarray(short_lp, dtype=np.float64)


def key_token_mask(long_lp: np.ndarray, short_lp: np.ndarray, alpha: float = 2.0, beta: float = -2.0) -> np.ndarray:
    """Key tokens of LongPPL: LSD > alpha and LCL = log P(x | long) > beta (both strict)."""
    long_lp = np.asarray(long_lp, dtype=np.float64)
    lsd = long_short_difference(long_lp, short_lp)
    with np.errstate(invalid="ignore"):
        return (lsd > alpha) & (long_lp > beta)  # NaN compares False


def soft_weights(long_lp: np.ndarray, short_lp: np.ndarray, gamma: float = 5.0) -> np.ndarray:
    """LongPPL-soft / LongCE weights min(exp(LSD), gamma); 1 where there is no short context."""
    lsd = long_short_difference(long_lp, short_lp)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.minimum(np.exp(lsd), gamma)
    return np.where(np.isnan(lsd), 1.0, w)


def nll_sum(logprobs: np.ndarray) -> float:
    """Total negative log-likelihood (float64 accumulation)."""
    return float(-np.sum(np.asarray(logprobs, dtype=np.float64)))


def perplexity_from_sums(total_nll: float, total_weight: float) -> float:
    """exp(total NLL / total weight); NaN when there is nothing to average."""
    if total_weight <= 0:
        return float("nan")
    return math.exp(total_nll / total_weight)


def token_weighted_perplexity(items: Iterable[Sequence[float]]) -> float:
    """Corpus perplexity from per-document (nll_sum, n_tokens) pairs: exp(sum nll / sum n).

    Documents with n_tokens = 0 add nothing (LongPPL drops documents without key tokens this way).
    """
    items = list(items)
    total = sum(float(x[0]) for x in items)
    weight = sum(float(x[1]) for x in items)
    return perplexity_from_sums(total, weight)


def corpus_ratio(items: Iterable[Sequence[float]]) -> float:
    """sum(numerator) / sum(denominator) over per-document pairs (e.g. key tokens / tokens)."""
    items = list(items)
    den = sum(float(x[1]) for x in items)
    return float("nan") if den <= 0 else sum(float(x[0]) for x in items) / den


def retrieval_gain_per_pair(with_logprob: np.ndarray, without_logprob: np.ndarray):
    """Per (document, anchor) pair: (gain, nll_with, nll_without), each float64 [pairs].

    Inputs are the answer tokens' log-probs, shape [pairs, answer_tokens], with and without the
    document; nll = mean over the answer tokens of -log p, gain = nll_without - nll_with (higher:
    the document helps more).
    """
    w = np.asarray(with_logprob, dtype=np.float64)
    wo = np.asarray(without_logprob, dtype=np.float64)
    if w.shape != wo.shape or w.ndim != 2 or w.shape[1] == 0:
        raise ValueError(f"expected two [pairs, answer_tokens] arrays of one shape, got {w.shape} and {wo.shape}")
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(wo))):
        raise ValueError("answer log-probs must be finite")
    nll_with, nll_without = -w.mean(axis=1), -wo.mean(axis=1)
    return nll_without - nll_with, nll_with, nll_without
