"""Scoring one text: the one path every task, the key-token evaluator and the precompute script take.

A ``TextRequest`` (built once from a task's declared settings) says how: tokenize the text (with its special
tokens or not, with character offsets or not), check its length against the model's maximum, run the long pass
and, when asked, LongPPL's truncated windows, halving the windows per forward on out-of-memory. Requests travel through lm-eval as plain dicts (``to_spec`` /
``from_spec``), so its cache keys stay stable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from ..engine import scoring
from . import spans_to_tokens

# the command line's way to raise the model's maximum length (the harness names the Python API's instead when
# the model object was passed to simple_evaluate)
RAISE_MAX_LENGTH = "Raise --model_args max_length=N if the model supports it"
MODEL_WAYS_OUT = f"{RAISE_MAX_LENGTH}, or pass --metadata '{{\"allow_beyond_max_length\": true}}' to score it anyway."


@dataclass(frozen=True)
class TextRequest:
    """How one text is scored."""

    add_special_tokens: bool = False
    offsets: bool = False  # character offsets of every token (key tokens, exports)
    long_pass: str = "auto"
    chunk_size: int = scoring.DEFAULT_CHUNK_SIZE
    score_from: int = 1  # first target scored by the long pass (earlier ones only feed the context)
    trunc_len: int | None = None  # LongPPL's truncated windows: K ...
    stride: int | None = None  # ... and d (both, or neither)
    window_batch_size: int | None = None  # windows per forward (None: the caller's batch size)
    allow_beyond_max_length: bool = False

    def __post_init__(self):
        if (self.trunc_len is None) != (self.stride is None):
            raise ValueError("a text request's truncated windows need both trunc_len and stride")
        if self.long_pass not in scoring.LONG_PASS_CHOICES:
            raise ValueError(f"long_pass must be one of {scoring.LONG_PASS_CHOICES}, got {self.long_pass!r}")

    @property
    def truncated(self) -> bool:
        return self.trunc_len is not None

    def to_spec(self) -> dict:
        """A plain dict (what an lm-eval request carries and its cache key hashes)."""
        return {"kind": "sequence", **asdict(self)}

    @classmethod
    def from_spec(cls, spec: dict) -> TextRequest:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in spec.items() if k in names})


def check_length(
    n_tokens: int,
    max_length: int | None,
    allow_beyond: bool,
    evaluator: str | None = None,
    ways_out: str = MODEL_WAYS_OUT,
) -> None:
    """A sequence longer than the model's maximum is an error unless allowed: it would be scored beyond the
    positions the model was built for. ``evaluator`` names the key-token evaluator when it is the one judging."""
    if not max_length or n_tokens <= max_length or allow_beyond:
        return
    if evaluator is not None:
        raise scoring.ScoringError(
            f"the key-token evaluator {evaluator} would judge a {n_tokens}-token text, longer than its maximum length "
            f"{max_length}; its judgement beyond that is not what it was built for. Use an evaluator with a longer "
            "context, shorter documents (max_tokens), or pass --metadata '{\"allow_beyond_max_length\": true}'."
        )
    raise scoring.ScoringError(
        f"a {n_tokens}-token sequence is longer than the model's maximum length {max_length}; it would be scored "
        f"beyond the positions the model was built for. {ways_out}"
    )


def tokenize(tokenizer, text: str, request: TextRequest) -> tuple[list[int], np.ndarray | None]:
    """Token ids of ``text`` and, when the request asks, their [n, 2] character offsets."""
    if request.offsets:
        ids, offsets = spans_to_tokens.token_offsets(tokenizer, text, request.add_special_tokens)
        return list(ids), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    return list(tokenizer(text, add_special_tokens=request.add_special_tokens)["input_ids"]), None


def tokens_to_forward(tokenizer, text: str, request: TextRequest) -> int:
    """About the token positions scoring ``text`` runs through the model: its long pass, and its truncated windows
    (a progress bar's plan; the engine counts what ran)."""
    n = len(tokenizer(text, add_special_tokens=request.add_special_tokens, verbose=False)["input_ids"])
    if request.truncated:
        windows = scoring.truncated_windows(n, int(request.trunc_len or 0), int(request.stride or 0))
        n += sum(w.stop - w.start for w in windows)
    return n


def first_token_after(offsets: np.ndarray, char: int) -> int:
    """The first token (of width > 0) that ends after character ``char``: where a response starts."""
    inside = np.flatnonzero((offsets[:, 1] > char) & (offsets[:, 1] > offsets[:, 0]))
    if len(inside) == 0:
        raise scoring.ScoringError("no token of the tokenized text covers the scored part")
    return int(inside[0])


def score_tokens(
    model,
    ids: list[int],
    offsets: np.ndarray | None,
    request: TextRequest,
    batch_size: int = scoring.DEFAULT_BATCH_SIZE,
) -> scoring.SequenceScores:
    """The long pass and, when asked, the truncated windows over tokenized text (its length already checked)."""
    long = scoring.score_long(
        model, ids, chunk_size=request.chunk_size, score_from=request.score_from, long_pass=request.long_pass
    )
    short = None
    if request.truncated:
        windows = request.window_batch_size or batch_size
        assert request.trunc_len is not None and request.stride is not None  # both or neither (__post_init__)
        short = scoring.score_truncated(model, [ids], request.trunc_len, request.stride, batch_size=windows)[0]
    return scoring.SequenceScores(np.asarray(ids, dtype=np.int64), offsets if request.offsets else None, long, short)


def score_text(
    model,
    tokenizer,
    text: str,
    request: TextRequest,
    max_length: int | None,
    batch_size: int = scoring.DEFAULT_BATCH_SIZE,
    evaluator: str | None = None,
) -> scoring.SequenceScores:
    """Tokenize ``text``, check its length, score it as ``request`` says."""
    ids, offsets = tokenize(tokenizer, text, request)
    check_length(len(ids), max_length, request.allow_beyond_max_length, evaluator)
    return score_tokens(model, ids, offsets, request, batch_size)
