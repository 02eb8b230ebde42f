"""The retrieval-gain map: per-cell gains, effective context lengths and the metric names.

Pure numpy; no torch, no lm-eval (the heatmap is drawn by ``report/pictures/``).

Metric names sort as strings in ladder order: ``gain@L01024_d50`` (cell: length 1024, depth 50%),
``gain@L01024`` (that length's mean over depths); lengths zero-padded to one width, depths too.
"""

from __future__ import annotations

import logging

import numpy as np

from . import per_token

log = logging.getLogger("lm_eval_longctx")


def cell_metric(length: int, depth: int, width: int = 5, depth_width: int = 2) -> str:
    """The metric name of one cell of the retrieval-gain map (context length, depth), zero-padded to sort.

    Args:
        length: the cell's context length (tokens).
        depth: the cell's depth (percent).
        width: the digits a length is zero-padded to (the ladder's widest).
        depth_width: the digits a depth is zero-padded to.

    Returns:
        ``gain@L<length>_d<depth>``.

    Example:
        >>> from lm_eval_longctx.metrics.gain_map import cell_metric
        >>> cell_metric(1024, 50), cell_metric(131072, 5, width=6)
        ('gain@L01024_d50', 'gain@L131072_d05')
    """
    return f"gain@L{int(length):0{width}d}_d{int(depth):0{depth_width}d}"


def length_metric(length: int, width: int = 5) -> str:
    """The metric name of one context length of the retrieval-gain map (its mean over depths), zero-padded.

    Args:
        length: the context length (tokens).
        width: the digits a length is zero-padded to (the ladder's widest).

    Returns:
        ``gain@L<length>``, which sorts before that length's cells.

    Example:
        >>> from lm_eval_longctx.metrics.gain_map import length_metric
        >>> length_metric(1024)
        'gain@L01024'
    """
    return f"gain@L{int(length):0{width}d}"


# ------------------------------------------------------------------ numbers


def cell_gains(with_logprob, without_logprob) -> np.ndarray:
    """The retrieval gain of each cell of the map: the mean over its anchors of nll_without - nll_with.

    nll = the mean over the answer tokens of -log p (docs/tasks/retrieval_gain_map.md).

    Args:
        with_logprob: the answer tokens' log-probs with the context, float [lengths, depths, anchors, answer_tokens].
        without_logprob: the same tokens' log-probs without it, the same shape.

    Returns:
        float64 [lengths, depths]: each cell's gain (nats).

    Raises:
        ValueError: the arrays differ in shape, are not 4-D, have no answer token, or hold a non-finite value.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.gain_map import cell_gains
        >>> with_context = np.array([-0.5, -1.5, -2.0, -2.0]).reshape(1, 2, 1, 2)  # 1 length, 2 depths
        >>> without_context = np.array([-3.0, -1.0, -2.5, -1.5]).reshape(1, 2, 1, 2)
        >>> cell_gains(with_context, without_context)
        array([[1., 0.]])
    """
    w = np.asarray(with_logprob, dtype=np.float64)
    wo = np.asarray(without_logprob, dtype=np.float64)
    if w.shape != wo.shape or w.ndim != 4 or w.shape[-1] == 0:
        raise ValueError(
            f"expected two [lengths, depths, anchors, answer_tokens] arrays of one shape, got {w.shape} and {wo.shape}"
        )
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(wo))):
        raise ValueError("answer log-probs must be finite")
    return (w.mean(axis=-1) - wo.mean(axis=-1)).mean(axis=-1)  # -wo - (-w), per anchor, then over anchors


def weakest_depth_gain(gains) -> np.ndarray:
    """Per context length, the gain of the weakest depth: the mean over documents per (length, depth), then the
    minimum over depths.

    A length is reached only when every depth is: the far depths (10% lies about 0.9 L back) say whether the model
    reaches across L, which a mean over depths lets one near depth stand in for. A NaN cell makes its length NaN.

    Args:
        gains: float [..., documents, lengths, depths]: each document's gain per cell (nats).

    Returns:
        float64 [..., lengths]: the weakest depth's mean gain at each length.

    Raises:
        ValueError: ``gains`` has fewer than 3 axes, or no document or no depth.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.gain_map import weakest_depth_gain
        >>> gains = np.array([[[0.1, 2.7], [0.0, 2.8]], [[0.3, 2.9], [-0.2, 2.6]]])  # 2 documents, 2 lengths, 2 depths
        >>> weakest_depth_gain(gains).round(2)
        array([ 0.2, -0.1])
    """
    g = np.asarray(gains, dtype=np.float64)
    if g.ndim < 3 or g.shape[-3] == 0 or g.shape[-1] == 0:
        raise ValueError(f"expected gains [..., documents, lengths, depths] with a document and a depth, got {g.shape}")
    return g.mean(axis=-3).min(axis=-1)


def effective_length(
    lengths,
    mean_gain,
    fraction: float | None = None,
    threshold: float | None = None,
    rule: str = "contiguous",
    base_minimum: float = 0.0,
    gate=None,
) -> int:
    """The effective context length of a gain-per-length curve; the relative rule follows NoLiMa's.

    Relative (``fraction``, as NoLiMa, Modarressi et al., ICML 2025): L passes when gain(L) > fraction *
    gain(L_min), L_min the shortest length. A curve whose shortest-length gain is not above ``base_minimum``
    (at least 0) uses no context to begin with, so its length is 0: a fraction of a gain that is noise around 0
    would make any length "effective".
    Absolute (``threshold``): L passes when gain(L) > threshold. ``rule``: ``contiguous`` (every
    shorter length passes too: the gain *stays* above) or ``largest`` (see metrics.memory_length).
    Strict comparisons: a tie does not pass (metrics.TIE_TOLERANCE); a NaN gain never passes. The map's rules read
    every depth too (``effective_length_by_depth``).

    Args:
        lengths: the context lengths, int [lengths], strictly increasing.
        mean_gain: the gain at each length, float [lengths].
        fraction: the relative rule's share of the shortest length's gain (give this or ``threshold``).
        threshold: the absolute rule's gain in nats (give this or ``fraction``).
        rule: ``"contiguous"`` or ``"largest"``.
        base_minimum: the gain the shortest length must exceed for the relative rule to apply.
        gate: bool [lengths], or None: a length passes only where it is True too (another measure's verdict on
            that length); the relative rule's base is the curve's value at the shortest length either way.

    Returns:
        The effective length; 0 when no length passes (or there is none).

    Raises:
        ValueError: not exactly one of ``fraction`` and ``threshold`` is given, the lengths, gains and gate differ
            in shape, the lengths are not strictly increasing, or the rule is unknown.

    Example:
        >>> from lm_eval_longctx.metrics.gain_map import effective_length
        >>> lengths, gain = [1024, 2048, 4096, 8192], [2.0, 1.5, 0.75, 1.25]
        >>> effective_length(lengths, gain, fraction=0.5), effective_length(lengths, gain, fraction=0.5, rule="largest")
        (2048, 8192)
        >>> effective_length(lengths, gain, threshold=0.5)
        8192
        >>> effective_length(lengths, gain, threshold=0.5, gate=[True, True, False, True])
        2048
        >>> effective_length(lengths, [0.0, 1.0, 1.0, 1.0], fraction=0.5)  # no gain at the shortest length
        0
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    gain = np.asarray(mean_gain, dtype=np.float64)
    if (fraction is None) == (threshold is None):
        raise ValueError("give exactly one of fraction and threshold")
    if gain.shape != lengths.shape or (gate is not None and np.shape(gate) != lengths.shape):
        raise ValueError(f"expected one gain (and gate) per length: {lengths.shape} lengths, gains {gain.shape}")
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
    if gate is not None:
        holds &= np.asarray(gate, dtype=bool)
    return per_token.memory_length(lengths, holds, np.isfinite(gain), rule)


def effective_length_by_depth(
    lengths,
    gains,
    fraction: float | None = None,
    threshold: float | None = None,
    rule: str = "contiguous",
    base_minimum: float = 0.0,
    gate=None,
) -> int:
    """The effective context length of the retrieval-gain map, read at every depth: L passes only when every depth's
    gain (mean over documents) clears the floor, so that no near depth carries a length the model does not reach
    across (``weakest_depth_gain``).

    Absolute (``threshold``): the floor is ``threshold``: ``effective_length`` of the weakest depth's curve.
    Relative (``fraction``): L passes when the mean over depths keeps ``fraction`` of its value at the shortest length
    (``effective_length``, as NoLiMa averages over needle positions) and every depth's gain is above ``base_minimum``
    (at least 0), the floor below which a gain is noise.

    Args:
        lengths: the context lengths, int [lengths], strictly increasing.
        gains: each document's gain per cell, float [documents, lengths, depths].
        fraction: the relative rule's share of the shortest length's mean gain (give this or ``threshold``).
        threshold: the absolute rule's gain in nats, which every depth must exceed (give this or ``fraction``).
        rule: ``"contiguous"`` or ``"largest"``.
        base_minimum: the relative rule's floor: the gain every depth must exceed, at every length.
        gate: bool [lengths], or None: as ``effective_length``.

    Returns:
        The effective length; 0 when no length passes (or there is none).

    Raises:
        ValueError: as ``effective_length`` and ``weakest_depth_gain``.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.gain_map import effective_length_by_depth
        >>> # one document, depths (10, 90): at 2048 only the near depth (90) keeps its gain
        >>> gains = np.array([[[2.5, 2.7], [0.1, 2.8], [-0.6, 2.8]]])
        >>> gains.mean(axis=(0, 2)).round(2)  # the mean over depths keeps half its gain and clears 0.5 nats
        array([2.6 , 1.45, 1.1 ])
        >>> effective_length_by_depth([1024, 2048, 4096], gains, threshold=0.5)
        1024
        >>> effective_length_by_depth([1024, 2048, 4096], gains, fraction=0.5, base_minimum=0.5)
        1024
    """
    weakest = weakest_depth_gain(gains)
    if threshold is not None:
        return effective_length(lengths, weakest, fraction=fraction, threshold=threshold, rule=rule, gate=gate)
    with np.errstate(invalid="ignore"):
        reached = weakest > max(float(base_minimum), 0.0) + per_token.TIE_TOLERANCE
    if gate is not None:
        reached &= np.asarray(gate, dtype=bool)
    mean = np.asarray(gains, dtype=np.float64).mean(axis=(-3, -1))
    return effective_length(lengths, mean, fraction=fraction, rule=rule, base_minimum=base_minimum, gate=reached)


def _documents_gains(items, lengths) -> np.ndarray:
    """[documents, lengths, depths] from one item per document: per length its gain at each depth, or (runs logged
    before the items held depths) one gain per length, read as a single depth."""
    try:
        g = np.asarray(items, dtype=np.float64)
    except ValueError:  # ragged: items of different shapes
        g = np.zeros((0,))
    if g.ndim == 2:
        g = g[..., None]
    if g.ndim != 3 or g.shape[1] != len(lengths):
        raise ValueError(f"expected one gain per depth at each of the {len(lengths)} lengths per document")
    return g


def effective_length_from_docs(
    items, lengths=(), fraction: float = 0.5, rule: str = "contiguous", base_minimum: float = 0.0
) -> float:
    """The relative effective length of the documents' map, read at every depth (``effective_length_by_depth``):
    an aggregation.

    Args:
        items: one item per document: per length (in the order of ``lengths``) its gain at each depth.
        lengths: the context lengths, strictly increasing.
        fraction: the share of the shortest length's mean gain the mean over depths must keep.
        rule: ``"contiguous"`` or ``"largest"``.
        base_minimum: the gain every depth must exceed at a length that counts.

    Returns:
        The effective length, as a float (lm-eval's aggregations return numbers).

    Raises:
        ValueError: as ``effective_length``, or an item does not hold one gain per depth at each length.

    Example:
        >>> from lm_eval_longctx.metrics.gain_map import effective_length_from_docs
        >>> docs = [((2.0, 2.2), (1.2, 2.0), (0.2, 1.5)), ((1.8, 2.0), (0.2, 1.8), (0.4, 1.3))]  # 2 depths
        >>> # mean over depths 2.0, 1.3, 0.85: half of 2.0 kept up to 2048; the weakest depth 1.9, 0.7, 0.3
        >>> effective_length_from_docs(docs, lengths=(1024, 2048, 4096), fraction=0.5, base_minimum=0.5)
        2048.0
    """
    gains = _documents_gains(items, lengths)
    return float(effective_length_by_depth(lengths, gains, fraction=fraction, rule=rule, base_minimum=base_minimum))


def effective_length_abs_from_docs(items, lengths=(), threshold: float = 0.1, rule: str = "contiguous") -> float:
    """The absolute effective length of the documents' map, read at every depth (``effective_length_by_depth``):
    an aggregation.

    Args:
        items: one item per document: per length (in the order of ``lengths``) its gain at each depth.
        lengths: the context lengths, strictly increasing.
        threshold: the gain (nats) every depth's mean must exceed.
        rule: ``"contiguous"`` or ``"largest"``.

    Returns:
        The effective length, as a float (lm-eval's aggregations return numbers).

    Raises:
        ValueError: as ``effective_length``, or an item does not hold one gain per depth at each length.

    Example:
        >>> from lm_eval_longctx.metrics.gain_map import effective_length_abs_from_docs
        >>> docs = [((2.0, 2.2), (0.2, 2.0), (0.2, 1.5)), ((1.8, 2.0), (1.0, 1.8), (0.4, 1.3))]  # 2 depths
        >>> effective_length_abs_from_docs(docs, lengths=(1024, 2048, 4096), threshold=0.5)  # weakest: 1.9, 0.6, 0.3
        2048.0
    """
    gains = _documents_gains(items, lengths)
    return float(effective_length_by_depth(lengths, gains, threshold=threshold, rule=rule))
