"""How a pass runs, decided once per (model, sequence length, batch, dtype, device): a plan object.

* ``FullPlan``: one forward of ``batch`` sequences with no cache, the output head replayed on the decoder's rows in
  blocks (``forward.FullForward``); a prefix's KV cache is filled in one forward.
* ``ChunkedPlan``: the sequences fed through a KV cache ``chunk_size`` tokens at a time, each chunk's logits from
  the model itself; a prefix's cache is filled chunk by chunk. Only where a KV cache is exact (``support.py``).
* ``OwnLogitsPlan``: separate sequences whose scored rows come from the model's own logits (a model whose head
  replay is not exact but whose KV cache is).

Every plan counts its memory (``memory.py``, with the attention kernel the model runs: ``attention.py``), scores
rows, fills a prefix cache and reads continuations on it, and knows the plans to fall back to when a forward runs
out of memory anyway: fewer sequences per forward, then KV-cache chunks where exact, then smaller chunks.
``choose`` takes the first candidate whose count fits the free memory, else refuses before any work, naming what
is needed; ``run_with_fallback`` runs a pass and, on an out-of-memory error, frees what the failed forward held
and retries the rest under the next plan (both recorded, ``recording.py``).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from . import memory, recording
from .attention import AttentionKernel
from .forward import (
    KVCache,
    NonFiniteLogitsError,
    ScoringError,
    capabilities,
    full_scores,
    head_rows_per_block,
    input_device,
    logprob_and_greedy,
    non_finite_logits_error,
    own_logits,
)
from .support import attention_window
from .token_scores import TokenLogprobs

DEFAULT_CHUNK_SIZE = 1024
LONG_PASS_CHOICES = ("auto", "full", "chunked")
# chunks are halved down to this many tokens when a chunk does not fit
SMALLEST_CHUNK = 64

log = logging.getLogger("lm_eval_longctx")

WAYS_OUT_OF_MEMORY = (
    "Ways out: bfloat16 weights (--model_args dtype=bfloat16: on CUDA a float32 model with grouped-query attention "
    "runs the math attention kernel, whose scores grow with the square of the length), a smaller --batch_size, "
    "shorter sequences, several GPUs (--model_args parallelize=True), or a device with more memory"
)


class OutOfMemoryScoringError(ScoringError):
    """Out of memory in a pass even under its smallest plan."""


def model_type(model) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)


def is_out_of_memory(err: BaseException) -> bool:
    """A CUDA out-of-memory error, or the CPU allocator's."""
    cuda_oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    if isinstance(err, (cuda_oom, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ plans


@dataclass(frozen=True)
class Plan:
    """One way to run a pass: sequences per forward, chunk, the attention kernel and the memory it counts."""

    strategy: ClassVar[str] = ""
    # a prefix ladder fills its longest prefix in one go and crops it down rung by rung (else: grows it rung by rung)
    fills_longest_first: ClassVar[bool] = False
    model: object = field(repr=False, compare=False)
    n_tokens: int
    batch: int
    need_bytes: int
    kernel: AttentionKernel
    chunk_size: int | None = None
    # the plans tried, in order, when this one runs out of memory anyway
    fallbacks: tuple[Plan, ...] = field(default=(), repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return input_device(self.model)

    def key(self) -> dict:
        """What the results record of a plan (its memory count is per length, so it is left out)."""
        return {
            "strategy": self.strategy,
            "batch": self.batch,
            "chunk_size": self.chunk_size,
            "attention": self.kernel.summary(),
        }

    def describe(self) -> str:
        chunk = f", chunks of {self.chunk_size}" if self.chunk_size else ""
        return (
            f"{self.strategy} ({self.batch} x {self.n_tokens} tokens per forward{chunk}, {self.kernel.name} "
            f"attention, about {memory.gib(self.need_bytes)})"
        )

    def scores(self, ids_dev: torch.Tensor, ids: torch.Tensor, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """log p(ids[r, t + 1] | ids[r, :t + 1]) and greedy hits for t in [first, n - 1), every row r (at most
        ``batch``): float32 and bool [rows, n - 1 - first] on the CPU."""
        raise NotImplementedError

    def fill(self, cache: KVCache, ids_dev: torch.Tensor, stop: int) -> None:
        """Feed ids_dev[:, cache.length : stop] into the cache."""
        raise NotImplementedError

    def read_continuations(
        self, cache: KVCache, last_token: torch.Tensor, conts: list[torch.Tensor], counts: list[int], done: dict
    ) -> None:
        """Each continuation c not yet in ``done`` fed as [last prefix token] + c onto the cache, so every
        continuation attends to the one copy of the prefix; its last k tokens scored into ``done[i]``, then the
        cache cropped back to the prefix. Where the model allows (``packing_problem``), several continuations
        share a forward (``KVCache.feed_packed``): as many as fit ``chunk_size`` tokens and the free memory,
        halved on an out-of-memory error; elsewhere one continuation per forward."""
        held = cache.length
        todo = [i for i in range(len(conts)) if i not in done]
        segments = {i: torch.cat([last_token, conts[i]]) for i in todo}
        budget = self.packed_tokens(held, [int(segments[i].numel()) for i in todo])
        while todo and budget > 1:
            group = _packed_group(todo, segments, budget)
            if len(group) < 2:  # longer than a pack on its own
                self._read_alone(cache, segments[group[0]], conts[group[0]], counts[group[0]], done, group[0])
                todo = todo[1:]
                continue
            try:
                logits = cache.feed_packed([segments[i] for i in group])
            except Exception as err:  # noqa: BLE001  (only out-of-memory errors lead to smaller packs)
                if not is_out_of_memory(err):
                    raise
                failed = True
            else:
                failed = False
                at = 0
                for i in group:
                    m, k = int(segments[i].numel()), counts[i]
                    # input column j of a segment predicts c[j]: c's last k tokens come from columns m-1-k .. m-2
                    lp, hit = logprob_and_greedy(logits[at + m - 1 - k : at + m - 1], conts[i][-k:])
                    done[i] = TokenLogprobs(lp.numpy(), hit.numpy())
                    at += m
                del logits
                cache.crop(held)
                recording.count(self.model, "continuation_forwards", "packed")
                todo = [i for i in todo if i not in done]
            if failed:  # outside the except block, so the failed forward's tensors are freed first
                release_memory(self.device)
                cache.reset_to(held)
                log.warning("out of memory in packed continuations of %d tokens; %d next", budget, budget // 2)
                recording.note_retry(
                    self.model,
                    "packed continuations",
                    {"strategy": "packed", "tokens_per_forward": budget},
                    {"strategy": "packed", "tokens_per_forward": budget // 2},
                    "out of memory",
                )
                budget //= 2
        for i in todo:
            self._read_alone(cache, segments[i], conts[i], counts[i], done, i)

    def _read_alone(self, cache: KVCache, segment: torch.Tensor, cont: torch.Tensor, k: int, done: dict, i) -> None:
        held = cache.length
        logits = cache.feed(segment[None].to(self.device), k + 1)
        # input column j predicts c[j]: c's last k tokens come from the k columns before the last
        lp, hit = logprob_and_greedy(logits[0, :k], cont[-k:])
        del logits
        cache.crop(held)
        done[i] = TokenLogprobs(lp.numpy(), hit.numpy())
        recording.count(self.model, "continuation_forwards", "one_per_forward")

    def packed_tokens(self, held: int, lengths: list[int]) -> int:
        """Tokens of continuations fed onto a cache of ``held`` positions in one packed forward: 0 where the model
        does not allow packing, within a sliding window if the model has one, else up to ``chunk_size``
        (``DEFAULT_CHUNK_SIZE``) and the rows of one head block (``forward.head_rows_per_block``), halved until the
        forward's memory count fits the free memory."""
        if len(lengths) < 2 or capabilities(self.model).packing_problem is not None:
            return 0
        # no more logits kept than one block of the full pass's head replay: the map holds no more than a long pass
        rows = head_rows_per_block(1, memory.config_sizes(self.model)["vocab"], self.device)
        budget = min(int(self.chunk_size or DEFAULT_CHUNK_SIZE), rows, sum(lengths))
        window = attention_window(self.model)
        if window is not None:  # the whole pack within the window: no windowed layer drops or masks a position
            budget = min(budget, window - held)
        free = memory.free_bytes(self.device)
        kernel = capabilities(self.model).attention.with_cache
        while free is not None and budget > 1:
            need = memory.packed_read_bytes(self.model, held, budget, self.device.type, kernel, max(lengths))
            if need <= memory.FREE_MEMORY_SHARE * free:
                break
            budget //= 2
        return budget


def _packed_group(todo: list[int], segments: dict, budget: int) -> list[int]:
    """The next continuations, in order, whose segments fit ``budget`` tokens together (at least one)."""
    group: list[int] = []
    total = 0
    for i in todo:
        m = int(segments[i].numel())
        if group and total + m > budget:
            break
        group.append(i)
        total += m
    return group


@dataclass(frozen=True)
class FullPlan(Plan):
    strategy: ClassVar[str] = "full"
    fills_longest_first: ClassVar[bool] = True

    def scores(self, ids_dev, ids, first):
        return full_scores(self.model, ids_dev, first, ids.shape[1] - 1, capabilities(self.model).support)

    def fill(self, cache, ids_dev, stop):
        if stop > cache.length:
            cache.feed(ids_dev[:, cache.length : stop], 1)


@dataclass(frozen=True)
class ChunkedPlan(Plan):
    strategy: ClassVar[str] = "chunked"

    def scores(self, ids_dev, ids, first):
        rows, n = ids.shape
        chunk = int(self.chunk_size or DEFAULT_CHUNK_SIZE)
        lps = torch.full((rows, max(n - 1 - first, 0)), float("nan"), dtype=torch.float32)
        hits = torch.zeros((rows, max(n - 1 - first, 0)), dtype=torch.bool)
        cache = KVCache(self.model) if n > chunk else None
        for a in range(0, n, chunk):
            b = min(a + chunk, n)
            start = max(a, first)  # positions before first only fill the cache
            keep = max(b - start, 1)
            if cache is not None:
                logits = cache.feed(ids_dev[:, a:b], keep)
            else:
                logits, _ = own_logits(self.model, ids_dev[:, a:b], keep, use_cache=False)
            stop = min(b, n - 1)
            if stop > start:
                for r in range(rows):  # row by row: no [batch, chunk, vocab] float32 copy
                    lp, hit = logprob_and_greedy(logits[r, : stop - start], ids[r, start + 1 : stop + 1], start + 1)
                    lps[r, start - first : stop - first] = lp
                    hits[r, start - first : stop - first] = hit
            del logits
        return lps, hits

    def fill(self, cache, ids_dev, stop):
        chunk = int(self.chunk_size or DEFAULT_CHUNK_SIZE)
        for a in range(cache.length, stop, chunk):
            cache.feed(ids_dev[:, a : min(a + chunk, stop)], 1)


@dataclass(frozen=True)
class OwnLogitsPlan(Plan):
    """Separate sequences read from the model's own logits of their scored rows."""

    strategy: ClassVar[str] = "own_logits"

    def scores(self, ids_dev, ids, first):
        width = ids.shape[1]
        logits, _ = own_logits(self.model, ids_dev, width - first, use_cache=False)
        rows = [
            logprob_and_greedy(logits[r, : width - 1 - first], ids[r, first + 1 :], first + 1)
            for r in range(ids.shape[0])
        ]
        del logits
        return torch.stack([x[0] for x in rows]), torch.stack([x[1] for x in rows])


# ------------------------------------------------------------------ which plans a model allows


def chunked_refusal(model) -> str:
    caps = capabilities(model)
    return (
        f"long_pass chunked: {caps.support.no_cache_reason}, so KV-cache chunks would not give what one forward "
        'of the sequence gives. Way out: --metadata \'{"long_pass": "full"}\' (or auto)'
    )


def check_strategy(model, long_pass: str) -> None:
    """Refuse, before any work, a model the engine cannot score exactly under ``long_pass``."""
    if long_pass not in LONG_PASS_CHOICES:
        raise ValueError(f"long_pass must be one of {LONG_PASS_CHOICES}, got {long_pass!r}")
    caps = capabilities(model)
    if caps.support.refused:
        raise ScoringError(f"{caps.support.refused} (docs/support.md)")
    if long_pass == "full" and not caps.full:
        raise ScoringError(f"{caps.full_problem}. Way out: long_pass auto or chunked (docs/support.md)")
    if long_pass == "chunked" and not caps.support.kv_cache_exact:
        raise ScoringError(chunked_refusal(model))
    if not caps.full and not caps.support.kv_cache_exact:
        raise ScoringError(
            f"{caps.full_problem}; and a KV cache is not exact for it either "
            f"({caps.support.no_cache_reason}). The engine cannot score this model exactly (docs/support.md)"
        )


def _halvings(n: int, smallest: int = 1) -> list[int]:
    out, n = [], max(int(n), smallest)
    while True:
        out.append(n)
        if n <= smallest:
            return out
        n = max(n // 2, smallest)


def _linked(candidates: Sequence[Plan]) -> list[Plan]:
    """Each candidate with the ones after it as its fallbacks."""
    linked: list[Plan] = []
    for plan in reversed(candidates):
        linked.insert(0, _with_fallbacks(plan, tuple(linked)))
    return linked


def _with_fallbacks(plan: Plan, fallbacks: tuple[Plan, ...]) -> Plan:
    from dataclasses import replace

    return replace(plan, fallbacks=fallbacks)


def long_pass_plans(
    model, n_tokens: int, batch: int, long_pass: str, chunk_size: int, keep_cache: bool = False
) -> list[Plan]:
    """The plans a long pass over ``batch`` sequences of ``n_tokens`` may run, fastest first: one forward of fewer
    and fewer sequences, then chunks (where exact) of fewer sequences, then smaller chunks. ``keep_cache``: the pass
    fills a KV cache that outlives it (a shared prefix)."""
    check_strategy(model, long_pass)
    caps = capabilities(model)
    device_type = input_device(model).type
    kernels = caps.attention
    out: list[Plan] = []
    if caps.full and long_pass in ("auto", "full"):
        for b in _halvings(batch):
            if keep_cache:
                need = memory.fill_bytes(model, n_tokens, b, device_type, kernels.no_cache)
            else:
                need = memory.full_forward_bytes(model, n_tokens, b, device_type, kernels.no_cache)
            out.append(FullPlan(model, n_tokens, b, need, kernels.no_cache))
    if caps.support.kv_cache_exact and long_pass in ("auto", "chunked"):
        chunk = max(1, int(chunk_size))

        def chunked_need(b: int, c: int) -> int:
            c = min(c, n_tokens)
            # a fill keeps only its last row's logits; a scored pass keeps the chunk's
            kept = 1 if keep_cache else c
            return memory.cached_forward_bytes(model, n_tokens - c, c, b, kept, device_type, kernels.with_cache)

        for b in _halvings(batch):
            out.append(ChunkedPlan(model, n_tokens, b, chunked_need(b, chunk), kernels.with_cache, chunk))
        for c in _halvings(chunk, min(chunk, SMALLEST_CHUNK))[1:]:
            out.append(ChunkedPlan(model, n_tokens, 1, chunked_need(1, c), kernels.with_cache, c))
    return _linked(out)


def separate_plans(model, n_tokens: int, batch: int) -> list[Plan]:
    """The plans for sequences scored on their own (no shared context), ``batch`` of them per forward at most."""
    check_strategy(model, "auto")
    caps = capabilities(model)
    device_type = input_device(model).type
    out: list[Plan] = []
    for b in _halvings(batch):
        if caps.full:
            need = memory.full_forward_bytes(model, n_tokens, b, device_type, caps.attention.no_cache)
            out.append(FullPlan(model, n_tokens, b, need, caps.attention.no_cache))
        else:
            need = memory.cached_forward_bytes(model, 0, n_tokens, b, n_tokens, device_type, caps.attention.no_cache)
            out.append(OwnLogitsPlan(model, n_tokens, b, need, caps.attention.no_cache))
    return _linked(out)


def choose(plans: list[Plan], long_pass: str = "auto", free_bytes: int | None = -1) -> Plan:
    """The first plan whose memory count fits the device's free memory (``memory.FREE_MEMORY_SHARE`` of it).
    A strategy asked for by name is tried even when nothing fits (its smallest plan). Otherwise nothing fitting is
    an error before any work, naming the memory needed and free."""
    if not plans:
        raise ScoringError("no plan can score this pass")
    model = plans[0].model
    device = input_device(model)
    free = memory.free_bytes(device) if free_bytes == -1 else free_bytes
    for plan in plans:
        if free is None or plan.need_bytes <= memory.FREE_MEMORY_SHARE * free:
            return plan
    if long_pass != "auto":
        return plans[-1]
    assert free is not None
    first = plans[0]
    fulls = [p for p in plans if isinstance(p, FullPlan)]
    chunked = [p for p in plans if isinstance(p, ChunkedPlan)]
    head = fulls[0] if fulls else first
    message = (
        f"model type {model_type(model)!r}: one forward of {head.batch} x {head.n_tokens} tokens needs about "
        f"{memory.gib(head.need_bytes)} and {memory.gib(free)} is free on {device} ({head.kernel.name} attention)"
    )
    if chunked:
        message += (
            f"; KV-cache chunks of {chunked[-1].chunk_size} tokens still need {memory.gib(chunked[-1].need_bytes)}"
        )
    else:
        reason = capabilities(model).support.no_cache_reason
        message += f"; the model cannot be fed in KV-cache chunks exactly ({reason})"
    raise ScoringError(
        f'{message}. {WAYS_OUT_OF_MEMORY}; or --metadata \'{{"long_pass": "full"}}\' to try anyway'
        if fulls
        else f"{message}. {WAYS_OUT_OF_MEMORY}"
    )


def run_with_fallback(plan: Plan, attempt, what: str):
    """``attempt(plan)``; on an out-of-memory error, what the failed forward held is freed and ``attempt`` is called
    again with the next plan (it keeps its own progress, so only the rest is redone). Out of memory under the last
    plan is an error naming the pass and the ways out. No collective call: under data parallelism each rank falls
    back on its own."""
    while True:
        failure = ""
        try:
            return attempt(plan)
        except NonFiniteLogitsError as err:
            if err.names_model:
                raise
            raise non_finite_logits_error(plan.model, f"in {what} {err}") from None
        except Exception as err:  # noqa: BLE001  (only out-of-memory errors are retried; others re-raised)
            if not is_out_of_memory(err):
                raise
            failure = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        # outside the except block, so the failed forward's tensors are freed first
        release_memory(plan.device)
        if not plan.fallbacks:
            raise OutOfMemoryScoringError(
                f"model type {model_type(plan.model)!r}: out of memory in {what} even under the smallest plan, "
                f"{plan.describe()} ({failure}). {WAYS_OUT_OF_MEMORY}"
            )
        following = plan.fallbacks[0]
        log.warning(
            "out of memory in %s under %s; retrying the rest under %s", what, plan.describe(), following.describe()
        )
        recording.note_retry(plan.model, what, plan.key(), following.key(), failure)
        plan = following
