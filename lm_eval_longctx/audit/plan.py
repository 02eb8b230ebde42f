"""What an audit will run, decided before any of it runs: the claimed window W, the ladder of context lengths relative
to W, the documents, which lengths are left out and why, and the cost of each length (tokens forwarded, and seconds
from a short measured probe on this machine).

Each rung of the ladder is one stage, a length L in the positions the model reads: the retrieval-gain map with a
context of L less its lead token, query and answer (so its whole sequence holds L tokens; every document, every
depth), and the forgetting curve at the copy length whose samples fill L (2 l + 3 <= L). Stages run shortest first,
so a claim can be refuted before its longest lengths are paid for.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..engine.window import ClaimedWindow

MAP_TASK = "retrieval_gain_map"
CURVE_TASK = "forgetting_curve"
# the map's defaults, which the audit keeps: query and answer tokens of a cell
QUERY_TOKENS = 24
ANSWER_TOKENS = 24
# the shortest rung worth a stage: a cell needs room for its query and answer at every depth
MIN_RUNG = 4 * (QUERY_TOKENS + ANSWER_TOKENS)


@dataclass(frozen=True)
class Budget:
    """How much an audit runs: the ladder as fractions of W (``beyond``: past W, with --beyond), the documents, the
    map's depths and anchors per cell, and the forgetting curve's samples per length."""

    name: str
    fractions: tuple[float, ...]
    beyond: tuple[float, ...]
    docs: int
    depths: tuple[int, ...]
    anchors_per_cell: int
    samples_per_length: int

    def record(self) -> dict:
        return {
            "name": self.name,
            "fractions": list(self.fractions),
            "beyond": list(self.beyond),
            "docs": self.docs,
            "depths": list(self.depths),
            "anchors_per_cell": self.anchors_per_cell,
            "samples_per_length": self.samples_per_length,
        }


BUDGETS = {
    "ci": Budget("ci", (1 / 8, 1 / 4, 1 / 2, 1), (2,), 3, (10, 50, 90), 1, 2),
    "full": Budget("full", (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1), (3 / 2, 2), 6, (10, 30, 50, 70, 90), 2, 4),
}


class AuditPlanError(ValueError):
    """An audit that cannot be planned (an unknown budget, no length left to test, documents too short for all)."""


@dataclass(frozen=True)
class Rung:
    """One stage: ``length`` tokens read (``fraction`` of W), the map's context length in it, the forgetting curve's
    copy length, and whether the sequences pass the model's maximum length (then the stage allows it:
    ``allow_beyond_max_length``)."""

    length: int
    fraction: float
    context_length: int
    copy_length: int
    beyond_max_length: bool

    @property
    def name(self) -> str:
        return f"L{self.length:07d}"


@dataclass
class Plan:
    window: ClaimedWindow
    budget: Budget
    docs: int
    rungs: list[Rung]
    left_out: list[dict] = field(default_factory=list)  # {"length", "why"}
    doc_tokens: list[int] = field(default_factory=list)
    stream_tokens: int = 0
    # whether the map's cells are read on the one cache of their document's context (a KV cache exact for the
    # model), or each cell is a whole sequence of its own (length-dependent RoPE, recurrent state)
    shares_prefix: bool = True

    def record(self) -> dict:
        return {
            "window": self.window.record(),
            "budget": self.budget.record(),
            "docs": self.docs,
            "lengths": [r.length for r in self.rungs],
            "context_lengths": [r.context_length for r in self.rungs],
            "copy_lengths": [r.copy_length for r in self.rungs],
            "left_out": list(self.left_out),
            "doc_tokens": list(self.doc_tokens),
            "stream_tokens": self.stream_tokens,
            "shares_prefix": self.shares_prefix,
        }


def budget_named(name: str) -> Budget:
    if name not in BUDGETS:
        raise AuditPlanError(f"unknown budget {name!r}; known: {sorted(BUDGETS)}")
    return BUDGETS[name]


def copy_length_for(length: int) -> int:
    """The forgetting curve's copy length whose samples ([BOS] S [BOS] S [EOS], 2 l + 3 tokens) fill ``length``.

    Example:
        >>> copy_length_for(8192)
        4094
    """
    return (int(length) - 3) // 2


def ladder(window: int, budget: Budget, beyond: bool) -> list[tuple[int, float]]:
    """(length, fraction of W) for every rung: W times each fraction (rounded down), shortest first, without repeats
    or rungs below ``MIN_RUNG``.

    Example:
        >>> ladder(8192, budget_named("ci"), beyond=True)
        [(1024, 0.125), (2048, 0.25), (4096, 0.5), (8192, 1), (16384, 2)]
    """
    fractions = list(budget.fractions) + (list(budget.beyond) if beyond else [])
    out: dict[int, float] = {}
    for f in fractions:
        length = int(window * f)
        if length >= MIN_RUNG and length not in out:
            out[length] = f
    return sorted(out.items())


def plan_audit(
    window: ClaimedWindow,
    budget: Budget,
    doc_tokens: list[int],
    stream_tokens: int,
    max_length: int | None,
    position_table: int | None,
    beyond: bool = False,
    lead_tokens: int = 1,
) -> Plan:
    """The stages of an audit of a model claiming ``window``: every rung of the ladder that the documents
    (``doc_tokens``: the tokens of each document the map reads; ``stream_tokens``: the forgetting curve's stream) and
    the model can take; the others left out, each with why. ``max_length``: the length past which a stage must
    allow going beyond the model's maximum; ``position_table``: a learned table no sequence may pass;
    ``lead_tokens``: the BOS the map's sequences start with (0 or 1, as the tokenizer adds one)."""
    # the map's sequence beside its context: the lead token, the query and the answer
    extra = lead_tokens + QUERY_TOKENS + ANSWER_TOKENS
    rungs, left_out = [], []
    shortest_doc = min(doc_tokens) if doc_tokens else 0
    for length, fraction in ladder(window.tokens, budget, beyond):
        context, copy = length - extra, copy_length_for(length)
        why = None
        if position_table is not None and length > position_table:
            why = f"the model's learned position table holds {position_table} positions, fewer than {length}"
        elif context > shortest_doc:
            why = (
                f"the shortest of the {len(doc_tokens)} documents holds {shortest_doc} tokens, fewer than the "
                f"{context}-token context of a {length}-token sequence; give longer documents (--documents FILE or "
                "govreport) or fewer (--docs)"
            )
        elif 3 * copy > stream_tokens:
            why = (
                f"the forgetting curve's copy length {copy} needs a stream of {3 * copy} tokens and the documents "
                f"hold {stream_tokens}; give longer documents (--documents)"
            )
        if why is not None:
            left_out.append({"length": length, "why": why})
            continue
        over = max_length is not None and length > max_length
        rungs.append(Rung(length, fraction, context, copy, over))
    if not rungs:
        reasons = "; ".join(f"{x['length']}: {x['why']}" for x in left_out)
        raise AuditPlanError(f"no context length of the ladder can be tested ({reasons})")
    return Plan(window, budget, budget.docs, rungs, left_out, list(doc_tokens), stream_tokens)


# ------------------------------------------------------------------ cost


def stage_sequences(rung: Rung, plan: Plan) -> list[int]:
    """The lengths of the sequences one stage forwards: per document the map's context (read once, its cells on its
    cache) and each cell's query and answer with and without it; the forgetting curve's samples in both modes."""
    b = plan.budget
    cells = len(b.depths) * b.anchors_per_cell
    cell = QUERY_TOKENS + ANSWER_TOKENS + 1
    if plan.shares_prefix:
        per_doc = [rung.context_length] + [cell] * (2 * cells)
    else:
        per_doc = [rung.context_length + cell] * cells + [cell] * cells
    curve = [2 * rung.copy_length + 3] * (2 * b.samples_per_length)
    return per_doc * plan.docs + curve


def stage_tokens(rung: Rung, plan: Plan) -> int:
    return sum(stage_sequences(rung, plan))


@dataclass(frozen=True)
class TimeModel:
    """Seconds of one forward of n tokens, t(n) = a n + b n^2, fitted to two measured forwards (``probe``)."""

    per_token: float
    per_token_squared: float
    measured: tuple[tuple[int, float], ...]

    def seconds(self, n: int) -> float:
        return self.per_token * n + self.per_token_squared * n * n

    def record(self) -> dict:
        return {
            "seconds_per_token": self.per_token,
            "seconds_per_token_squared": self.per_token_squared,
            "measured": [{"tokens": n, "seconds": round(s, 4)} for n, s in self.measured],
        }


def fit_time_model(measured: list[tuple[int, float]]) -> TimeModel:
    """t(n) = a n + b n^2 through two measured (tokens, seconds) points, b >= 0 (a curve that flattens with length
    is measurement noise: then t is linear through the longer point)."""
    (n1, t1), (n2, t2) = sorted(measured)[:1] + sorted(measured)[-1:]
    if n1 == n2:
        return TimeModel(t2 / n2, 0.0, tuple(measured))
    b = (t2 / n2 - t1 / n1) / (n2 - n1)
    if b < 0:
        return TimeModel(t2 / n2, 0.0, tuple(measured))
    return TimeModel(t1 / n1 - b * n1, b, tuple(measured))


def probe(model, window: int, repeats: int = 3) -> TimeModel:
    """Time the engine's long pass on two lengths (512 and min(2048, W) tokens) of this model on its device, the
    best of ``repeats`` each, after one warm-up forward of each."""
    import torch

    from ..engine import scoring

    vocab = int(getattr(model.config, "vocab_size", 0) or 1000)
    lengths = sorted({min(512, window), min(2048, window)})
    generator = torch.Generator().manual_seed(0)
    measured = []
    for n in lengths:
        ids = torch.randint(3, vocab, (n,), generator=generator)
        scoring.score_long(model, ids)
        best = math.inf
        for _ in range(repeats):
            start = time.perf_counter()
            scoring.score_long(model, ids)
            best = min(best, time.perf_counter() - start)
        measured.append((n, best))
    if len(measured) == 1:
        measured.append(measured[0])
    return fit_time_model(measured)


def stage_seconds(rung: Rung, plan: Plan, model: TimeModel) -> float:
    return sum(model.seconds(n) for n in stage_sequences(rung, plan))
