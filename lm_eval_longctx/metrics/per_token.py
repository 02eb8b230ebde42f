"""Metrics: pure functions over per-token numpy arrays (no model, no lm-eval).

Conventions: ``long_lp`` and ``short_lp`` are float arrays of log-probs of the same targets under
the long and the truncated context; NaN in ``short_lp`` means "no truncated context" (positions
before K), and such a position is never a key token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


def token_weighted_perplexity_or(note: str, items: Iterable[Sequence[float]]) -> float | str:
    """``token_weighted_perplexity``, or ``note`` when the items hold no token at all (a reason, not a NaN)."""
    items = list(items)
    if sum(float(x[1]) for x in items) <= 0:
        return note
    return token_weighted_perplexity(items)


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


# ---------------------------------------------------------------- forgetting curve
#
# Per sample: the copy length l, the copy accuracy and the LM accuracy (teacher-forced greedy
# accuracy over the scored slice); NaN accuracy marks a sample whose length failed to run.

FINE_THRESHOLD = 0.99  # fine-grained memory: copy accuracy > 99%
COARSE_MARGIN = 0.01  # coarse-grained memory: copy accuracy > LM accuracy + 1 point
MEMORY_LENGTH_RULES = ("largest", "contiguous")
# Both conditions are strict. Means of per-sample ratios carry float rounding (0.75 - 0.74 is
# 0.010000000000000009), so a value must clear its threshold by more than this to count: an
# exact tie never passes.
TIE_TOLERANCE = 1e-9


def forgetting_curve_by_length(lengths, copy_acc, lm_acc) -> dict[str, np.ndarray]:
    """Per tested length (ascending): mean and std (ddof = 0, as the reference's ``np.std``) of the
    copy and LM accuracies over its samples, the sample count, and whether the length failed.

    A length fails when any of its samples has a NaN accuracy; its means and stds are then NaN (a
    curve point from the samples that happened to run would be biased).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    copy_acc = np.asarray(copy_acc, dtype=np.float64)
    lm_acc = np.asarray(lm_acc, dtype=np.float64)
    if not (lengths.shape == copy_acc.shape == lm_acc.shape) or lengths.ndim != 1:
        raise ValueError(
            f"expected three 1-D arrays of one shape, got {lengths.shape}, {copy_acc.shape}, {lm_acc.shape}"
        )
    grid = np.unique(lengths)
    out = {k: np.full(len(grid), np.nan) for k in ("copy_mean", "copy_std", "lm_mean", "lm_std")}
    out["length"] = grid
    out["n"] = np.zeros(len(grid), dtype=np.int64)
    out["failed"] = np.zeros(len(grid), dtype=bool)
    for i, length in enumerate(grid):
        at = lengths == length
        c, m = copy_acc[at], lm_acc[at]
        out["n"][i] = int(at.sum())
        if np.isnan(c).any() or np.isnan(m).any():
            out["failed"][i] = True
            continue
        out["copy_mean"][i], out["copy_std"][i] = c.mean(), c.std()
        out["lm_mean"][i], out["lm_std"][i] = m.mean(), m.std()
    return out


def memory_length(lengths, holds, tested=None, rule: str = "largest") -> int:
    """The memory length of a condition over tested lengths (ascending; 0 when none qualifies).

    * ``largest``: the largest tested length at which the condition holds (the paper's wording).
      A curve that dips and recovers keeps its later lengths; short lengths decide only when no
      longer length qualifies.
    * ``contiguous``: the largest L such that the condition holds at every tested length <= L; a
      failed (untested) length ends the run, since nothing is known there.

    Failed lengths (``tested`` False) never qualify.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    holds = np.asarray(holds, dtype=bool)
    tested = np.ones(len(lengths), dtype=bool) if tested is None else np.asarray(tested, dtype=bool)
    if not (lengths.shape == holds.shape == tested.shape):
        raise ValueError("lengths, holds and tested must have one shape")
    if len(lengths) > 1 and np.any(np.diff(lengths) <= 0):
        raise ValueError("lengths must be strictly increasing")
    ok = holds & tested
    if rule == "largest":
        return int(lengths[ok].max()) if ok.any() else 0
    if rule == "contiguous":
        bad = np.flatnonzero(~ok)
        end = bad[0] if len(bad) else len(lengths)
        return int(lengths[end - 1]) if end > 0 else 0
    raise ValueError(f"rule must be one of {MEMORY_LENGTH_RULES}, got {rule!r}")


def fine_memory_length(lengths, copy_mean, threshold: float = FINE_THRESHOLD, rule: str = "largest") -> int:
    """Fine-grained memory length: where copy accuracy > ``threshold`` (strict, see TIE_TOLERANCE)."""
    copy_mean = np.asarray(copy_mean, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        holds = copy_mean > threshold + TIE_TOLERANCE
    return memory_length(lengths, holds, np.isfinite(copy_mean), rule)


def coarse_memory_length(lengths, copy_mean, lm_mean, margin: float = COARSE_MARGIN, rule: str = "largest") -> int:
    """Coarse-grained memory length: where copy accuracy - LM accuracy > ``margin`` (strict, see TIE_TOLERANCE)."""
    copy_mean = np.asarray(copy_mean, dtype=np.float64)
    lm_mean = np.asarray(lm_mean, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        holds = copy_mean - lm_mean > margin + TIE_TOLERANCE
    return memory_length(lengths, holds, np.isfinite(copy_mean) & np.isfinite(lm_mean), rule)


def _curve_from_items(items) -> dict[str, np.ndarray]:
    arr = np.asarray([(float(x[0]), float(x[1]), float(x[2])) for x in items], dtype=np.float64).reshape(-1, 3)
    return forgetting_curve_by_length(arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2])


def fine_memory_length_from_samples(items, threshold: float = FINE_THRESHOLD, rule: str = "largest") -> float:
    """Aggregation over per-sample (length, copy_acc, lm_acc) items: the fine-grained memory length."""
    c = _curve_from_items(items)
    return float(fine_memory_length(c["length"], c["copy_mean"], threshold, rule))


def coarse_memory_length_from_samples(items, margin: float = COARSE_MARGIN, rule: str = "largest") -> float:
    """Aggregation over per-sample (length, copy_acc, lm_acc) items: the coarse-grained memory length."""
    c = _curve_from_items(items)
    return float(coarse_memory_length(c["length"], c["copy_mean"], c["lm_mean"], margin, rule))


def failed_lengths_from_samples(items) -> list[int]:
    """The tested lengths that failed (any sample with a NaN accuracy)."""
    c = _curve_from_items(items)
    return [int(x) for x in c["length"][c["failed"]]]


def skipped_lengths_text(items) -> str:
    """Aggregation over per-sample (length, reason) items, reason "" for a sample that ran: "none", or the skipped
    lengths with their reasons ("5166, 6198: out of memory at one sample per forward")."""
    by_reason: dict[str, set[int]] = {}
    for length, reason in items:
        if reason:
            by_reason.setdefault(str(reason), set()).add(int(length))
    if not by_reason:
        return "none"
    return "; ".join(
        f"{', '.join(map(str, sorted(lengths)))}: {reason}" for reason, lengths in sorted(by_reason.items())
    )


def n_failed_lengths_from_samples(items) -> float:
    """Aggregation over per-sample (length, copy_acc, lm_acc) items: how many lengths failed."""
    return float(len(failed_lengths_from_samples(items)))


# ---------------------------------------------------------------- LongEval "lines": answer tokens
#
# The response's tokens carry character offsets relative to the start of the response; the
# answer is a character span of it (the digits of the number).


def overlapping_token_mask(offsets: np.ndarray, span: tuple[int, int]) -> np.ndarray:
    """Tokens whose character span [start, end) overlaps ``span`` = [a, b): start < b and end > a.

    Overlap, not containment: a token that merges a digit with "<", ">" or "." still carries part of
    the number, so it counts. Zero-width tokens (special tokens) never overlap anything.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    a, b = int(span[0]), int(span[1])
    if b <= a:
        raise ValueError(f"empty span [{a}, {b})")
    start, end = offsets[:, 0], offsets[:, 1]
    return (end > start) & (start < b) & (end > a)


def answer_nll_split(logprob: np.ndarray, offsets: np.ndarray, answer_span: tuple[int, int]):
    """((answer NLL sum, answer tokens), (other NLL sum, other tokens)) over a scored response.

    ``logprob[i]`` is the log-prob of the response token with character span ``offsets[i]``;
    zero-width (special) tokens belong to neither part. Raises when no token overlaps the answer.
    """
    logprob = np.asarray(logprob, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if len(logprob) != len(offsets):
        raise ValueError(f"{len(logprob)} log-probs for {len(offsets)} token offsets")
    if not np.all(np.isfinite(logprob)):
        raise ValueError("response log-probs must be finite")
    answer = overlapping_token_mask(offsets, answer_span)
    other = (offsets[:, 1] > offsets[:, 0]) & ~answer
    if not answer.any():
        raise ValueError(f"no token overlaps the answer span {tuple(answer_span)}")
    return (nll_sum(logprob[answer]), int(answer.sum())), (nll_sum(logprob[other]), int(other.sum()))
