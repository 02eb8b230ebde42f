"""The key-token evaluator over one run (``EvaluatorJudge``): its identity and maximum length, known before any model
loads (the span cache's key and the results' record, on cache hits and misses alike); each text judged from the span
cache, or by the evaluator, loaded at the first miss and released when the run no longer needs it; and how it
scored (the engine's record, for the results)."""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass, field

from ..engine import recording, scoring
from . import cache, evaluator, text_scoring

log = logging.getLogger("lm_eval_longctx")


def span_cache_for(setting: str) -> cache.SpanCache:
    """The span cache a ``span_cache_dir`` setting names: ``default`` (``cache.default_cache_dir``), ``off`` (none),
    or a folder."""
    if setting.lower() in ("off", "none"):
        return cache.SpanCache(None)
    return cache.SpanCache(cache.default_cache_dir() if setting == "default" else setting)


@dataclass
class EvaluatorJudge:
    """The evaluator ``name`` (``revision``) judging texts with K = ``trunc_len``, d = ``stride``, ``alpha`` and
    ``beta``. ``device``: ``cpu``, ``cuda:N`` or ``auto`` (None: this rank's GPU, else the CPU); ``dtype``: None is
    bfloat16 on CUDA, float32 on the CPU."""

    name: str
    revision: str | None
    trunc_len: int
    stride: int
    alpha: float
    beta: float
    span_cache: cache.SpanCache
    device: str | None = None
    dtype: str | None = None
    max_memory: dict | None = None
    trust_remote_code: bool = False
    chunk_size: int = scoring.DEFAULT_CHUNK_SIZE
    window_batch_size: int = 4
    long_pass: str = "auto"
    allow_beyond_max_length: bool = False
    identity: dict = field(init=False)
    max_length: int | None = field(init=False)
    # the engine's record of every text the evaluator scored (None: every judgement came from the cache)
    scoring: dict | None = field(init=False, default=None)
    _loaded: tuple | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.identity = evaluator.evaluator_identity(self.name, self.revision, memo_dir=self.span_cache.directory)
        self.max_length = evaluator.evaluator_max_length(self.identity)

    @property
    def device_name(self) -> str:
        import torch

        if self.device:
            return self.device
        if torch.cuda.is_available():
            return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        return "cpu"

    @property
    def dtype_name(self) -> str:
        if self.dtype:
            return str(self.dtype)
        import torch

        device = self.device_name
        on_gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        return "bfloat16" if on_gpu else "float32"

    def cache_settings(self) -> dict:
        """What the key spans depend on: the span cache's key."""
        return {
            "trunc_len": self.trunc_len,
            "sliding_window": self.stride,
            "alpha": self.alpha,
            "beta": self.beta,
            "evaluator": self.identity,
            "evaluator_dtype": self.dtype_name,
        }

    def judge(self, text: str) -> evaluator.EvaluatorJudgement:
        """The judgement of ``text``: from the span cache, else scored by the evaluator (and stored); its length is
        checked against the evaluator's maximum either way."""
        settings = self.cache_settings()
        key = self.span_cache.key(text, settings)
        judgement = self.span_cache.get(key)
        limit = None if self.allow_beyond_max_length else self.max_length
        if judgement is not None:  # the same check as on a miss: the evaluator judged this many tokens
            assert judgement.offsets is not None  # a cache entry holds them
            text_scoring.check_length(len(judgement.offsets), limit, False, evaluator=self.identity["name"])
            return judgement
        model, tokenizer = self._load()
        request = evaluator.evaluator_request(
            self.trunc_len, self.stride, self.chunk_size, self.window_batch_size, self.long_pass
        )
        with scoring.recording(model) as record:
            scores = text_scoring.score_text(model, tokenizer, text, request, limit, evaluator=self.identity["name"])
        self.scoring = recording.merge_scoring(self.scoring, record.summary())
        judgement = evaluator.judge_from_scores(scores, self.alpha, self.beta)
        self.span_cache.put(key, judgement, settings)
        return judgement

    def _load(self) -> tuple:
        if self._loaded is None:
            log.info("loading the key-token evaluator %s on %s", self.name, self.device_name)
            self._loaded = evaluator.load_evaluator(
                self.identity,
                dtype=self.dtype_name,
                device=self.device_name,
                max_memory=self.max_memory,
                trust_remote_code=self.trust_remote_code,
            )
        return self._loaded

    def release(self) -> None:
        """Free the evaluator's memory (it is loaded again if another text needs it)."""
        if self._loaded is not None:
            self._loaded = None
            import torch

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
