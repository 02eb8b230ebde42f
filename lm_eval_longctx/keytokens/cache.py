"""The on-disk cache of evaluator key spans (``SpanCache``): one checksummed ``<key>.spans.npz`` per entry.

Entries are data (plain arrays, loaded with ``allow_pickle=False``) holding the spans, the evaluator's
token offsets and long-short differences (which LongPPL-soft needs) and a checksum of them; an entry
that does not verify is a miss, never a wrong value.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import warnings
from pathlib import Path

import numpy as np

from .. import errors
from .evaluator import SPAN_ALGORITHM_VERSION, EvaluatorJudgement, atomic_write_bytes

log = logging.getLogger("lm_eval_longctx")


def default_cache_dir() -> Path:
    root = os.environ.get("LM_EVAL_LONGCTX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lm_eval_longctx"
    )
    return Path(root) / "key_spans"


# Arrays a cache entry holds beyond spans, offsets and LSD when the judgement has them (the per-token
# export reads them; judgements from span files lack them).
_OPTIONAL_ARRAYS = ("long_logprob", "short_logprob", "token_ids")


def _entry_checksum(key: str, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(key.encode())
    for name in sorted(arrays):
        a = arrays[name]
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class SpanCache:
    """Key spans on disk, one file per (evaluator identity, settings, text): ``<key>.spans.npz`` holding
    the spans, the evaluator's offsets and LSD, the key and a SHA-256 of them all. An entry that cannot
    be read, is truncated, or whose checksum or key does not match is a miss (a warning; recomputed),
    never an error and never a wrong value. Entries are written atomically, so runs that share the
    cache are safe."""

    SUFFIX = ".spans.npz"

    def __init__(self, directory: str | Path | None):
        self.directory = None if directory is None else Path(directory)

    @staticmethod
    def key(text: str, settings: dict) -> str:
        payload = json.dumps(
            {
                "settings": settings,
                "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                "algorithm": SPAN_ALGORITHM_VERSION,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{self.SUFFIX}"

    def get(self, key: str) -> EvaluatorJudgement | None:
        if self.directory is None:
            return None
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("spans", "offsets", "lsd", *_OPTIONAL_ARRAYS) if k in z.files}
                stored_key, checksum = str(z["key"]), str(z["checksum"])
            spans, offsets = arrays["spans"], arrays["offsets"]
            ok = (
                stored_key == key
                and spans.ndim == 2
                and spans.shape[1] == 2
                and offsets.ndim == 2
                and "lsd" in arrays
                and checksum == _entry_checksum(key, arrays)
            )
        except Exception as err:  # noqa: BLE001  (any unreadable entry is a miss)
            ok, why = False, f"{type(err).__name__}: {err}"
        else:
            why = "its checksum or key does not match its content"
        if not ok:
            msg = f"key-span cache entry {path} is unusable ({why}); recomputing it"
            log.warning(msg)
            warnings.warn(msg, errors.LongctxWarning, stacklevel=2)
            return None
        extra = {k: arrays[k] for k in _OPTIONAL_ARRAYS if k in arrays}
        return EvaluatorJudgement([(int(a), int(b)) for a, b in spans], offsets, arrays["lsd"], **extra)

    def put(self, key: str, judgement: EvaluatorJudgement, settings: dict) -> None:
        if self.directory is None:
            return
        arrays = {
            "spans": np.asarray(judgement.spans, dtype=np.int64).reshape(-1, 2),
            "offsets": np.asarray(judgement.offsets, dtype=np.int64).reshape(-1, 2),
            "lsd": np.asarray(judgement.lsd, dtype=np.float32),
        }
        arrays.update(
            {k: np.asarray(getattr(judgement, k)) for k in _OPTIONAL_ARRAYS if getattr(judgement, k) is not None}
        )
        buf = io.BytesIO()
        np.savez(
            buf,
            **arrays,
            key=np.array(key),
            settings=np.array(json.dumps(settings, sort_keys=True)),
            checksum=np.array(_entry_checksum(key, arrays)),
        )
        atomic_write_bytes(self.path(key), buf.getvalue())
