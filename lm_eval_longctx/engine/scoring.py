"""Dual-context scoring engine: pure torch + transformers, no lm-eval import.

Given a causal LM and a token sequence ``ids`` of length ``n``, the engine returns, for every target
position ``t`` in ``1..n-1`` (array index ``t - 1``):

* ``logprob``: log p(ids[t] | context) in float32, and
* ``greedy``: whether ids[t] is the argmax of the next-token distribution (teacher forced),

under two kinds of context:

* the *long* context ids[:t] (``score_long``, ``score_long_batch``);
* the *truncated* contexts of the LongPPL reference (``score_truncated``): windows ids[s : s + K + d'] for
  s in range(0, n - K, d), d' = min(d, n - s - K), scoring the positions t in [s + K, s + K + d').

and, for continuations read after a shared prefix, ``score_continuations`` and ``score_prefix_ladder``.
Every number equals what one plain forward of the sequence gives (float32 tolerance), on every model family:
how a model is scored (``long_pass``: ``full`` or ``chunked``; a shared prefix cache or one forward per
continuation) is chosen by ``choose_long_pass`` from the declaration in ``support.py``, and no
[sequence x vocabulary] logits tensor is ever built. Arrays cover all ``n - 1`` targets; positions a pass
does not score hold NaN (logprob) and False (greedy).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import memory
from .forward import (
    LOGPROB_BLOCK_BYTES,
    KVCache,
    ScoringError,
    capabilities,
    causal_lm,
    full_scores,
    input_device,
    logprob_and_greedy,
    own_logits,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "LONG_PASS_CHOICES",
    "LOGPROB_BLOCK_BYTES",
    "ScoringError",
    "TokenLogprobs",
    "SequenceScores",
    "Window",
    "truncated_windows",
    "input_device",
    "check_model",
    "choose_long_pass",
    "score_long",
    "score_long_batch",
    "score_truncated",
    "score_sequence_ends",
    "score_continuations",
    "score_prefix_ladder",
    "recording",
    "ScoringRecord",
    "with_batch_backoff",
    "in_batches_with_backoff",
]

DEFAULT_CHUNK_SIZE = 1024
LONG_PASS_CHOICES = ("auto", "full", "chunked")
DEFAULT_BATCH_SIZE = 8
log = logging.getLogger("lm_eval_longctx")


@dataclass
class TokenLogprobs:
    """Per-target scores of one sequence: index i is the prediction of token i + 1."""

    logprob: np.ndarray  # float32 [n - 1], NaN where not scored
    greedy: np.ndarray  # bool [n - 1]

    def __len__(self) -> int:
        return len(self.logprob)


@dataclass
class SequenceScores:
    """Everything scored for one text: its tokens, their character offsets, both passes."""

    token_ids: np.ndarray  # int64 [n]
    offsets: np.ndarray | None  # int64 [n, 2] character spans, or None when not asked for
    long: TokenLogprobs
    short: TokenLogprobs | None = None

    def to_state(self) -> dict:
        """Plain arrays and numbers only (what caches store)."""
        state = {
            "token_ids": self.token_ids,
            "offsets": self.offsets,
            "long_logprob": self.long.logprob,
            "long_greedy": self.long.greedy,
        }
        if self.short is not None:
            state.update(short_logprob=self.short.logprob, short_greedy=self.short.greedy)
        return state

    @classmethod
    def from_state(cls, state: dict) -> SequenceScores:
        short = None
        if "short_logprob" in state:
            short = TokenLogprobs(np.asarray(state["short_logprob"]), np.asarray(state["short_greedy"]))
        return cls(
            np.asarray(state["token_ids"]),
            None if state["offsets"] is None else np.asarray(state["offsets"]),
            TokenLogprobs(np.asarray(state["long_logprob"]), np.asarray(state["long_greedy"])),
            short,
        )

    def summary(self) -> dict:
        """Per-sequence numbers, no per-token array: the token count and, per pass, the targets it scored, their
        NLL sum (float64) and greedy hits."""
        out = {"n_tokens": int(len(self.token_ids)), **_pass_summary("long", self.long)}
        if self.short is not None:
            out.update(_pass_summary("short", self.short))
        return out

    def __str__(self) -> str:
        # lm-eval writes str() of every response into --log_samples files: make it JSON text a user can parse
        return json.dumps(self.summary(), separators=(",", ":"))

    def __repr__(self) -> str:
        return f"SequenceScores({self})"


def _pass_summary(name: str, scores: TokenLogprobs) -> dict:
    scored = ~np.isnan(scores.logprob)
    return {
        f"{name}_scored": int(scored.sum()),
        f"{name}_nll_sum": float(-np.sum(scores.logprob[scored].astype(np.float64))) + 0.0,  # + 0.0: no -0.0
        f"{name}_greedy_hits": int(scores.greedy[scored].sum()),
    }


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


def _as_ids(ids: Sequence[int] | np.ndarray | torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(ids) if not isinstance(ids, torch.Tensor) else ids)
    if t.dim() != 1:
        raise ScoringError(f"expected a 1-D token sequence, got shape {tuple(t.shape)}")
    return t.to(torch.long)


def _unscored(n: int) -> TokenLogprobs:
    return TokenLogprobs(np.full(max(n - 1, 0), np.nan, dtype=np.float32), np.zeros(max(n - 1, 0), dtype=bool))


def _all_scored(results: list[TokenLogprobs | None]) -> list[TokenLogprobs]:
    """The results of a pass that filled every slot."""
    if any(r is None for r in results):
        raise ScoringError("a sequence was left unscored")
    return [r for r in results if r is not None]


def _model_type(model) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)


# ------------------------------------------------------------------ the strategy, chosen once per pass


def check_model(model, long_pass: str = "auto") -> None:
    """Refuse, before any work, a model the engine cannot score exactly under ``long_pass``."""
    model = causal_lm(model)
    if long_pass not in LONG_PASS_CHOICES:
        raise ValueError(f"long_pass must be one of {LONG_PASS_CHOICES}, got {long_pass!r}")
    caps = capabilities(model)
    if caps.support.refused:
        raise ScoringError(f"{caps.support.refused} (docs/support.md)")
    if long_pass == "full" and not caps.full:
        raise ScoringError(f"{caps.full_problem}. Way out: long_pass auto or chunked (docs/support.md)")
    if long_pass == "chunked" and not caps.support.kv_cache_exact:
        raise ScoringError(_chunked_refusal(model, caps))
    if not caps.full and not caps.support.kv_cache_exact:
        raise ScoringError(
            f"{caps.full_problem}; and a KV cache is not exact for it either "
            f"({caps.support.no_cache_reason}). The engine cannot score this model exactly (docs/support.md)"
        )


def _chunked_refusal(model, caps) -> str:
    return (
        f"long_pass chunked: {caps.support.no_cache_reason}, so KV-cache chunks would not give what one forward "
        'of the sequence gives. Way out: --metadata \'{"long_pass": "full"}\' (or auto)'
    )


def choose_long_pass(
    model, long_pass: str, n_tokens: int, batch: int = 1, chunk_size: int = DEFAULT_CHUNK_SIZE, keep_cache: bool = False
) -> str:
    """``full`` or ``chunked`` for a pass over ``batch`` sequences of ``n_tokens``: as asked when that is exact
    for the model, else an error; ``auto`` takes ``full`` when its memory estimate (with the KV cache it fills,
    when ``keep_cache``) fits the device, else ``chunked`` where a KV cache is exact, else an error saying how
    much memory one forward needs."""
    model = causal_lm(model)
    check_model(model, long_pass)
    caps = capabilities(model)
    if long_pass != "auto":
        return long_pass
    if caps.full:
        device = input_device(model)
        need = memory.full_forward_bytes(model, n_tokens, batch, device.type)
        if keep_cache:
            need += memory.kv_cache_bytes(model, n_tokens, batch)
        free = memory.free_bytes(device)
        if free is None or need <= memory.FREE_MEMORY_SHARE * free:
            return "full"
        if caps.support.kv_cache_exact:
            return "chunked"
        raise ScoringError(
            f"model type {_model_type(model)!r}: one forward of {batch} x {n_tokens} tokens needs about "
            f"{memory.gib(need)} and {memory.gib(free)} is free on {device}; the model cannot be fed in KV-cache "
            f"chunks exactly ({caps.support.no_cache_reason}). Ways out: a device with more memory, shorter "
            'sequences, a smaller batch, or --metadata \'{"long_pass": "full"}\' to try anyway'
        )
    return "chunked"


# what a model was scored with, while a ``recording`` is open: the harness records it in the results
_RECORDINGS: list[ScoringRecord] = []


class ScoringRecord:
    """How the engine scored one model inside a ``recording`` block: the sequences per pass and strategy, the
    model's dtype and device, and the support facts the strategies rest on."""

    def __init__(self, model):
        self.model = causal_lm(model)
        self.counts: Counter = Counter()

    def summary(self) -> dict:
        passes: dict = {}
        for (what, how), n in sorted(self.counts.items()):
            passes.setdefault(what, {})[how] = n
        model = self.model
        dtype = next((str(p.dtype).replace("torch.", "") for p in model.parameters() if p.is_floating_point()), None)
        return {
            "passes": passes,
            "dtype": dtype,
            "device": str(input_device(model)),
            **capabilities(model).support.summary(),
        }


@contextlib.contextmanager
def recording(model):
    """Count how ``model`` is scored inside the block (``ScoringRecord``)."""
    record = ScoringRecord(model)
    _RECORDINGS.append(record)
    try:
        yield record
    finally:
        _RECORDINGS.remove(record)


def _count(model, what: str, how: str, n: int = 1) -> None:
    model = causal_lm(model)
    for record in _RECORDINGS:
        if record.model is model:
            record.counts[(what, how)] += n


# ------------------------------------------------------------------ the long pass


def score_long(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
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
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    score_from: int = 1,
    long_pass: str = "auto",
) -> list[TokenLogprobs]:
    """``score_long`` for several sequences of ONE length in one batched pass (no padding, no mask).

    ``full``: one forward of the batch, the head replayed on the scored rows in blocks. ``chunked``: KV-cache
    chunks of ``chunk_size`` tokens, each chunk's logits for the scored positions only; positions before
    ``score_from`` only fill the cache.
    """
    model = causal_lm(model)
    seqs = [_as_ids(s) for s in sequences]
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
    results = [_unscored(n) for _ in seqs]
    if n < 2 or score_from >= n:
        return results
    # the strategy one sequence needs; a batch that does not fit in one forward is split, not chunked
    strategy = choose_long_pass(model, long_pass, n, 1, chunk_size)
    ids = torch.stack(seqs)
    ids_dev = ids.to(input_device(model))
    first = score_from - 1  # array index of the first scored target
    if strategy == "full":
        step = _fitting_batch(model, n, len(seqs))
        for a in range(0, len(seqs), step):
            lps, hits = full_scores(model, ids_dev[a : a + step], first, n - 1, capabilities(model).support)
            for r in range(lps.shape[0]):
                results[a + r].logprob[first:] = lps[r].numpy()
                results[a + r].greedy[first:] = hits[r].numpy()
    else:
        _chunked_long_pass(model, ids, ids_dev, first, chunk_size, results)
    _count(model, "long", strategy, len(seqs))
    return results


def _chunked_long_pass(model, ids, ids_dev, first: int, chunk_size: int, results: list[TokenLogprobs]) -> None:
    n = ids.shape[1]
    cache = KVCache(model) if n > chunk_size else None
    for a in range(0, n, chunk_size):
        b = min(a + chunk_size, n)
        start = max(a, first)  # positions before first only fill the cache
        keep = max(b - start, 1)
        if cache is not None:
            logits = cache.feed(ids_dev[:, a:b], keep)
        else:
            logits, _ = own_logits(model, ids_dev[:, a:b], keep, use_cache=False)
        stop = min(b, n - 1)
        if stop > start:
            for r in range(ids.shape[0]):  # row by row: no [batch, chunk, vocab] float32 copy
                lp, hit = logprob_and_greedy(logits[r, : stop - start], ids[r, start + 1 : stop + 1])
                results[r].logprob[start:stop] = lp.numpy()
                results[r].greedy[start:stop] = hit.numpy()
        del logits


# ------------------------------------------------------------------ sequences scored at their end, on their own


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


def _halved_until_it_fits(model, batch_size: int, bytes_for) -> int:
    """At most ``batch_size``, halved while ``bytes_for(batch)`` (a memory estimate) exceeds the free memory's share."""
    free = memory.free_bytes(input_device(model))
    batch = max(1, int(batch_size))
    while batch > 1 and free is not None and bytes_for(batch) > memory.FREE_MEMORY_SHARE * free:
        batch //= 2
    return batch


def _fitting_batch(model, n_tokens: int, batch_size: int) -> int:
    """Sequences of ``n_tokens`` per forward: at most ``batch_size``, fewer when the memory estimate says so."""
    device_type = input_device(model).type
    return _halved_until_it_fits(
        model, batch_size, lambda b: memory.full_forward_bytes(model, n_tokens, b, device_type)
    )


def _fitting_cache_batch(model, n_tokens: int, batch_size: int) -> int:
    """Continuations on one repeated cache of ``n_tokens``: at most ``batch_size``, fewer when the extra copies of
    the cache would not fit."""
    return _halved_until_it_fits(model, batch_size, lambda b: (b - 1) * memory.kv_cache_bytes(model, n_tokens, 1))


def _equal_length_batches(lengths: list[int], batch_for_length) -> list[list[int]]:
    """Indices of equal-length sequences, longest first, ``batch_for_length(length)`` of them per forward."""
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(n, []).append(i)
    batches = []
    for n in sorted(by_length, reverse=True):
        members, step = by_length[n], batch_for_length(n)
        batches += [members[a : a + step] for a in range(0, len(members), step)]
    return batches


@torch.no_grad()
def score_sequence_ends(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int],
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every sequence, each sequence on its own (no shared context):
    token s[i] (i >= len(s) - n_scored) gets log p(s[i] | s[:i]) in float32 and a greedy hit.

    Returns one TokenLogprobs per sequence, of length n_scored, in the order given. Sequences of one length go
    ``batch_size`` per forward (no padding, so no mask, and a length-dependent RoPE sees each sequence's own
    length); only the scored rows reach the output head.
    """
    model = causal_lm(model)
    seqs = [_as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts = _scored_counts(seqs, n_scored, 1)
    results: list[TokenLogprobs | None] = [None] * len(seqs)
    if not seqs:
        return []
    caps = capabilities(model)
    if not caps.full:
        check_model(model, "auto")  # refuses a model that has neither strategy
    device = input_device(model)
    lengths = [int(s.numel()) for s in seqs]
    for batch in _equal_length_batches(lengths, lambda n: _fitting_batch(model, n, batch_size)):
        width = lengths[batch[0]]
        ids = torch.stack([seqs[i] for i in batch])
        # row r scores targets [width - k_r, width): array positions [width - k_r - 1, width - 1)
        first = min(width - counts[i] - 1 for i in batch)
        if caps.full:
            lps, hits = full_scores(model, ids.to(device), first, width - 1, caps.support)
        else:
            logits, _ = own_logits(model, ids.to(device), width - first, use_cache=False)
            rows = [logprob_and_greedy(logits[r, : width - 1 - first], ids[r, first + 1 :]) for r in range(len(batch))]
            lps, hits = torch.stack([x[0] for x in rows]), torch.stack([x[1] for x in rows])
            del logits
        for r, i in enumerate(batch):
            k = counts[i]
            results[i] = TokenLogprobs(lps[r, -k:].numpy().copy(), hits[r, -k:].numpy().copy())
    _count(model, "separate_sequences", "full" if caps.full else "own_logits", len(seqs))
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
    seqs = [_as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    results = [_unscored(int(s.numel())) for s in seqs]
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


def _read_on_cache(
    model,
    cache: KVCache,
    last_token: torch.Tensor,
    conts: list[torch.Tensor],
    counts: list[int],
    batch_size: int,
    device,
) -> list[TokenLogprobs]:
    """Each continuation c fed as [last prefix token] + c on top of ``cache`` (equal lengths batched on a
    repeated cache), scored on its last k tokens, then the cache cropped back to the prefix."""
    held = cache.length
    out: list[TokenLogprobs | None] = [None] * len(conts)
    longest = held + 1 + max(int(c.numel()) for c in conts)
    step = _fitting_cache_batch(model, longest, batch_size)
    for group in _equal_length_batches([int(c.numel()) for c in conts], lambda n: step):
        inp = torch.stack([torch.cat([last_token, conts[i]]) for i in group]).to(device)
        keep = max(counts[i] for i in group) + 1
        cache.expand(len(group))
        logits = cache.feed(inp, keep)
        # input column j predicts c[j]: c's last k tokens come from the k columns before the last
        for r, i in enumerate(group):
            k = counts[i]
            lp, hit = logprob_and_greedy(logits[r, keep - 1 - k : keep - 1], conts[i][-k:])
            out[i] = TokenLogprobs(lp.numpy(), hit.numpy())
        del logits
        cache.crop(held)
        cache.keep_first_row(len(group))
    return _all_scored(out)


def _fill_cache(cache: KVCache, ids_dev: torch.Tensor, stop: int, strategy: str, chunk_size: int) -> None:
    """Feed ids_dev[:, cache.length : stop] into the cache: in one forward (``full``) or in chunks."""
    step = max(stop - cache.length, 1) if strategy == "full" else chunk_size
    for a in range(cache.length, stop, step):
        cache.feed(ids_dev[:, a : min(a + step, stop)], 1)


@torch.no_grad()
def score_continuations(
    model,
    prefix_ids: Sequence[int] | np.ndarray | torch.Tensor,
    continuations: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    long_pass: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every continuation, each read after the same prefix.

    For continuation c and its scored token c[i] (i >= len(c) - n_scored): log p(c[i] | prefix + c[:i]) in
    float32, and whether c[i] is the argmax. Returns one TokenLogprobs per continuation, of length n_scored,
    index j holding continuation token len(c) - n_scored + j. ``n_scored`` (int or one per continuation)
    defaults to the whole continuation.

    Where a KV cache is exact (``support.py``), prefix[:-1] is computed ONCE into a cache (one forward, or chunks)
    and every continuation is fed as [prefix[-1]] + c on top of it, ``batch_size`` equal-length ones at a time,
    the cache cropped back before the next. Elsewhere every prefix + c is one forward of its own.
    """
    model = causal_lm(model)
    prefix = _as_ids(prefix_ids)
    conts = [_as_ids(c) for c in continuations]
    if chunk_size < 1 or batch_size < 1:
        raise ValueError(f"chunk_size and batch_size must be >= 1, got {chunk_size}, {batch_size}")
    if prefix.numel() < 1:
        raise ScoringError("score_continuations needs a prefix of at least one token")
    counts = _scored_counts(conts, [int(c.numel()) for c in conts] if n_scored is None else n_scored, 0)
    if not conts:
        return []
    return _score_rung(model, prefix, conts, counts, chunk_size, long_pass, batch_size, None)


def _score_rung(
    model, prefix: torch.Tensor, conts, counts, chunk_size, long_pass, batch_size, cache: KVCache | None
) -> list[TokenLogprobs]:
    """One prefix's continuations: on a cache of prefix[:-1] (given, or built here) where a KV cache is exact,
    else each prefix + c in a forward of its own."""
    check_model(model, long_pass)
    caps = capabilities(model)
    held = int(prefix.numel()) - 1
    longest = held + 1 + max(int(c.numel()) for c in conts)
    if caps.support.kv_cache_exact and held > 0:
        strategy = "chunked" if not caps.full else choose_long_pass(model, long_pass, longest, 1, chunk_size, True)
        device = input_device(model)
        if cache is None:
            cache = KVCache(model)
            _fill_cache(cache, prefix[:held].to(device)[None], held, strategy, chunk_size)
            _count(model, "long", strategy)
        out = _read_on_cache(model, cache, prefix[-1:], conts, counts, batch_size, device)
        _count(model, "continuations", "shared_kv_cache", len(conts))
        return out
    if long_pass == "chunked" and not caps.support.kv_cache_exact:
        raise ScoringError(_chunked_refusal(model, caps))
    out = score_sequence_ends(model, [torch.cat([prefix, c]) for c in conts], counts, batch_size=batch_size)
    _count(model, "continuations", "one_forward_each", len(conts))
    return out


@torch.no_grad()
def score_prefix_ladder(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    rungs: Sequence[tuple[int, Iterable[Sequence[int] | np.ndarray | torch.Tensor]]],
    n_scored: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    long_pass: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[list[TokenLogprobs]]:
    """``score_continuations(model, ids[:P], continuations)`` for every rung (P, continuations).

    ``rungs`` lists (prefix length P, continuations) with strictly increasing P in [1, len(ids)]. Returns, per
    rung, one TokenLogprobs per continuation (its last ``n_scored`` tokens; default: the whole continuation),
    exactly as ``score_continuations`` defines them.

    Where a KV cache is exact, ids is computed ONCE: with ``full``, ids[:P_max - 1] in one forward and the rungs
    read from the longest down, the cache cropped to each rung's P - 1; with ``chunked``, the cache grows in
    chunks from one rung's prefix to the next. Each rung's continuations go ``batch_size`` at a time on a
    repeated cache. Elsewhere every ids[:P] + c is one forward of its own, a rung's cells batched.
    """
    model = causal_lm(model)
    seq = _as_ids(ids)
    if chunk_size < 1 or batch_size < 1:
        raise ValueError(f"chunk_size and batch_size must be >= 1, got {chunk_size}, {batch_size}")
    plan = []
    last = 0
    for p, conts in rungs:
        p = int(p)
        if not last < p <= int(seq.numel()):
            raise ScoringError(
                f"ladder prefix lengths must increase strictly within 1..{int(seq.numel())}; got {p} after {last}"
            )
        cs = [_as_ids(c) for c in conts]
        counts = _scored_counts(cs, [int(c.numel()) for c in cs] if n_scored is None else n_scored, 0)
        plan.append((p, cs, counts))
        last = p
    if not plan:
        return []
    check_model(model, long_pass)
    caps = capabilities(model)
    if not caps.support.kv_cache_exact:
        return [
            _score_rung(model, seq[:p], cs, counts, chunk_size, long_pass, batch_size, None) if cs else []
            for p, cs, counts in plan
        ]

    device = input_device(model)
    p_max = plan[-1][0]
    longest = p_max + max((int(c.numel()) for _, cs, _ in plan for c in cs), default=0)
    strategy = "chunked" if not caps.full else choose_long_pass(model, long_pass, longest, 1, chunk_size, True)
    seq_dev = seq.to(device)[None]
    cache = KVCache(model)
    out: list = [None] * len(plan)
    # full: the whole prefix in one forward, then the rungs from the longest down (a cache only shrinks);
    # chunked: the cache grows rung by rung
    order = range(len(plan) - 1, -1, -1) if strategy == "full" else range(len(plan))
    if strategy == "full":
        _fill_cache(cache, seq_dev, p_max - 1, "full", chunk_size)
    for r in order:
        p, cs, counts = plan[r]
        if p - 1 > cache.length:
            _fill_cache(cache, seq_dev, p - 1, strategy, chunk_size)
        else:
            cache.crop(p - 1)
        if not cs:
            out[r] = []
        elif p == 1:
            out[r] = _score_rung(model, seq[:1], cs, counts, chunk_size, long_pass, batch_size, None)
        else:
            out[r] = _read_on_cache(model, cache, seq[p - 1 : p], cs, counts, batch_size, device)
            _count(model, "continuations", "shared_kv_cache", len(cs))
    _count(model, "long", strategy)
    return out


# ------------------------------------------------------------------ out of memory: fewer sequences per forward


def with_batch_backoff(score, batch_size: int, what: str):
    """``score(batch_size)``, halving the batch on CUDA out-of-memory until it fits (or fails at 1).

    No collective calls: under data parallelism each rank backs off on its own."""
    while True:
        oom = False
        try:
            return score(batch_size)
        except torch.cuda.OutOfMemoryError:
            if batch_size == 1:
                raise
            oom = True
        if oom:  # outside the except block, so the failed forward's tensors are freed first
            batch_size //= 2
            torch.cuda.empty_cache()
            log.warning("out of memory in %s; retrying with %d per forward", what, batch_size)


def in_batches_with_backoff(items: list, batch_size: int, score_batch, what: str) -> list:
    """``score_batch(items[a : a + b])`` over consecutive batches, concatenated; on CUDA out-of-memory the batch is
    halved and the rest continues at the smaller size. Out of memory at one item is raised."""
    out, a = [], 0
    bs = max(1, int(batch_size))
    while a < len(items):
        part = items[a : a + bs]
        done = with_batch_backoff(lambda b: (b, score_batch(part[:b])), bs, what)
        bs = done[0]
        out.extend(done[1])
        a += bs
    return out
