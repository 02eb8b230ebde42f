"""The passes: per-token log-probs and greedy hits of sequences under their long context, under LongPPL's truncated
windows, as separate sequences, and as continuations read on one shared prefix (a prefix ladder included).

Each pass asks ``plans.py`` for a plan once per (sequence length, batch) and calls it; an out-of-memory error in a
forward is retried under the next plan for the rest of the pass (``plans.run_with_fallback``), with the same
numbers. Arrays cover all ``n - 1`` targets of a sequence; positions a pass does not score hold NaN (logprob) and
False (greedy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import plans, recording
from .forward import KVCache, ScoringError, capabilities, causal_lm
from .support import learned_position_table
from .token_scores import TokenLogprobs, unscored

DEFAULT_BATCH_SIZE = 8


@dataclass(frozen=True)
class Window:
    """One truncated-context window: ids[start:stop], scoring targets [score_from, stop)."""

    start: int
    score_from: int
    stop: int


def truncated_windows(n: int, trunc_len: int, stride: int) -> list[Window]:
    """The LongPPL reference windows for a sequence of n tokens (K = trunc_len, d = stride).

    A sequence with n <= K has no window: every token already sees its whole context.
    """
    if trunc_len < 1 or stride < 1:
        raise ValueError(f"trunc_len and stride must be >= 1, got {trunc_len}, {stride}")
    windows = []
    for s in range(0, n - trunc_len, stride):
        scored = min(stride, n - s - trunc_len)
        windows.append(Window(start=s, score_from=s + trunc_len, stop=s + trunc_len + scored))
    return windows


def as_ids(ids: Sequence[int] | np.ndarray | torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(ids) if not isinstance(ids, torch.Tensor) else ids)
    if t.dim() != 1:
        raise ScoringError(f"expected a 1-D token sequence, got shape {tuple(t.shape)}")
    return t.to(torch.long)


def embedding_rows(model) -> int | None:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = getattr(embeddings, "num_embeddings", None)
    return int(rows) if isinstance(rows, int) and rows > 0 else None


def check_token_ids(model, sequences: list[torch.Tensor]) -> None:
    """Every id must index the model's input embedding: an id beyond it means a tokenizer of another model."""
    rows = embedding_rows(model)
    if rows is None or not sequences:
        return
    largest = max(int(s.max()) for s in sequences if s.numel())
    smallest = min(int(s.min()) for s in sequences if s.numel()) if any(s.numel() for s in sequences) else 0
    if largest >= rows or smallest < 0:
        bad = largest if largest >= rows else smallest
        raise ScoringError(
            f"model type {plans.model_type(model)!r}: token id {bad} is outside the model's input embedding "
            f"({rows} rows), so the tokenizer is not this model's. Way out: the model's own tokenizer "
            "(--model_args tokenizer=... names another one)"
        )


def check_positions(model, n_positions: int) -> None:
    """A sequence of ``n_positions`` must fit a learned position table: a model whose positions cannot extend is
    refused, naming the table's size, whatever allow_beyond_max_length or max_length say."""
    table = learned_position_table(model)
    if table is not None and n_positions > table:
        raise ScoringError(
            f"model type {plans.model_type(model)!r} has a learned table of {table} positions and cannot read a "
            f"{n_positions}-token sequence: a position past its table has no embedding, whatever "
            "allow_beyond_max_length or --model_args max_length say. Way out: sequences of at most "
            f"{table} tokens (the task's length settings)"
        )


def _all_scored(results: list[TokenLogprobs | None]) -> list[TokenLogprobs]:
    """The results of a pass that filled every slot."""
    if any(r is None for r in results):
        raise ScoringError("a sequence was left unscored")
    return [r for r in results if r is not None]


def _scored_counts(sequences: list[torch.Tensor], n_scored, min_context: int) -> list[int]:
    """Per-sequence number of scored (last) tokens; each needs ``min_context`` tokens before it."""
    counts = [int(n_scored)] * len(sequences) if isinstance(n_scored, (int, np.integer)) else [int(k) for k in n_scored]
    if len(counts) != len(sequences):
        raise ValueError(f"{len(counts)} scored-token counts for {len(sequences)} sequences")
    for s, k in zip(sequences, counts):
        if not 1 <= k <= int(s.numel()) - min_context:
            raise ScoringError(
                f"cannot score the last {k} tokens of a {int(s.numel())}-token sequence "
                f"(at least {min_context} token(s) of context must precede them)"
            )
    return counts


# ------------------------------------------------------------------ the long pass


def score_long(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    chunk_size: int = plans.DEFAULT_CHUNK_SIZE,
    score_from: int = 1,
    long_pass: str = "auto",
) -> TokenLogprobs:
    """Log-probs and greedy hits of ids[t] given all of ids[:t], for t >= score_from (a batch of one of
    ``score_long_batch``)."""
    return score_long_batch(model, [ids], chunk_size=chunk_size, score_from=score_from, long_pass=long_pass)[0]


@torch.no_grad()
def score_long_batch(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    chunk_size: int = plans.DEFAULT_CHUNK_SIZE,
    score_from: int = 1,
    long_pass: str = "auto",
    batch_size: int | None = None,
) -> list[TokenLogprobs]:
    """``score_long`` for several sequences of ONE length (no padding, no mask): as many per forward as the plan
    allows (at most ``batch_size``) (``full``: one forward, the head replayed on the scored rows in blocks; ``chunked``: KV-cache chunks of
    ``chunk_size`` tokens, each chunk's logits for the scored positions only; positions before ``score_from`` only
    fill the cache)."""
    model = causal_lm(model)
    seqs = [as_ids(s) for s in sequences]
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not seqs:
        return []
    n = int(seqs[0].numel())
    if any(int(s.numel()) != n for s in seqs):
        raise ScoringError(
            f"score_long_batch needs sequences of one length, got {sorted({int(s.numel()) for s in seqs})}"
        )
    score_from = max(1, int(score_from))
    results = [unscored(n) for _ in seqs]
    if n < 2 or score_from >= n:
        return results
    check_token_ids(model, seqs)
    check_positions(model, n)
    batch = min(len(seqs), int(batch_size)) if batch_size else len(seqs)
    plan = plans.choose(plans.long_pass_plans(model, n, batch, long_pass, chunk_size), long_pass)
    ids = torch.stack(seqs)
    first = score_from - 1  # array index of the first scored target
    done = 0

    def attempt(plan: plans.Plan) -> plans.Plan:
        nonlocal done
        recording.note_plan(model, "long", plan.key())
        ids_dev = ids.to(plan.device)
        while done < len(seqs):
            rows = slice(done, min(done + plan.batch, len(seqs)))
            lps, hits = plan.scores(ids_dev[rows], ids[rows], first)
            for r in range(lps.shape[0]):
                results[done + r].logprob[first:] = lps[r].numpy()
                results[done + r].greedy[first:] = hits[r].numpy()
            done = rows.stop
        return plan

    used = plans.run_with_fallback(plan, attempt, "the long pass")
    recording.count(model, "long", used.strategy, len(seqs))
    return results


# ------------------------------------------------------------------ sequences scored at their end, on their own


def _equal_length_groups(lengths: list[int]) -> list[list[int]]:
    """Indices of equal-length sequences, longest first."""
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(n, []).append(i)
    return [by_length[n] for n in sorted(by_length, reverse=True)]


@torch.no_grad()
def score_sequence_ends(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int],
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every sequence, each sequence on its own (no shared context):
    token s[i] (i >= len(s) - n_scored) gets log p(s[i] | s[:i]) in float32 and a greedy hit.

    Returns one TokenLogprobs per sequence, of length n_scored, in the order given. Sequences of one length go up to
    ``batch_size`` per forward (no padding, so no mask, and a length-dependent RoPE sees each sequence's own
    length); only the scored rows reach the output head.
    """
    model = causal_lm(model)
    seqs = [as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts = _scored_counts(seqs, n_scored, 1)
    results: list[TokenLogprobs | None] = [None] * len(seqs)
    if not seqs:
        return []
    check_token_ids(model, seqs)
    lengths = [int(s.numel()) for s in seqs]
    check_positions(model, max(lengths))
    strategy = ""
    for members in _equal_length_groups(lengths):
        width = lengths[members[0]]
        plan = plans.choose(plans.separate_plans(model, width, min(batch_size, len(members))))
        done = 0

        def attempt(plan: plans.Plan) -> plans.Plan:
            nonlocal done
            recording.note_plan(model, "separate_sequences", plan.key())
            while done < len(members):
                group = members[done : done + plan.batch]
                ids = torch.stack([seqs[i] for i in group])
                # row r scores targets [width - k_r, width): array positions [width - k_r - 1, width - 1)
                first = min(width - counts[i] - 1 for i in group)
                lps, hits = plan.scores(ids.to(plan.device), ids, first)
                for r, i in enumerate(group):
                    k = counts[i]
                    results[i] = TokenLogprobs(lps[r, -k:].numpy().copy(), hits[r, -k:].numpy().copy())
                done += len(group)
            return plan

        strategy = plans.run_with_fallback(plan, attempt, "a pass of separate sequences").strategy
    recording.count(model, "separate_sequences", strategy, len(seqs))
    return _all_scored(results)


@torch.no_grad()
def score_truncated(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    trunc_len: int,
    stride: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[TokenLogprobs]:
    """Scores of every sequence under the reference truncated windows (K = trunc_len, d = stride).

    Each window ids[s : s + K + d'] is a sequence of its own whose last d' tokens are scored, so the windows of
    all sequences go through ``score_sequence_ends``.
    """
    seqs = [as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    results = [unscored(int(s.numel())) for s in seqs]
    jobs = [(i, w) for i, s in enumerate(seqs) for w in truncated_windows(int(s.numel()), trunc_len, stride)]
    if not jobs:
        return results
    scored = score_sequence_ends(
        model,
        [seqs[i][w.start : w.stop] for i, w in jobs],
        [w.stop - w.score_from for _, w in jobs],
        batch_size=batch_size,
    )
    for (i, w), window in zip(jobs, scored):
        # target t lives at array index t - 1
        results[i].logprob[w.score_from - 1 : w.stop - 1] = window.logprob
        results[i].greedy[w.score_from - 1 : w.stop - 1] = window.greedy
    return results


# ------------------------------------------------------------------ continuations of a shared prefix


@torch.no_grad()
def score_continuations(
    model,
    prefix_ids: Sequence[int] | np.ndarray | torch.Tensor,
    continuations: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int] | None = None,
    chunk_size: int = plans.DEFAULT_CHUNK_SIZE,
    long_pass: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every continuation, each read after the same prefix.

    For continuation c and its scored token c[i] (i >= len(c) - n_scored): log p(c[i] | prefix + c[:i]) in
    float32, and whether c[i] is the argmax. Returns one TokenLogprobs per continuation, of length n_scored,
    index j holding continuation token len(c) - n_scored + j. ``n_scored`` (int or one per continuation)
    defaults to the whole continuation.

    Where a KV cache is exact (``support.py``), prefix[:-1] is computed ONCE into a cache (one forward, or chunks)
    and every continuation is fed as [prefix[-1]] + c on top of that one copy, the cache cropped back before the
    next. Elsewhere every prefix + c is one forward of its own, up to ``batch_size`` equal-length ones at a time.
    """
    model = causal_lm(model)
    prefix = as_ids(prefix_ids)
    conts = [as_ids(c) for c in continuations]
    if chunk_size < 1 or batch_size < 1:
        raise ValueError(f"chunk_size and batch_size must be >= 1, got {chunk_size}, {batch_size}")
    if prefix.numel() < 1:
        raise ScoringError("score_continuations needs a prefix of at least one token")
    counts = _scored_counts(conts, [int(c.numel()) for c in conts] if n_scored is None else n_scored, 0)
    if not conts:
        return []
    check_token_ids(model, [prefix, *conts])
    ladder = score_prefix_ladder(
        model, prefix, [(int(prefix.numel()), conts)], counts, chunk_size, long_pass, batch_size, check_ids=False
    )
    return ladder[0]


@torch.no_grad()
def score_prefix_ladder(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    rungs: Sequence[tuple[int, Iterable[Sequence[int] | np.ndarray | torch.Tensor]]],
    n_scored: int | Sequence[int] | None = None,
    chunk_size: int = plans.DEFAULT_CHUNK_SIZE,
    long_pass: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
    check_ids: bool = True,
) -> list[list[TokenLogprobs]]:
    """``score_continuations(model, ids[:P], continuations)`` for every rung (P, continuations).

    ``rungs`` lists (prefix length P, continuations) with strictly increasing P in [1, len(ids)]. Returns, per
    rung, one TokenLogprobs per continuation (its last ``n_scored`` tokens; default: the whole continuation; a list
    gives one count per continuation of the single rung of ``score_continuations``), exactly as
    ``score_continuations`` defines them.

    Where a KV cache is exact, ids is computed ONCE: under a ``full`` plan ids[:P_max - 1] in one forward and the
    rungs read from the longest down, the cache cropped to each rung's P - 1; under a ``chunked`` plan the cache
    grows in chunks from one rung's prefix to the next. Every continuation is read on that one cache. Elsewhere
    every ids[:P] + c is one forward of its own, a rung's equal-length ones ``batch_size`` at a time.
    """
    model = causal_lm(model)
    seq = as_ids(ids)
    if chunk_size < 1 or batch_size < 1:
        raise ValueError(f"chunk_size and batch_size must be >= 1, got {chunk_size}, {batch_size}")
    ladder = []
    last = 0
    for p, conts in rungs:
        p = int(p)
        if not last < p <= int(seq.numel()):
            raise ScoringError(
                f"ladder prefix lengths must increase strictly within 1..{int(seq.numel())}; got {p} after {last}"
            )
        cs = [as_ids(c) for c in conts]
        default = [int(c.numel()) for c in cs]
        counts = _scored_counts(cs, default if n_scored is None else n_scored, 0)
        ladder.append((p, cs, counts))
        last = p
    if not ladder:
        return []
    if check_ids:
        check_token_ids(model, [seq, *(c for _, cs, _ in ladder for c in cs)])
    check_positions(model, max(p + max((int(c.numel()) for c in cs), default=0) for p, cs, _ in ladder))
    plans.check_strategy(model, long_pass)
    if not capabilities(model).support.kv_cache_exact:
        out = []
        for p, cs, counts in ladder:
            out.append(
                score_sequence_ends(model, [torch.cat([seq[:p], c]) for c in cs], counts, batch_size) if cs else []
            )
            recording.count(model, "continuations", "one_forward_each", len(cs))
        return out
    return _ladder_on_one_cache(model, seq, ladder, chunk_size, long_pass)


def _ladder_on_one_cache(model, seq: torch.Tensor, ladder: list, chunk_size: int, long_pass: str) -> list:
    p_max = ladder[-1][0]
    longest = p_max + max((int(c.numel()) for _, cs, _ in ladder for c in cs), default=0)
    plan = plans.choose(plans.long_pass_plans(model, longest, 1, long_pass, chunk_size, keep_cache=True), long_pass)
    done: list[dict] = [{} for _ in ladder]

    def attempt(plan: plans.Plan) -> plans.Plan:
        recording.note_plan(model, "prefix", plan.key())
        seq_dev = seq.to(plan.device)[None]
        cache = KVCache(model)
        # the longest prefix at once, then the rungs from the longest down (a cache only shrinks); or the cache
        # grown rung by rung
        order = range(len(ladder) - 1, -1, -1) if plan.fills_longest_first else range(len(ladder))
        if plan.fills_longest_first:
            todo = [r for r in order if len(done[r]) < len(ladder[r][1]) and ladder[r][0] > 1]
            if todo:
                plan.fill(cache, seq_dev, ladder[todo[0]][0] - 1)
        for r in order:
            p, cs, counts = ladder[r]
            if len(done[r]) == len(cs):
                continue
            if p == 1:  # no prefix to cache: each continuation after the one token is a sequence of its own
                scored = score_sequence_ends(model, [torch.cat([seq[:1], c]) for c in cs], counts, 1)
                done[r].update(enumerate(scored))
                continue
            if p - 1 > cache.length:
                plan.fill(cache, seq_dev, p - 1)
            else:
                cache.crop(p - 1)
            plan.read_continuations(cache, seq[p - 1 : p], cs, counts, done[r])
        return plan

    used = plans.run_with_fallback(plan, attempt, "continuations on a shared prefix")
    recording.count(model, "long", used.strategy)
    recording.count(model, "continuations", "shared_kv_cache", sum(len(cs) for _, cs, _ in ladder))
    return [[done[r][i] for i in range(len(cs))] for r, (_, cs, _) in enumerate(ladder)]
