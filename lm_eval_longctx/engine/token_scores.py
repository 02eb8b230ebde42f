"""What the passes return: per-target log-probs and greedy hits of one sequence, and a text's scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import StateRecord


@dataclass
class TokenLogprobs(StateRecord):
    """Per-target scores of one sequence: index i is the prediction of token i + 1."""

    logprob: np.ndarray  # float32 [n - 1], NaN where not scored
    greedy: np.ndarray  # bool [n - 1]

    def __len__(self) -> int:
        return len(self.logprob)

    def summary(self) -> dict:
        """The targets scored, their NLL sum (float64) and greedy hits."""
        scored = ~np.isnan(self.logprob)
        return {
            "scored": int(scored.sum()),
            "nll_sum": float(-np.sum(self.logprob[scored].astype(np.float64))) + 0.0,  # + 0.0: no -0.0
            "greedy_hits": int(self.greedy[scored].sum()),
        }


@dataclass
class SequenceScores(StateRecord):
    """Everything scored for one text: its tokens, their character offsets, the long pass and the truncated one."""

    token_ids: np.ndarray  # int64 [n]
    offsets: np.ndarray | None  # int64 [n, 2] character spans, or None when not asked for
    long: TokenLogprobs
    short: TokenLogprobs | None = None

    def summary(self) -> dict:
        """Per-sequence numbers, no per-token array: the token count and, per pass, the targets it scored, their
        NLL sum and greedy hits."""
        out = {"n_tokens": int(len(self.token_ids))}
        for name, scores in (("long", self.long), ("short", self.short)):
            if scores is not None:
                out.update({f"{name}_{key}": value for key, value in scores.summary().items()})
        return out


def unscored(n: int) -> TokenLogprobs:
    """The scores of an n-token sequence before any pass: every target NaN and not a hit."""
    return TokenLogprobs(np.full(max(n - 1, 0), np.nan, dtype=np.float32), np.zeros(max(n - 1, 0), dtype=bool))
