"""Dual-context scoring engine: pure torch + transformers, no lm-eval import.

Given a causal LM and a token sequence ``ids`` of length ``n``, the engine returns, for every
target position ``t`` in ``1..n-1`` (array index ``t - 1``):

* ``logprob``: log p(ids[t] | context) in float32, and
* ``greedy``: whether ids[t] is the argmax of the next-token distribution (teacher forced),

under two kinds of context:

* the *long* context ids[:t] (``score_long``): the prefix is fed in KV-cache chunks of
  ``chunk_size`` tokens, and only one chunk's logits exist at a time, so no [n, vocab] tensor is
  ever built;
* the *truncated* contexts of the LongPPL reference (``score_truncated``): windows
  ids[s : s + K + d'] for s in range(0, n - K, d), d' = min(d, n - s - K), scoring the positions
  t in [s + K, s + K + d'). Several windows go through one forward, and only the logits of the
  scored positions are computed.

Arrays cover all ``n - 1`` targets; positions a pass does not score hold NaN (logprob) and
False (greedy).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

DEFAULT_CHUNK_SIZE = 1024
# Logits are turned into float32 log-probs a block of rows at a time, the block about this many
# bytes: the float32 copy stays small whatever the vocabulary, and (measured on CPU) blocks under
# glibc's mmap threshold are reused instead of page-faulted in afresh, which made 256-row blocks
# of a 128k vocabulary slower than one full log_softmax.
LOGPROB_BLOCK_BYTES = 16 * 2**20
# On a GPU the cost of a block is its kernel launches, not page faults (measured on an H100: 16 MiB
# blocks of a 128k vocabulary made the engine's log-probs 6x slower than one full log_softmax for a
# small model), so blocks there are larger.
LOGPROB_BLOCK_BYTES_ACCELERATOR = 256 * 2**20


class ScoringError(ValueError):
    """A sequence or model the engine cannot score exactly."""


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
        state = {"token_ids": self.token_ids, "offsets": self.offsets,
                 "long_logprob": self.long.logprob, "long_greedy": self.long.greedy}
        if self.short is not None:
            state.update(short_logprob=self.short.logprob, short_greedy=self.short.greedy)
        return state

    @classmethod
    def from_state(cls, state: dict) -> "SequenceScores":
        short = None
        if "short_logprob" in state:
            short = TokenLogprobs(np.asarray(state["short_logprob"]), np.asarray(state["short_greedy"]))
        return cls(np.asarray(state["token_ids"]), None if state["offsets"] is None else np.asarray(state["offsets"]),
                   TokenLogprobs(np.asarray(state["long_logprob"]), np.asarray(state["long_greedy"])), short)

    def __repr__(self) -> str:  # compact: this is what --log_samples writes
        def mean_nll(x):
            v = x.logprob[~np.isnan(x.logprob)]
            return f"{-v.mean():.4f}" if v.size else "nan"

        short = f", short_nll={mean_nll(self.short)}" if self.short is not None else ""
        return f"SequenceScores(n={len(self.token_ids)}, long_nll={mean_nll(self.long)}{short})"


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


def _hook_execution_device(module) -> torch.device | None:
    """The device accelerate runs ``module`` on, when a dispatch hook says so (None otherwise)."""
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):  # SequentialHook or one hook
        device = getattr(h, "execution_device", None)
        if device is not None:
            return torch.device(device)
    return None


def _module_device(module) -> torch.device | None:
    """Where ``module`` computes: its dispatch hook's execution device, else its first real tensor's device.

    Offloaded weights sit on the "meta" device between forwards, so a parameter's device alone
    would send the inputs nowhere."""
    device = _hook_execution_device(module)
    if device is not None:
        return device
    for t in list(module.parameters(recurse=True)) + list(module.buffers(recurse=True)):
        if t.device.type != "meta":
            return t.device
    return None


def _io_same_device(model) -> bool:
    hook = getattr(model, "_hf_hook", None)
    return any(getattr(h, "io_same_device", False) for h in getattr(hook, "hooks", None) or [hook])


def input_device(model) -> torch.device:
    """The device the engine puts token ids and masks on for ``model``.

    * A plain model (one device): its input embedding's device.
    * A model dispatched by accelerate (transformers' ``device_map``, lm-eval's ``parallelize=True``):
      the top-level hook moves every input to the model's main device itself and sends every output
      back to the device the inputs came on. The ids go on the device of the output head, so the
      logits stay where the head computed them: only the (small) integer ids cross devices, never a
      chunk's [rows, vocab] logits.
    """
    if getattr(model, "_hf_hook", None) is not None and _io_same_device(model):
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        device = (_module_device(head) if head is not None else None) or _hook_execution_device(model)
        if device is not None:
            return device
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    device = _module_device(embeddings) if embeddings is not None else None
    if device is None:
        device = _module_device(model)
    if device is None:
        raise ScoringError(f"cannot tell which device {type(model).__name__} runs on (every weight is on 'meta' "
                           "and no accelerate hook names an execution device)")
    return device


def _supports_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _forward_logits(model, input_ids, keep: int, **kwargs):
    """Forward and return (logits of the last ``keep`` positions, outputs)."""
    if _supports_logits_to_keep(model):
        out = model(input_ids=input_ids, logits_to_keep=keep, **kwargs)
        logits = out.logits
        if logits.shape[1] != keep:  # a model that accepts the argument but ignores it
            logits = logits[:, -keep:]
    else:
        out = model(input_ids=input_ids, **kwargs)
        logits = out.logits[:, -keep:]
    return logits, out


def _logprob_and_greedy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax(logits)[targets] in float32 and argmax == target, one block of rows at a time.

    logits: [m, vocab] (any float dtype); targets: [m]. Returns float32 [m] and bool [m] on CPU.
    """
    lps, hits = [], []
    block_bytes = LOGPROB_BLOCK_BYTES if logits.device.type == "cpu" else LOGPROB_BLOCK_BYTES_ACCELERATOR
    rows = max(1, block_bytes // (4 * logits.shape[-1]))
    targets = targets.to(logits.device)  # the logits stay where the head made them; the targets go there
    for a in range(0, logits.shape[0], rows):
        block = logits[a : a + rows].float()
        tgt = targets[a : a + rows]
        # one max gives both the argmax and the shift of a numerically stable log-sum-exp
        top, argmax = block.max(dim=-1)
        lse = top + (block - top[:, None]).exp_().sum(dim=-1).log()
        lps.append(block.gather(1, tgt[:, None]).squeeze(1) - lse)
        hits.append(argmax == tgt)
        del block
    if not lps:
        return torch.empty(0), torch.empty(0, dtype=torch.bool)
    # one copy to the host per call (not per block: each copy waits for the device)
    return torch.cat(lps).cpu(), torch.cat(hits).cpu()


def score_long(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    score_from: int = 1,
) -> TokenLogprobs:
    """Log-probs and greedy hits of ids[t] given all of ids[:t], for t >= score_from.

    The sequence is fed in chunks of ``chunk_size`` tokens with a KV cache; positions before
    ``score_from`` only fill the cache (their logits are not computed where the model supports
    ``logits_to_keep``). A batch of one of ``score_long_batch``.
    """
    return score_long_batch(model, [ids], chunk_size=chunk_size, score_from=score_from)[0]


@torch.no_grad()
def score_truncated(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    trunc_len: int,
    stride: int,
    batch_size: int = 8,
    pad_token_id: int = 0,
) -> list[TokenLogprobs]:
    """Scores of every sequence under the reference truncated windows (K = trunc_len, d = stride).

    Each window ids[s : s + K + d'] is a sequence of its own whose last d' tokens are scored, so the
    windows of all sequences go through ``score_sequence_ends``: ``batch_size`` per forward, longest
    first, right-padded, logits only for the scored columns (every window has exactly K context
    tokens before its first scored position, so those columns line up across a batch).
    """
    seqs = [_as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    results = []
    jobs = []  # (sequence index, window)
    for i, s in enumerate(seqs):
        n = int(s.numel())
        results.append(
            TokenLogprobs(np.full(max(n - 1, 0), np.nan, dtype=np.float32), np.zeros(max(n - 1, 0), dtype=bool))
        )
        jobs.extend((i, w) for w in truncated_windows(n, trunc_len, stride))
    if not jobs:
        return results
    scored = score_sequence_ends(model, [seqs[i][w.start : w.stop] for i, w in jobs],
                                 [w.stop - w.score_from for _, w in jobs], batch_size=batch_size,
                                 pad_token_id=pad_token_id)
    for (i, w), window in zip(jobs, scored):
        # target t lives at array index t - 1
        results[i].logprob[w.score_from - 1 : w.stop - 1] = window.logprob
        results[i].greedy[w.score_from - 1 : w.stop - 1] = window.greedy
    return results


# ------------------------------------------------------------------ continuations of a shared prefix


def _scored_counts(sequences: list[torch.Tensor], n_scored, min_context: int) -> list[int]:
    """Per-sequence number of scored (last) tokens; each needs ``min_context`` tokens before it."""
    counts = [int(n_scored)] * len(sequences) if isinstance(n_scored, (int, np.integer)) else [int(k) for k in n_scored]
    if len(counts) != len(sequences):
        raise ValueError(f"{len(counts)} scored-token counts for {len(sequences)} sequences")
    for s, k in zip(sequences, counts):
        if not 1 <= k <= int(s.numel()) - min_context:
            raise ScoringError(f"cannot score the last {k} tokens of a {int(s.numel())}-token sequence "
                               f"(at least {min_context} token(s) of context must precede them)")
    return counts


def _extend_cache(model, ids_dev: torch.Tensor, start: int, stop: int, chunk_size: int, past):
    """Feed ``ids_dev[:, start:stop]`` into the KV cache ``past``, ``chunk_size`` tokens per forward (only the
    last column's logits are computed); returns the cache. A model without a cache cannot share a prefix."""
    for a in range(start, stop, chunk_size):
        b = min(a + chunk_size, stop)
        logits, out = _forward_logits(model, ids_dev[:, a:b], 1, use_cache=True, past_key_values=past)
        if getattr(out, "past_key_values", None) is None:
            raise ScoringError(f"{type(model).__name__} returned no KV cache, so a prefix cannot be shared")
        past = out.past_key_values
        del logits, out
    return past


@torch.no_grad()
def score_continuations(
    model,
    prefix_ids: Sequence[int] | np.ndarray | torch.Tensor,
    continuations: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every continuation, each read after the same prefix,
    with the prefix computed ONCE.

    For continuation c and its scored token c[i] (i >= len(c) - n_scored): log p(c[i] | prefix + c[:i])
    in float32, and whether c[i] is the argmax. Returns one TokenLogprobs per continuation, of length
    n_scored, index j holding continuation token len(c) - n_scored + j. ``n_scored`` (int or one per
    continuation) defaults to the whole continuation.

    How: prefix[:-1] is fed into a KV cache in chunks of ``chunk_size`` tokens (logits of one position
    per chunk only: the prefix itself is not scored). Each continuation is then fed as
    [prefix[-1]] + c on top of that cache, and the cache is cropped back to len(prefix) - 1 tokens
    before the next one. Holding back the last prefix token makes c[0] scorable from the
    continuation's own forward; cropping makes every continuation see exactly the prefix, never an
    earlier continuation. Continuations run one at a time: memory is one copy of the prefix's KV
    cache plus one continuation's logits.
    """
    prefix = _as_ids(prefix_ids)
    conts = [_as_ids(c) for c in continuations]
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if prefix.numel() < 1:
        raise ScoringError("score_continuations needs a prefix of at least one token")
    counts = _scored_counts(conts, [int(c.numel()) for c in conts] if n_scored is None else n_scored, 0)
    if not conts:
        return []

    device = input_device(model)
    held = int(prefix.numel()) - 1  # tokens kept in the cache between continuations
    past = None
    if held > 0:
        from transformers import DynamicCache

        past = _extend_cache(model, prefix.to(device)[None], 0, held, chunk_size, DynamicCache())

    results = []
    for c, k in zip(conts, counts):
        inp = torch.cat([prefix[-1:], c]).to(device)[None]
        # input column j predicts inp[j + 1] = c[j]: the scored c[len(c) - k:] come from the k columns
        # before the last, so the last k + 1 columns are kept and the final one dropped
        kwargs = {"use_cache": past is not None}
        if past is not None:
            kwargs["past_key_values"] = past
        logits, out = _forward_logits(model, inp, k + 1, **kwargs)
        lp, hit = _logprob_and_greedy(logits[0, :k], c[-k:])
        results.append(TokenLogprobs(lp.numpy(), hit.numpy()))
        del logits, out
        if past is not None:
            # a negative count removes that many positions (transformers 4.x and 5.x alike)
            past.crop(-int(inp.shape[1]))
            if past.get_seq_length() != held:
                raise ScoringError(f"the KV cache of {type(model).__name__} could not be cropped back to the "
                                   f"prefix ({past.get_seq_length()} positions instead of {held})")
    return results


@torch.no_grad()
def score_sequence_ends(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    n_scored: int | Sequence[int],
    batch_size: int = 8,
    pad_token_id: int = 0,
) -> list[TokenLogprobs]:
    """Scores of the last ``n_scored`` tokens of every sequence, each sequence on its own (no shared
    context): token s[i] (i >= len(s) - n_scored) gets log p(s[i] | s[:i]) in float32 and a greedy hit.

    Returns one TokenLogprobs per sequence, of length n_scored, in the order given. Sequences go
    ``batch_size`` per forward, longest first, right-padded (padding follows the real tokens, so
    causal attention never lets it reach a scored position; the attention mask excludes it too), and
    ``logits_to_keep`` limits the logits to the columns that hold scored positions.
    """
    seqs = [_as_ids(s) for s in sequences]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts = _scored_counts(seqs, n_scored, 1)
    results: list[TokenLogprobs | None] = [None] * len(seqs)
    device = input_device(model)
    order = sorted(range(len(seqs)), key=lambda i: -int(seqs[i].numel()))
    for a in range(0, len(order), batch_size):
        batch = order[a : a + batch_size]
        width = int(seqs[batch[0]].numel())
        input_ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            input_ids[r, : seqs[i].numel()] = seqs[i]
            attention_mask[r, : seqs[i].numel()] = 1
        # row i scores columns [len_i - k_i - 1, len_i - 1); keep from the earliest of them on
        first = min(int(seqs[i].numel()) - counts[i] - 1 for i in batch)
        logits, _ = _forward_logits(model, input_ids.to(device), width - first,
                                    attention_mask=attention_mask.to(device), use_cache=False)
        for r, i in enumerate(batch):
            n, k = int(seqs[i].numel()), counts[i]
            lp, hit = _logprob_and_greedy(logits[r, n - k - 1 - first : n - 1 - first], seqs[i][n - k :])
            results[i] = TokenLogprobs(lp.numpy(), hit.numpy())
        del logits
    return results


# ------------------------------------------------------------------ long pass, batched (equal lengths)


@torch.no_grad()
def score_long_batch(
    model,
    sequences: Iterable[Sequence[int] | np.ndarray | torch.Tensor],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    score_from: int = 1,
) -> list[TokenLogprobs]:
    """``score_long`` for several sequences of ONE length in one batched pass.

    Equal lengths need no padding and no attention mask: row r of every forward is exactly what
    ``score_long(model, sequences[r], chunk_size, score_from)`` feeds. The prefix goes in KV-cache
    chunks of ``chunk_size`` tokens; logits exist for the positions that predict targets
    t >= score_from only, one chunk at a time ([batch, chunk, vocab] at most).
    """
    seqs = [_as_ids(s) for s in sequences]
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not seqs:
        return []
    n = int(seqs[0].numel())
    if any(int(s.numel()) != n for s in seqs):
        raise ScoringError(f"score_long_batch needs sequences of one length, got {sorted({int(s.numel()) for s in seqs})}")
    score_from = max(1, int(score_from))
    results = [TokenLogprobs(np.full(max(n - 1, 0), np.nan, dtype=np.float32), np.zeros(max(n - 1, 0), dtype=bool))
               for _ in seqs]
    if n < 2 or score_from >= n:
        return results

    device = input_device(model)
    ids = torch.stack(seqs)
    ids_dev = ids.to(device)
    past = None
    if n > chunk_size:
        from transformers import DynamicCache

        past = DynamicCache()
    for a in range(0, n, chunk_size):
        b = min(a + chunk_size, n)
        first = max(a, score_from - 1)  # as in score_long: positions before score_from - 1 fill the cache only
        keep = max(b - first, 1)
        kwargs = {"use_cache": past is not None}
        if past is not None:
            kwargs["past_key_values"] = past
        logits, out = _forward_logits(model, ids_dev[:, a:b], keep, **kwargs)
        if past is not None:
            if getattr(out, "past_key_values", None) is None:
                raise ScoringError(
                    f"{type(model).__name__} returned no KV cache, so {n}-token sequences cannot be "
                    f"scored in chunks of {chunk_size}; pass chunk_size >= {n} (one full forward)."
                )
            past = out.past_key_values
        stop = min(b, n - 1)
        if stop > first:
            for r in range(len(seqs)):  # row by row: no [batch, chunk, vocab] float32 copy
                lp, hit = _logprob_and_greedy(logits[r, : stop - first], ids[r, first + 1 : stop + 1])
                results[r].logprob[first:stop] = lp.numpy()
                results[r].greedy[first:stop] = hit.numpy()
        del logits, out
    return results


# ------------------------------------------------------------------ a ladder of prefix lengths, one pass


@torch.no_grad()
def score_prefix_ladder(
    model,
    ids: Sequence[int] | np.ndarray | torch.Tensor,
    rungs: Sequence[tuple[int, Iterable[Sequence[int] | np.ndarray | torch.Tensor]]],
    n_scored: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[list[TokenLogprobs]]:
    """``score_continuations(model, ids[:P], continuations)`` for every rung (P, continuations), with
    ids fed ONCE: the KV cache only ever grows along ids, from one rung's prefix to the next.

    ``rungs`` lists (prefix length P, continuations) with strictly increasing P in [1, len(ids)].
    Returns, per rung, one TokenLogprobs per continuation (its last ``n_scored`` tokens; default:
    the whole continuation), exactly as ``score_continuations`` defines them.

    How: at a rung of prefix length P the cache holds ids[:P - 1], filled from the previous rung's
    length in chunks of at most ``chunk_size`` tokens (logits of one position per chunk only). Each
    continuation c is fed as [ids[P - 1]] + c on top of it and the cache is cropped back to P - 1
    before the next one, so every continuation sees exactly ids[:P]. Cost: one chunked pass over
    ids[:P_max - 1] plus the continuations' own tokens; memory: one KV cache of the longest prefix
    plus one continuation's logits.
    """
    seq = _as_ids(ids)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    plan = []
    last = 0
    for p, conts in rungs:
        p = int(p)
        if not last < p <= int(seq.numel()):
            raise ScoringError(f"ladder prefix lengths must increase strictly within 1..{int(seq.numel())}; "
                               f"got {p} after {last}")
        cs = [_as_ids(c) for c in conts]
        counts = _scored_counts(cs, [int(c.numel()) for c in cs] if n_scored is None else n_scored, 0)
        plan.append((p, cs, counts))
        last = p
    if not plan:
        return []

    from transformers import DynamicCache

    device = input_device(model)
    seq_dev = seq.to(device)[None]
    past = DynamicCache()
    filled = 0  # positions of ids in the cache
    out = []
    for p, conts, counts in plan:
        held = p - 1
        past = _extend_cache(model, seq_dev, filled, held, chunk_size, past)
        filled = max(filled, held)
        rung = []
        for c, k in zip(conts, counts):
            inp = torch.cat([seq[p - 1 : p], c]).to(device)[None]
            # as in score_continuations: the last k + 1 columns hold the k scored predictions
            kwargs = {"use_cache": True, "past_key_values": past} if held > 0 else {"use_cache": False}
            logits, res = _forward_logits(model, inp, k + 1, **kwargs)
            lp, hit = _logprob_and_greedy(logits[0, :k], c[-k:])
            rung.append(TokenLogprobs(lp.numpy(), hit.numpy()))
            del logits, res
            if held > 0:
                past.crop(-int(inp.shape[1]))
                if past.get_seq_length() != held:
                    raise ScoringError(f"the KV cache of {type(model).__name__} could not be cropped back to the "
                                       f"prefix ({past.get_seq_length()} positions instead of {held})")
        out.append(rung)
    return out
