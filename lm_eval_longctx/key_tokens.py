"""Key tokens judged by an evaluator model, and their on-disk cache (no lm-eval import).

The evaluator scores the text (tokenized with its default special tokens, as the reference does)
under the long context and the reference truncated windows; key tokens become character spans
(``keyspans``). Spans are cached on disk keyed by everything they depend on, so evaluating a
second model reuses them and costs only that model's one long pass.

Cache entries are data: ``<key>.txt`` in the reference span format, and ``<key>.npz`` (plain
arrays, loaded with ``allow_pickle=False``) holding the evaluator's token offsets and
long-short differences, which LongPPL-soft needs.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import engine, keyspans, metrics

# Bump when the way spans are computed changes, so old cache entries are not reused.
SPAN_ALGORITHM_VERSION = 1


@dataclass
class EvaluatorJudgement:
    """What the evaluator says about one text."""

    spans: list[tuple[int, int]]
    offsets: np.ndarray | None = None  # evaluator token offsets [n, 2]
    lsd: np.ndarray | None = None  # long-short difference per target [n - 1], NaN before K
    # The evaluator's own per-target log-probs [n - 1] (long: LCL; short: NaN before K) and token ids [n],
    # kept for the per-token export; None for spans read from files or from older cache entries.
    long_logprob: np.ndarray | None = None
    short_logprob: np.ndarray | None = None
    token_ids: np.ndarray | None = None

    def soft_weights_for(self, eval_offsets: np.ndarray, gamma: float) -> np.ndarray:
        """LongPPL-soft weight of each evaluated-model target (token i -> index i - 1).

        An evaluated token takes the weight min(exp(LSD), gamma) of the evaluator token that holds
        its last character; tokens before the evaluator's first truncated window weigh 1.
        """
        if self.offsets is None or self.lsd is None:
            raise ValueError("LongPPL-soft needs the evaluator's per-token LSD; key spans read from "
                             "files do not carry it (use an evaluator model or 'self')")
        w_eval = np.where(np.isnan(self.lsd), 1.0, np.minimum(np.exp(np.nan_to_num(self.lsd, nan=0.0)), gamma))
        starts = self.offsets[:, 0]
        last_char = np.maximum(eval_offsets[1:, 1] - 1, eval_offsets[1:, 0])
        j = np.clip(np.searchsorted(starts, last_char, side="right") - 1, 0, len(starts) - 1)
        # target j - 1 is the prediction of evaluator token j; token 0 (BOS) has none
        return np.where(j >= 1, w_eval[np.clip(j - 1, 0, None)], 1.0)


def judge_from_scores(scores: engine.SequenceScores, alpha: float, beta: float) -> EvaluatorJudgement:
    """Key spans from an evaluator's long and truncated passes over one text."""
    if scores.short is None or scores.offsets is None:
        raise ValueError("the evaluator pass needs truncated scores and token offsets")
    mask = metrics.key_token_mask(scores.long.logprob, scores.short.logprob, alpha, beta)
    spans = keyspans.key_spans_from_tokens(mask, scores.offsets)
    lsd = metrics.long_short_difference(scores.long.logprob, scores.short.logprob).astype(np.float32)
    return EvaluatorJudgement(spans, np.asarray(scores.offsets), lsd, np.asarray(scores.long.logprob),
                              np.asarray(scores.short.logprob), np.asarray(scores.token_ids))


def score_text(model, tokenizer, text: str, trunc_len: int, stride: int, chunk_size: int = engine.DEFAULT_CHUNK_SIZE,
               batch_size: int = 4, add_special_tokens: bool = True) -> engine.SequenceScores:
    """Long and truncated passes over ``text`` as the evaluator tokenizes it."""
    ids, offsets = keyspans.token_offsets(tokenizer, text, add_special_tokens=add_special_tokens)
    long = engine.score_long(model, ids, chunk_size=chunk_size)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    short = engine.score_truncated(model, [ids], trunc_len, stride, batch_size=batch_size, pad_token_id=pad)[0]
    return engine.SequenceScores(np.asarray(ids, dtype=np.int64), offsets, long, short)


def model_fingerprint(name_or_path: str, model=None) -> str:
    """Identifies the evaluator's weights: hub commit hash when known, else local file stamps."""
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    path = Path(name_or_path)
    if path.is_dir():
        stamps = sorted(
            (p.name, p.stat().st_size, int(p.stat().st_mtime))
            for p in path.iterdir()
            if p.suffix in {".safetensors", ".bin", ".json"}
        )
        return hashlib.sha256(json.dumps([str(path.resolve()), stamps]).encode()).hexdigest()[:16]
    return f"{name_or_path}@{commit or 'unknown'}"


def default_cache_dir() -> Path:
    root = os.environ.get("LM_EVAL_LONGCTX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lm_eval_longctx")
    return Path(root) / "key_spans"


# Arrays a cache entry may hold beyond offsets and LSD (entries written before them lack them).
_OPTIONAL_ARRAYS = ("long_logprob", "short_logprob", "token_ids")


class SpanCache:
    """Key spans on disk, one entry per (evaluator, settings, text)."""

    def __init__(self, directory: str | Path | None):
        self.directory = None if directory is None else Path(directory)

    @staticmethod
    def key(text: str, settings: dict) -> str:
        payload = json.dumps({"settings": settings, "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                              "algorithm": SPAN_ALGORITHM_VERSION}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def get(self, key: str) -> EvaluatorJudgement | None:
        if self.directory is None:
            return None
        txt, npz = self.directory / f"{key}.txt", self.directory / f"{key}.npz"
        if not (txt.is_file() and npz.is_file()):
            return None
        with np.load(npz, allow_pickle=False) as z:
            extra = {k: z[k] for k in _OPTIONAL_ARRAYS if k in z.files}
            return EvaluatorJudgement(keyspans.read_span_file(txt), z["offsets"], z["lsd"], **extra)

    def put(self, key: str, judgement: EvaluatorJudgement, settings: dict) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"{key}.tmp.npz"
        extra = {k: np.asarray(getattr(judgement, k)) for k in _OPTIONAL_ARRAYS if getattr(judgement, k) is not None}
        np.savez(tmp, offsets=np.asarray(judgement.offsets, dtype=np.int64),
                 lsd=np.asarray(judgement.lsd, dtype=np.float32), **extra)
        tmp.replace(self.directory / f"{key}.npz")
        keyspans.write_span_file(self.directory / f"{key}.txt", judgement.spans)
        meta = self.directory / f"{key}.json"
        if not meta.exists():
            meta.write_text(json.dumps(settings, sort_keys=True), encoding="utf-8")
