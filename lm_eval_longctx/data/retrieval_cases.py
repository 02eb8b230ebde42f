"""The sequences of the retrieval-gain tasks, built from a document's token ids (pure functions: what the model
reads, token by token). ``retrieval_gain``: anchors in one document, each read with the whole document (or what
precedes it) and without it. ``retrieval_gain_map``: cells of a ladder of context lengths by depth, read on top of the
document's first L tokens and without them. The tasks' modules say what they measure; the engine scores these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import ScoringError

ANCHOR_SPACINGS = ("endpoints", "centered")


def lead_token_ids(tokenizer, bos_mode: str) -> list[int]:
    """[BOS] or []: ``always`` needs a BOS token; ``auto`` uses it when the tokenizer itself adds one."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos_mode == "never":
        return []
    if bos_mode == "always":
        if bos is None:
            raise ValueError("bos: true, but the tokenizer has no BOS token")
        return [int(bos)]
    probe = tokenizer("retrieval gain", add_special_tokens=True)["input_ids"]
    return [int(bos)] if bos is not None and len(probe) and probe[0] == bos else []


def query_extra_tokens(tokenizer, s: dict) -> int:
    """Tokens of a retrieval-gain sequence besides the document: BOS (as the tokenizer adds one, or the ``bos``
    setting), the separator, Q and A; one BOS and no separator tokens when no tokenizer is known."""
    if tokenizer is None:
        return 1 + s["query_tokens"] + s["answer_tokens"]
    sep = tokenizer(s["separator"], add_special_tokens=False)["input_ids"] if s["separator"] else []
    return len(lead_token_ids(tokenizer, s["bos"])) + len(sep) + s["query_tokens"] + s["answer_tokens"]


# ------------------------------------------------------------------ retrieval_gain: anchors in one document


def choose_anchors(
    n_doc_tokens: int,
    query_tokens: int,
    answer_tokens: int,
    n_queries: int,
    anchor_min: float = 0.1,
    anchor_max: float = 0.6,
    spacing: str = "endpoints",
) -> list[int]:
    """Anchor positions in [ceil(anchor_min * U), floor(anchor_max * U)], U = T - q - r, deterministic.

    ``endpoints``: evenly spaced with both ends of the interval included (2 anchors: 0.1U and 0.6U);
    ``centered``: the centres of n equal parts of the interval. The fractions are read as decimals
    (``Fraction(str(f))``), so 0.1 * 8140 is exactly 814, not 814.0000000000001 rounded up.

    Example:
        >>> choose_anchors(8192, 24, 24, 2)  # U = 8144: 0.1 U rounded up, 0.6 U rounded down
        [815, 4886]
        >>> choose_anchors(8192, 24, 24, 3, spacing="centered")
        [1493, 2850, 4207]
    """
    U = n_doc_tokens - query_tokens - answer_tokens
    lo = math.ceil(Fraction(str(anchor_min)) * max(U, 0))
    hi = math.floor(Fraction(str(anchor_max)) * max(U, 0))
    if spacing == "endpoints":
        anchors = [lo + (i * (hi - lo)) // (n_queries - 1) for i in range(n_queries)] if n_queries > 1 else [lo]
    elif spacing == "centered":
        anchors = [lo + ((2 * i + 1) * (hi - lo)) // (2 * n_queries) for i in range(n_queries)]
    else:
        raise ValueError(f"anchor_spacing must be one of {ANCHOR_SPACINGS}, got {spacing!r}")
    if U < 1 or len(set(anchors)) != n_queries:
        raise ScoringError(
            f"a {n_doc_tokens}-token document has no room for {n_queries} distinct anchors in "
            f"[{anchor_min}U, {anchor_max}U] with query {query_tokens} + answer {answer_tokens} tokens "
            f"(U = {U}); use longer documents or fewer / shorter queries"
        )
    return anchors


@dataclass
class RetrievalCase:
    """The token sequences of one document: ``groups`` lists (with-document prefix, anchor indices
    read after it); anchor i's continuation is Q A = ``continuations[i]``, its without-document
    sequence ``without[i]``; the last ``answer_tokens`` tokens of each are scored."""

    anchors: list[int]
    n_doc_tokens: int
    n_source_tokens: int
    answer_tokens: int
    groups: list[tuple[list[int], list[int]]]
    continuations: list[list[int]]
    without: list[list[int]]

    @property
    def max_with_length(self) -> int:
        return max(len(p) for p, _ in self.groups) + len(self.continuations[0])


def retrieval_case(doc_ids: list[int], settings: dict, lead_ids: list[int], separator_ids: list[int]) -> RetrievalCase:
    """Both conditions for one document's tokens (without special tokens): [BOS] x[0:T] sep Q A and [BOS] Q A.

    ``lead_ids`` (the BOS, or nothing) starts both conditions; ``separator_ids`` goes between the
    document and Q. ``with_context = before_anchor`` reads x[0:a] instead of the whole document
    before Q A (then the document holds no earlier copy of Q A: plain long-context prediction).
    """
    q, r = settings["query_tokens"], settings["answer_tokens"]
    doc = [int(t) for t in doc_ids[: settings["doc_tokens"]]]
    anchors = choose_anchors(
        len(doc),
        q,
        r,
        settings["n_queries"],
        settings["anchor_min"],
        settings["anchor_max"],
        settings["anchor_spacing"],
    )
    lead, sep = [int(t) for t in lead_ids], [int(t) for t in separator_ids]
    continuations = [doc[a : a + q + r] for a in anchors]
    without = [lead + c for c in continuations]
    if settings["with_context"] == "document":
        groups = [(lead + doc + sep, list(range(len(anchors))))]
    else:
        groups = [(lead + doc[:a] + sep, [i]) for i, a in enumerate(anchors)]
    return RetrievalCase(anchors, len(doc), len(doc_ids), r, groups, continuations, without)


def retrieval_case_for_text(tokenizer, text: str, settings: dict) -> RetrievalCase:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    sep = tokenizer(settings["separator"], add_special_tokens=False)["input_ids"] if settings["separator"] else []
    return retrieval_case(ids, settings, lead_token_ids(tokenizer, settings["bos"]), sep)


# ------------------------------------------------------------------ retrieval_gain_map: a ladder of lengths x depths


def cell_anchors(
    length: int,
    depth_percent: int,
    query_tokens: int,
    answer_tokens: int,
    anchors_per_cell: int = 1,
    anchor_stride: int | None = None,
) -> list[int]:
    """Anchors of cell (L, p): a = round(p/100 * (L - q - r)), halves up (exact integer arithmetic),
    then a + s, ..., a + (n-1) s, each moved back so that its Q A ends inside x[0:L].

    Example:
        >>> cell_anchors(100, 50, 6, 5)  # U = 89: 44.5 rounds up
        [45]
        >>> cell_anchors(100, 100, 6, 5, anchors_per_cell=3)  # moved back: the last Q A ends at x[100]
        [67, 78, 89]
    """
    U = length - query_tokens - answer_tokens
    if U < 0:
        raise ScoringError(
            f"context length {length} has no room for query {query_tokens} + answer {answer_tokens} tokens"
        )
    stride = query_tokens + answer_tokens if anchor_stride is None else anchor_stride
    first = int(Fraction(depth_percent, 100) * U + Fraction(1, 2))  # floor(x + 1/2): halves up
    # the last anchors of a deep cell would run past L: the whole group shifts back instead
    first = max(0, min(first, U - (anchors_per_cell - 1) * stride))
    return [first + j * stride for j in range(anchors_per_cell)]


@dataclass
class MapCase:
    """One document's ladder: ``prefix`` = lead + x[0:L_max]; per length, the cells' anchors
    [depths, n] and their continuations sep + Q A; the without sequences lead + Q A."""

    lengths: list[int]
    depths: list[int]
    anchors: np.ndarray  # int64 [lengths, depths, n]
    prefix: list[int]
    lead: list[int]
    continuations: list[list[list[int]]]  # [length][depth * n + j]
    without: list[list[list[int]]]
    answer_tokens: int
    n_source_tokens: int

    @property
    def max_with_length(self) -> int:
        return len(self.lead) + self.lengths[-1] + len(self.continuations[-1][0])


def map_case(doc_ids: list[int], s: dict, lengths: list[int], lead_ids: list[int], separator_ids: list[int]) -> MapCase:
    q, r = s["query_tokens"], s["answer_tokens"]
    doc = [int(t) for t in doc_ids]
    if len(doc) < lengths[-1]:
        raise ScoringError(
            f"retrieval_gain_map: a document has {len(doc)} tokens, fewer than the longest context length "
            f"{lengths[-1]}; lower --metadata max_context (or give `context_lengths`), or select longer documents (min_tokens)"
        )
    lead, sep = [int(t) for t in lead_ids], [int(t) for t in separator_ids]
    depths = list(s["depths"])
    anchors = np.array(
        [[cell_anchors(L, d, q, r, s["anchors_per_cell"], s["anchor_stride"]) for d in depths] for L in lengths],
        dtype=np.int64,
    )
    conts, without = [], []
    for i in range(len(lengths)):
        qa = [doc[a : a + q + r] for a in anchors[i].reshape(-1)]
        conts.append([sep + x for x in qa])
        without.append([lead + x for x in qa])
    return MapCase(list(lengths), depths, anchors, lead + doc[: lengths[-1]], lead, conts, without, r, len(doc))


def map_case_for_text(tokenizer, text: str, s: dict, lengths: list[int]) -> MapCase:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    sep = tokenizer(s["separator"], add_special_tokens=False)["input_ids"] if s["separator"] else []
    return map_case(ids, s, lengths, lead_token_ids(tokenizer, s["bos"]), sep)
