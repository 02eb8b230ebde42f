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
    """The long-short difference of LongPPL (Fang et al., ICLR 2025): LSD = log P(x | long) - log P(x | short).

    Args:
        long_lp: log-probs of the targets under the long context, float [tokens].
        short_lp: log-probs of the same targets under the truncated context, float [tokens]; NaN where a
            position has no truncated context.

    Returns:
        float64 [tokens]: the LSD per token, NaN where there is no short context.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import long_short_difference
        >>> long_lp = np.array([-0.5, -1.0, -0.1, -4.0])
        >>> short_lp = np.array([np.nan, -4.0, -0.2, -7.0])
        >>> np.round(long_short_difference(long_lp, short_lp), 4)
        array([nan, 3. , 0.1, 3. ])
    """
    return np.asarray(long_lp, dtype=np.float64) - np.asarray(short_lp, dtype=np.float64)


def key_token_mask(long_lp: np.ndarray, short_lp: np.ndarray, alpha: float = 2.0, beta: float = -2.0) -> np.ndarray:
    """The key tokens of LongPPL (Fang et al., ICLR 2025): LSD > alpha and LCL = log P(x | long) > beta.

    Both comparisons are strict; a position without a short context (NaN) is never key.

    Args:
        long_lp: log-probs of the targets under the long context, float [tokens].
        short_lp: log-probs under the truncated context, float [tokens]; NaN where there is none.
        alpha: the LSD a key token must exceed (nats).
        beta: the long-context log-prob (LCL) a key token must exceed.

    Returns:
        bool [tokens]: True at the key tokens.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import key_token_mask
        >>> long_lp = np.array([-0.5, -1.0, -0.1, -4.0])  # the last: LSD 3 but LCL -4 <= beta
        >>> short_lp = np.array([np.nan, -4.0, -0.2, -7.0])
        >>> key_token_mask(long_lp, short_lp, alpha=2.0, beta=-2.0)
        array([False,  True, False, False])
    """
    long_lp = np.asarray(long_lp, dtype=np.float64)
    lsd = long_short_difference(long_lp, short_lp)
    with np.errstate(invalid="ignore"):
        return (lsd > alpha) & (long_lp > beta)  # NaN compares False


def soft_weights(long_lp: np.ndarray, short_lp: np.ndarray, gamma: float = 5.0) -> np.ndarray:
    """The soft key-token weights of LongPPL-soft and LongCE (Fang et al., ICLR 2025): min(exp(LSD), gamma).

    Args:
        long_lp: log-probs of the targets under the long context, float [tokens].
        short_lp: log-probs under the truncated context, float [tokens]; NaN where there is none.
        gamma: the largest weight.

    Returns:
        float64 [tokens]: the weight per token, 1 where there is no short context.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import soft_weights
        >>> long_lp = np.array([-0.5, -1.0, -0.1])
        >>> short_lp = np.array([np.nan, -4.0, -0.2])
        >>> np.round(soft_weights(long_lp, short_lp, gamma=5.0), 4)
        array([1.    , 5.    , 1.1052])
    """
    return soft_weights_from_lsd(long_short_difference(long_lp, short_lp), gamma)


def soft_weights_from_lsd(lsd: np.ndarray, gamma: float) -> np.ndarray:
    """The soft key-token weights from the long-short differences themselves: min(exp(LSD), gamma).

    Args:
        lsd: the LSD per target, float [tokens]; NaN where a position has no truncated context.
        gamma: the largest weight.

    Returns:
        [tokens] in the dtype of ``lsd``: the weight per token, 1 where the LSD is NaN.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import soft_weights_from_lsd
        >>> np.round(soft_weights_from_lsd(np.array([np.nan, 3.0, 0.1]), gamma=5.0), 4)
        array([1.    , 5.    , 1.1052])
    """
    lsd = np.asarray(lsd)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.minimum(np.exp(lsd), gamma)
    return np.where(np.isnan(lsd), 1.0, w)


def nll_sum(logprobs: np.ndarray) -> float:
    """The total negative log-likelihood of a sequence's tokens, accumulated in float64.

    Args:
        logprobs: log-probs of the scored tokens, float [tokens].

    Returns:
        -sum(logprobs), a Python float (0.0 for no token).

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import nll_sum
        >>> nll_sum(np.array([-0.5, -1.0, -0.25]))
        1.75
    """
    return float(-np.sum(np.asarray(logprobs, dtype=np.float64)))


def perplexity_from_sums(total_nll: float, total_weight: float) -> float:
    """Perplexity from summed parts: exp(total NLL / total weight).

    Args:
        total_nll: the summed negative log-likelihood (nats).
        total_weight: what it is averaged over: a token count, or a sum of token weights.

    Returns:
        The perplexity; NaN when ``total_weight`` <= 0 (nothing to average).

    Example:
        >>> from lm_eval_longctx.metrics.per_token import perplexity_from_sums
        >>> round(perplexity_from_sums(2.0, 4), 4)
        1.6487
        >>> perplexity_from_sums(0.0, 0)
        nan
    """
    if total_weight <= 0:
        return float("nan")
    return math.exp(total_nll / total_weight)


def token_weighted_perplexity(items: Iterable[Sequence[float]]) -> float:
    """The corpus perplexity of per-document (NLL sum, token count) pairs: exp(sum NLL / sum count).

    Documents with 0 tokens add nothing: LongPPL (Fang et al., ICLR 2025) leaves documents without key tokens
    out this way.

    Args:
        items: one (nll_sum, n_tokens) pair per document.

    Returns:
        The token-weighted perplexity; NaN when the pairs hold no token.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import token_weighted_perplexity
        >>> round(token_weighted_perplexity([(3.0, 2), (1.0, 2), (0.0, 0)]), 4)  # exp(4 / 4)
        2.7183
    """
    items = list(items)
    total = sum(float(x[0]) for x in items)
    weight = sum(float(x[1]) for x in items)
    return perplexity_from_sums(total, weight)


def token_weighted_perplexity_or(note: str, items: Iterable[Sequence[float]]) -> float | str:
    """The corpus perplexity of ``token_weighted_perplexity``, or ``note`` when the pairs hold no token at all.

    A results file then carries the reason (say, that no document had a key token), not a NaN.

    Args:
        note: the text returned when there is no token.
        items: one (nll_sum, n_tokens) pair per document.

    Returns:
        The token-weighted perplexity (float), or ``note``.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import token_weighted_perplexity_or
        >>> round(token_weighted_perplexity_or("no key tokens", [(2.0, 4)]), 4)
        1.6487
        >>> token_weighted_perplexity_or("no key tokens", [(0.0, 0), (0.0, 0)])
        'no key tokens'
    """
    items = list(items)
    if sum(float(x[1]) for x in items) <= 0:
        return note
    return token_weighted_perplexity(items)


def corpus_ratio(items: Iterable[Sequence[float]]) -> float:
    """A corpus ratio of per-document (numerator, denominator) pairs: sum(numerator) / sum(denominator).

    Args:
        items: one (numerator, denominator) pair per document, e.g. (key tokens, tokens).

    Returns:
        The ratio; NaN when the denominators sum to <= 0.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import corpus_ratio
        >>> corpus_ratio([(3, 10), (1, 30)])  # 4 key tokens among 40
        0.1
        >>> corpus_ratio([])
        nan
    """
    items = list(items)
    den = sum(float(x[1]) for x in items)
    return float("nan") if den <= 0 else sum(float(x[0]) for x in items) / den


def retrieval_gain_per_pair(with_logprob: np.ndarray, without_logprob: np.ndarray):
    """The retrieval gain per (document, anchor) pair: how much reading the document lowers the answer's NLL.

    nll = the mean over the answer tokens of -log p; gain = nll_without - nll_with (higher: the document helps
    more). The task ``retrieval_gain`` (docs/tasks/retrieval_gain.md) reports its mean.

    Args:
        with_logprob: the answer tokens' log-probs with the document in the context, float [pairs, answer_tokens].
        without_logprob: the same tokens' log-probs without it, the same shape.

    Returns:
        (gain, nll_with, nll_without), each float64 [pairs].

    Raises:
        ValueError: the arrays differ in shape, are not 2-D, have no answer token, or hold a non-finite value.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import retrieval_gain_per_pair
        >>> with_doc = np.array([[-0.5, -1.5], [-2.0, -2.0]])
        >>> without_doc = np.array([[-3.0, -1.0], [-2.5, -1.5]])
        >>> gain, nll_with, nll_without = retrieval_gain_per_pair(with_doc, without_doc)
        >>> gain, nll_with, nll_without
        (array([1., 0.]), array([1., 2.]), array([2., 2.]))
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
    """The forgetting curve (Liu et al., EMNLP 2024): the copy and LM accuracies per tested length.

    Per length (ascending): mean and std (ddof = 0, as the reference's ``np.std``) of the copy and LM accuracies
    over its samples, the sample count, and whether the length failed. A length fails when any of its samples
    has a NaN accuracy; its means and stds are then NaN (a curve point from the samples that happened to run
    would be biased).

    Args:
        lengths: the copy length of each sample, int [samples].
        copy_acc: each sample's copy accuracy, float [samples]; NaN where it failed to run.
        lm_acc: each sample's LM accuracy, float [samples]; NaN where it failed to run.

    Returns:
        A dict of arrays over the distinct lengths: ``length`` (int64, ascending), ``copy_mean``, ``copy_std``,
        ``lm_mean``, ``lm_std`` (float64), ``n`` (int64: samples) and ``failed`` (bool).

    Raises:
        ValueError: the three arrays are not 1-D arrays of one shape.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import forgetting_curve_by_length
        >>> curve = forgetting_curve_by_length(
        ...     lengths=[64, 64, 128, 128], copy_acc=[1.0, 0.9, 0.5, np.nan], lm_acc=[0.25, 0.25, 0.25, 0.25]
        ... )
        >>> curve["length"].tolist(), curve["n"].tolist(), curve["failed"].tolist()
        ([64, 128], [2, 2], [False, True])
        >>> np.round(curve["copy_mean"], 4).tolist(), np.round(curve["copy_std"], 4).tolist()
        ([0.95, nan], [0.05, nan])
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
    """The memory length of the forgetting curve (Liu et al., EMNLP 2024) for a condition over tested lengths.

    * ``largest``: the largest tested length at which the condition holds (the paper's wording).
      A curve that dips and recovers keeps its later lengths; short lengths decide only when no
      longer length qualifies.
    * ``contiguous``: the largest L such that the condition holds at every tested length <= L; a
      failed (untested) length ends the run, since nothing is known there.

    Failed lengths (``tested`` False) never qualify.

    Args:
        lengths: the tested lengths, int [lengths], strictly increasing.
        holds: whether the condition holds at each length, bool [lengths].
        tested: whether each length ran, bool [lengths]; None: all did.
        rule: ``"largest"`` or ``"contiguous"`` (``MEMORY_LENGTH_RULES``).

    Returns:
        The memory length; 0 when no length qualifies.

    Raises:
        ValueError: the arrays differ in shape, the lengths are not strictly increasing, or the rule is unknown.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import memory_length
        >>> lengths, holds = [64, 128, 256, 512], [True, False, True, False]
        >>> memory_length(lengths, holds, rule="largest"), memory_length(lengths, holds, rule="contiguous")
        (256, 64)
        >>> memory_length(lengths, [True, True, True, False], tested=[True, False, True, True], rule="contiguous")
        64
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
    """The fine-grained memory length of the forgetting curve (Liu et al., EMNLP 2024): copy accuracy > threshold.

    The comparison is strict (a tie does not pass, see ``TIE_TOLERANCE``); a NaN mean (a failed length) never
    qualifies.

    Args:
        lengths: the tested lengths, int [lengths], strictly increasing.
        copy_mean: the mean copy accuracy per length, float [lengths]; NaN where the length failed.
        threshold: the copy accuracy a length must exceed.
        rule: ``"largest"`` or ``"contiguous"`` (see ``memory_length``).

    Returns:
        The memory length; 0 when no length qualifies.

    Raises:
        ValueError: as ``memory_length``.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import fine_memory_length
        >>> fine_memory_length([64, 128, 256], [1.0, 0.995, 0.99], threshold=0.99)  # 0.99 itself is a tie
        128
    """
    copy_mean = np.asarray(copy_mean, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        holds = copy_mean > threshold + TIE_TOLERANCE
    return memory_length(lengths, holds, np.isfinite(copy_mean), rule)


def copy_above_lm(copy_mean, lm_mean, margin: float = COARSE_MARGIN) -> np.ndarray:
    """Per tested length, whether the copy accuracy beats the LM accuracy by more than ``margin``: the coarse-grained
    memory length's condition (Liu et al., EMNLP 2024), strict, a NaN mean never holding.

    Args:
        copy_mean: the mean copy accuracy per length, float [lengths]; NaN where the length failed.
        lm_mean: the mean LM accuracy per length, float [lengths]; NaN where the length failed.
        margin: what the copy accuracy must exceed the LM accuracy by.

    Returns:
        bool [lengths].

    Example:
        >>> from lm_eval_longctx.metrics.per_token import copy_above_lm
        >>> copy_above_lm([0.9, 0.43, 0.31, float("nan")], [0.3, 0.43, 0.3, 0.3], margin=0.01).tolist()
        [True, False, False, False]
    """
    copy_mean = np.asarray(copy_mean, dtype=np.float64)
    lm_mean = np.asarray(lm_mean, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray(copy_mean - lm_mean > margin + TIE_TOLERANCE, dtype=bool)


def coarse_memory_length(lengths, copy_mean, lm_mean, margin: float = COARSE_MARGIN, rule: str = "largest") -> int:
    """The coarse-grained memory length of the forgetting curve (Liu et al., EMNLP 2024): copy - LM acc > margin.

    The comparison is strict (a tie does not pass, even with float rounding: see ``TIE_TOLERANCE``); a NaN mean
    (a failed length) never qualifies.

    Args:
        lengths: the tested lengths, int [lengths], strictly increasing.
        copy_mean, lm_mean, margin: as ``copy_above_lm``.
        rule: as ``fine_memory_length``.

    Returns:
        The memory length, as ``fine_memory_length`` (0 when no length qualifies; it raises as that does).

    Example:
        >>> from lm_eval_longctx.metrics.per_token import coarse_memory_length
        >>> copy_mean, lm_mean = [0.9, 0.5, 0.31], [0.3, 0.3, 0.3]  # at 256: 0.31 - 0.3 ties the margin
        >>> coarse_memory_length([64, 128, 256], copy_mean, lm_mean, margin=0.01)
        128
    """
    copy_mean = np.asarray(copy_mean, dtype=np.float64)
    lm_mean = np.asarray(lm_mean, dtype=np.float64)
    holds = copy_above_lm(copy_mean, lm_mean, margin)
    return memory_length(lengths, holds, np.isfinite(copy_mean) & np.isfinite(lm_mean), rule)


def _curve_from_items(items) -> dict[str, np.ndarray]:
    arr = np.asarray([(float(x[0]), float(x[1]), float(x[2])) for x in items], dtype=np.float64).reshape(-1, 3)
    return forgetting_curve_by_length(arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2])


# what a memory length reads when no copy length was measured: a reason, never a number
NOT_MEASURED = "n/a: no copy length was measured (every length failed; skipped_lengths and the log say why)"


def _measured_curve(items) -> dict[str, np.ndarray] | None:
    """The items' curve, or None when no length has a measured (finite) copy accuracy."""
    c = _curve_from_items(items)
    return c if np.any(np.isfinite(c["copy_mean"])) else None


def fine_memory_length_from_samples(items, threshold: float = FINE_THRESHOLD, rule: str = "largest") -> float | str:
    """The fine-grained memory length (Liu et al., EMNLP 2024) of per-sample items: the task's aggregation.

    The items' curve (``forgetting_curve_by_length``) read by ``fine_memory_length``.

    Args:
        items: one (length, copy_acc, lm_acc) triple per sample; NaN accuracies mark a failed sample.
        threshold: the mean copy accuracy a length must exceed.
        rule: ``"largest"`` or ``"contiguous"`` (see ``memory_length``).

    Returns:
        The memory length, as a float (lm-eval's aggregations return numbers); 0.0 when no length qualifies;
        the text ``NOT_MEASURED`` when every length failed (a length never measured is not a number).

    Raises:
        ValueError: the rule is unknown.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import fine_memory_length_from_samples
        >>> samples = [(64, 1.0, 0.25), (64, 1.0, 0.5), (128, 0.75, 0.25), (128, 1.0, 0.25)]
        >>> fine_memory_length_from_samples(samples, threshold=0.99)  # mean copy accuracy 1.0 at 64, 0.875 at 128
        64.0
        >>> nan = float("nan")
        >>> fine_memory_length_from_samples([(64, nan, nan), (128, nan, nan)])  # every length failed
        'n/a: no copy length was measured (every length failed; skipped_lengths and the log say why)'
    """
    c = _measured_curve(items)
    if c is None:
        return NOT_MEASURED
    return float(fine_memory_length(c["length"], c["copy_mean"], threshold, rule))


def coarse_memory_length_from_samples(items, margin: float = COARSE_MARGIN, rule: str = "largest") -> float | str:
    """The coarse-grained memory length (Liu et al., EMNLP 2024) of per-sample items: the task's aggregation.

    The items' curve (``forgetting_curve_by_length``) read by ``coarse_memory_length``.

    Args:
        items: one (length, copy_acc, lm_acc) triple per sample; NaN accuracies mark a failed sample.
        margin: what the mean copy accuracy must exceed the mean LM accuracy by.
        rule: ``"largest"`` or ``"contiguous"`` (see ``memory_length``).

    Returns:
        The memory length, as a float (lm-eval's aggregations return numbers); 0.0 when no length qualifies;
        the text ``NOT_MEASURED`` when every length failed.

    Raises:
        ValueError: the rule is unknown.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import coarse_memory_length_from_samples
        >>> samples = [(64, 1.0, 0.25), (64, 1.0, 0.5), (128, 0.75, 0.25), (128, 1.0, 0.25)]
        >>> coarse_memory_length_from_samples(samples, margin=0.01)  # copy - LM: 0.625 at 64, 0.625 at 128
        128.0
    """
    c = _measured_curve(items)
    if c is None:
        return NOT_MEASURED
    return float(coarse_memory_length(c["length"], c["copy_mean"], c["lm_mean"], margin, rule))


def failed_lengths_from_samples(items) -> list[int]:
    """The forgetting curve's tested lengths that failed: those with any sample of NaN accuracy.

    Args:
        items: one (length, copy_acc, lm_acc) triple per sample; NaN accuracies mark a failed sample.

    Returns:
        The failed lengths, ascending.

    Example:
        >>> from lm_eval_longctx.metrics.per_token import failed_lengths_from_samples
        >>> failed_lengths_from_samples([(64, 1.0, 0.25), (128, float("nan"), float("nan")), (128, 0.75, 0.25)])
        [128]
    """
    c = _curve_from_items(items)
    return [int(x) for x in c["length"][c["failed"]]]


def skipped_lengths_text(items) -> str:
    """The forgetting curve's skipped lengths with their reasons, as one line of text: the task's aggregation.

    Args:
        items: one (length, reason) pair per sample; reason "" for a sample that ran.

    Returns:
        ``"none"``, or the skipped lengths grouped by reason, ascending ("5166, 6198: out of memory"), the
        groups sorted by reason and joined by "; ".

    Example:
        >>> from lm_eval_longctx.metrics.per_token import skipped_lengths_text
        >>> skipped_lengths_text([(64, ""), (6198, "out of memory"), (5166, "out of memory")])
        '5166, 6198: out of memory'
        >>> skipped_lengths_text([(64, ""), (128, "")])
        'none'
    """
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
    """How many of the forgetting curve's tested lengths failed: the task's aggregation.

    Args:
        items: one (length, copy_acc, lm_acc) triple per sample; NaN accuracies mark a failed sample.

    Returns:
        The number of failed lengths, as a float (lm-eval's aggregations return numbers).

    Example:
        >>> from lm_eval_longctx.metrics.per_token import n_failed_lengths_from_samples
        >>> nan = float("nan")
        >>> n_failed_lengths_from_samples([(64, 1.0, 0.25), (128, nan, nan), (256, nan, nan), (256, 0.5, 0.25)])
        2.0
    """
    return float(len(failed_lengths_from_samples(items)))


# ---------------------------------------------------------------- LongEval "lines": answer tokens
#
# The response's tokens carry character offsets relative to the start of the response; the
# answer is a character span of it (the digits of the number).


def overlapping_token_mask(offsets: np.ndarray, span: tuple[int, int]) -> np.ndarray:
    """The tokens whose character span [start, end) overlaps ``span`` = [a, b): start < b and end > a.

    Overlap, not containment: a token that merges a digit with "<", ">" or "." still carries part of
    the number, so it counts. Zero-width tokens (special tokens) never overlap anything.

    Args:
        offsets: each token's character span (start, end), int [tokens, 2] (or anything that reshapes to it).
        span: the character span (a, b), b > a.

    Returns:
        bool [tokens]: True at the tokens that overlap ``span``.

    Raises:
        ValueError: ``span`` is empty (b <= a).

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import overlapping_token_mask
        >>> offsets = np.array([[0, 2], [2, 5], [5, 8], [8, 9], [9, 9]])  # " <", "451", "29>", ".", a special token
        >>> overlapping_token_mask(offsets, (2, 7))  # the digits of " <45129>."
        array([False,  True,  True, False, False])
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    a, b = int(span[0]), int(span[1])
    if b <= a:
        raise ValueError(f"empty span [{a}, {b})")
    start, end = offsets[:, 0], offsets[:, 1]
    return (end > start) & (start < b) & (end > a)


def answer_nll_split(logprob: np.ndarray, offsets: np.ndarray, answer_span: tuple[int, int]):
    """A LongEval response's NLL split into its answer's tokens and the others (answer-token perplexity).

    The answer-token perplexity of LongEval "lines" (LongPPL, Fang et al., ICLR 2025, section 2.1) sums these
    parts over cases. A token overlapping the answer span (``overlapping_token_mask``) is an answer token;
    zero-width (special) tokens belong to neither part.

    Args:
        logprob: ``logprob[i]`` is the log-prob of the response token with character span ``offsets[i]``,
            float [tokens].
        offsets: each response token's character span (start, end), int [tokens, 2].
        answer_span: the answer's character span (a, b) in the response.

    Returns:
        ((answer NLL sum, answer tokens), (other NLL sum, other tokens)).

    Raises:
        ValueError: the lengths differ, a log-prob is not finite, the span is empty, or no token overlaps it.

    Example:
        >>> import numpy as np
        >>> from lm_eval_longctx.metrics.per_token import answer_nll_split
        >>> offsets = np.array([[0, 2], [2, 5], [5, 8], [8, 9], [9, 9]])  # " <", "451", "29>", ".", a special token
        >>> logprob = np.array([-0.25, -2.0, -1.0, -0.5, 0.0])
        >>> answer_nll_split(logprob, offsets, (2, 7))
        ((3.0, 2), (0.75, 2))
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
