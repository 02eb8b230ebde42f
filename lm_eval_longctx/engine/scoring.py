"""The engine's public entry points, one import for the layers above: pure torch + transformers, no lm-eval.

Given a causal LM and a token sequence ``ids`` of length ``n``, the engine returns, for every target position ``t``
in ``1..n-1`` (array index ``t - 1``):

* ``logprob``: log p(ids[t] | context) in float32, and
* ``greedy``: whether ids[t] is the argmax of the next-token distribution (teacher forced),

under two kinds of context:

* the *long* context ids[:t] (``score_long``, ``score_long_batch``);
* the *truncated* contexts of the LongPPL reference (``score_truncated``): windows ids[s : s + K + d'] for
  s in range(0, n - K, d), d' = min(d, n - s - K), scoring the positions t in [s + K, s + K + d').

and, for continuations read after a shared prefix, ``score_continuations`` and ``score_prefix_ladder``. Every number
equals what one plain forward of the sequence gives (float32 tolerance), on every model family; no [sequence x
vocabulary] logits tensor is ever built. Where the code lives:

* ``token_scores.py``: what the passes return (``TokenLogprobs``, ``SequenceScores``);
* ``plans.py``: how a pass runs (``FullPlan``, ``ChunkedPlan``, ``OwnLogitsPlan``), chosen by memory and retried
  under the next plan after an out-of-memory error; ``memory.py`` and ``attention.py`` count what a plan needs;
* ``passes.py``: the passes, each calling its plan; ``generation.py``: greedy generation;
* ``forward.py``: one forward run and read exactly; ``support.py``: which families a KV cache is exact for;
* ``recording.py``: what a model was scored with, for the results.
"""

from __future__ import annotations

from .forward import NonFiniteLogitsError, ScoringError, causal_lm, input_device
from .memory import LOGPROB_BLOCK_BYTES
from .passes import (
    DEFAULT_BATCH_SIZE,
    Window,
    check_token_ids,
    score_continuations,
    score_long,
    score_long_batch,
    score_prefix_ladder,
    score_sequence_ends,
    score_truncated,
    truncated_windows,
)
from .plans import (
    DEFAULT_CHUNK_SIZE,
    LONG_PASS_CHOICES,
    OutOfMemoryScoringError,
    check_strategy,
    choose,
    long_pass_plans,
)
from .recording import ScoringRecord, recording
from .support import learned_position_table
from .token_scores import SequenceScores, TokenLogprobs

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "LONG_PASS_CHOICES",
    "LOGPROB_BLOCK_BYTES",
    "NonFiniteLogitsError",
    "OutOfMemoryScoringError",
    "ScoringError",
    "ScoringRecord",
    "SequenceScores",
    "TokenLogprobs",
    "Window",
    "check_model",
    "check_token_ids",
    "choose_long_pass",
    "input_device",
    "learned_position_table",
    "recording",
    "score_continuations",
    "score_long",
    "score_long_batch",
    "score_prefix_ladder",
    "score_sequence_ends",
    "score_truncated",
    "shares_prefix_cache",
    "truncated_windows",
]


def shares_prefix_cache(model) -> bool:
    """Whether continuations of one prefix are read on the prefix's one KV cache (exact for the model), or each is
    a whole sequence of its own (what a pass costs depends on it)."""
    from .forward import capabilities

    return bool(capabilities(causal_lm(model)).support.kv_cache_exact)


def check_model(model, long_pass: str = "auto") -> None:
    """Refuse, before any work, a model the engine cannot score exactly under ``long_pass``: called once where a
    model enters (the harness, when requests are served), so the error comes before any sequence is scored."""
    check_strategy(causal_lm(model), long_pass)


def choose_long_pass(
    model, long_pass: str, n_tokens: int, batch: int = 1, chunk_size: int = DEFAULT_CHUNK_SIZE, keep_cache: bool = False
) -> str:
    """The strategy (``full`` or ``chunked``) of the plan a long pass over ``batch`` sequences of ``n_tokens`` would
    run (``plans.choose``): refuses, before any work, what no plan can run."""
    model = causal_lm(model)
    return choose(long_pass_plans(model, n_tokens, batch, long_pass, chunk_size, keep_cache), long_pass).strategy
