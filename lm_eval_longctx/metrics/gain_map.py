"""The retrieval-gain map: per-cell gains, effective context lengths, and the heatmap.

Pure numpy (matplotlib for the pictures, imported only when one is drawn, object-oriented API on
an Agg canvas); no torch, no lm-eval: a results JSON is plain data.

Metric names sort as strings in ladder order: ``gain@L01024_d50`` (cell: length 1024, depth 50%),
``gain@L01024`` (that length's mean over depths); lengths zero-padded to one width, depths too.
"""

from __future__ import annotations

import logging

import numpy as np

from . import per_token

log = logging.getLogger("lm_eval_longctx")


def cell_metric(length: int, depth: int, width: int = 5, depth_width: int = 2) -> str:
    return f"gain@L{int(length):0{width}d}_d{int(depth):0{depth_width}d}"


def length_metric(length: int, width: int = 5) -> str:
    return f"gain@L{int(length):0{width}d}"


# ------------------------------------------------------------------ numbers


def cell_gains(with_logprob, without_logprob) -> np.ndarray:
    """Per cell, the mean over its anchors of (nll_without - nll_with), nll = mean over the answer
    tokens of -log p. Inputs [lengths, depths, anchors, answer_tokens]; returns float64 [lengths, depths]."""
    w = np.asarray(with_logprob, dtype=np.float64)
    wo = np.asarray(without_logprob, dtype=np.float64)
    if w.shape != wo.shape or w.ndim != 4 or w.shape[-1] == 0:
        raise ValueError(
            f"expected two [lengths, depths, anchors, answer_tokens] arrays of one shape, got {w.shape} and {wo.shape}"
        )
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(wo))):
        raise ValueError("answer log-probs must be finite")
    return (w.mean(axis=-1) - wo.mean(axis=-1)).mean(axis=-1)  # -wo - (-w), per anchor, then over anchors


def effective_length(
    lengths,
    mean_gain,
    fraction: float | None = None,
    threshold: float | None = None,
    rule: str = "contiguous",
    base_minimum: float = 0.0,
) -> int:
    """The effective context length of a mean-gain-per-length curve (lengths ascending; 0: none).

    Relative (``fraction``): L passes when gain(L) > fraction * gain(L_min), L_min the shortest
    length. A curve whose shortest-length gain is not above ``base_minimum`` (at least 0) uses no
    context to begin with, so its length is 0: a fraction of a gain that is noise around 0 would
    make any length "effective".
    Absolute (``threshold``): L passes when gain(L) > threshold. ``rule``: ``contiguous`` (every
    shorter length passes too: the gain *stays* above) or ``largest`` (see metrics.memory_length).
    Strict comparisons: a tie does not pass (metrics.TIE_TOLERANCE).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    gain = np.asarray(mean_gain, dtype=np.float64)
    if (fraction is None) == (threshold is None):
        raise ValueError("give exactly one of fraction and threshold")
    if len(lengths) == 0:
        return 0
    if fraction is not None:
        base = gain[0]
        if not (np.isfinite(base) and base > max(float(base_minimum), 0.0) + per_token.TIE_TOLERANCE):
            return 0
        bar = fraction * base
    else:
        bar = threshold
    with np.errstate(invalid="ignore"):
        holds = gain > bar + per_token.TIE_TOLERANCE
    return per_token.memory_length(lengths, holds, np.isfinite(gain), rule)


def _mean_curve(items) -> np.ndarray:
    arr = np.asarray([tuple(float(v) for v in x) for x in items], dtype=np.float64)
    return arr.mean(axis=0)


def effective_length_from_docs(
    items, lengths=(), fraction: float = 0.5, rule: str = "contiguous", base_minimum: float = 0.0
) -> float:
    """Aggregation over per-document gain-per-length tuples: the relative effective length of their mean."""
    return float(effective_length(lengths, _mean_curve(items), fraction=fraction, rule=rule, base_minimum=base_minimum))


def effective_length_abs_from_docs(items, lengths=(), threshold: float = 0.1, rule: str = "contiguous") -> float:
    """Aggregation over per-document gain-per-length tuples: the absolute effective length of their mean."""
    return float(effective_length(lengths, _mean_curve(items), threshold=threshold, rule=rule))


# ------------------------------------------------------------------ from a results dict
