"""The on-disk cache of evaluator key spans (``SpanCache``): one checksummed ``<key>.spans.npz`` per entry.

Entries are data (plain arrays, loaded with ``allow_pickle=False``) holding the spans, the evaluator's
token offsets and long-short differences (which LongPPL-soft needs) and a checksum of them; an entry
that does not verify is a miss, never a wrong value. The cache is an optimisation: a folder that cannot be
read or written (a file in its place, a symlink loop, a read-only or full file system) is one warning, and
the run goes on without it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np

from .. import errors, output_dirs
from ..data import checkpoints
from .evaluator import SPAN_ALGORITHM_VERSION, EvaluatorJudgement

log = logging.getLogger("lm_eval_longctx")


def default_cache_dir() -> Path:
    return checkpoints.cache_root() / "key_spans"


# Arrays a cache entry holds beyond spans, offsets and LSD when the judgement has them (the per-token
# export reads them; judgements from span files lack them).
_OPTIONAL_ARRAYS = ("long_logprob", "short_logprob", "token_ids")


# What an evaluation stops doing with a cache folder after an OSError (errors.first_time): one warning per folder,
# however many documents meet the failure.
NOT_READ, NOT_WRITTEN = "span cache not read", "span cache not written"


def _give_up(directory: Path, failure: str, err: OSError, stopped: str) -> None:
    """Stop reading or writing (``stopped``) the cache ``directory`` for this evaluation; warn once per folder."""
    errors.first_time((stopped, directory))
    if not errors.first_time(("span cache warned", directory)):
        return
    msg = (
        f"key-span cache {directory}: {failure} ({type(err).__name__}, errno {err.errno}); the run continues "
        "without the cache"
    )
    log.warning(msg)
    warnings.warn(msg, errors.LongctxWarning, stacklevel=3)


def _folder_fails(directory: Path) -> bool:
    """Whether the cache folder itself cannot be searched (a loop, no permission), not one entry."""
    try:
        with os.scandir(directory):
            pass
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return False


def _unusable(path: Path, why: str) -> None:
    """A miss: the entry at ``path`` cannot be used (it is recomputed and written again)."""
    msg = f"key-span cache entry {path} is unusable ({why}); recomputing it"
    log.warning(msg)
    warnings.warn(msg, errors.LongctxWarning, stacklevel=3)


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
        assert self.directory is not None  # get and put return before asking without a directory
        return self.directory / f"{key}{self.SUFFIX}"

    def get(self, key: str) -> EvaluatorJudgement | None:
        if self.directory is None or errors.already((NOT_READ, self.directory)):
            return None
        path = self.path(key)
        try:
            data = output_dirs.read_regular_file(path)
        except OSError as err:
            if _folder_fails(self.directory):
                cause = err.strerror.lower() if err.strerror else errors.first_line(err)
                _give_up(self.directory, f"cannot read {path}: {cause}", err, NOT_READ)
                return None
            _unusable(path, errors.first_line(err))
            return None
        if data is None:  # missing, or a folder, FIFO or device in its place: never waited on
            return None
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
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
            _unusable(path, f"{type(err).__name__}: {err}")
            return None
        if not ok:
            _unusable(path, "its checksum or key does not match its content")
            return None
        extra = {k: arrays[k] for k in _OPTIONAL_ARRAYS if k in arrays}
        return EvaluatorJudgement([(int(a), int(b)) for a, b in spans], offsets, arrays["lsd"], **extra)

    def put(self, key: str, judgement: EvaluatorJudgement, settings: dict) -> None:
        if self.directory is None or errors.already((NOT_WRITTEN, self.directory)):
            return
        arrays: dict[str, np.ndarray] = {
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
            # cast: numpy's stub would also match the unpacked arrays against savez's allow_pickle: bool
            **cast(dict[str, Any], arrays),
            key=np.array(key),
            settings=np.array(json.dumps(settings, sort_keys=True)),
            checksum=np.array(_entry_checksum(key, arrays)),
        )
        try:
            # a FIFO in an entry's place is replaced, never written into (that would wait for a reader)
            output_dirs.write_atomically(self.path(key), buf.getvalue(), special_in_place=False)
        except OSError as err:
            _give_up(self.directory, output_dirs.cannot_write(self.path(key), err), err, NOT_WRITTEN)
