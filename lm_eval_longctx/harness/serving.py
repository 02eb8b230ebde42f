"""Serving ``longctx_scores`` on the stock ``hf`` backend: the method set on ``HFLM`` (``contacts.py``).

The evaluator dispatches with ``getattr(lm, request_type)``, so ``--model hf`` and its subclasses serve the requests
with their own model, tokenizer, device, batch size and max length. ``--use_cache``: the method reads and writes the
harness's cache database (``cache_hook.dbdict``) itself, because ``CachingLM`` only caches the three built-in
request types. Progress: a bar per task in token positions forwarded (``TokenProgress``), ticked at every forward the
engine runs (``ScoringRecord.listeners``), against each request kind's plan of its tokens (``planned_tokens``).
"""

from __future__ import annotations

import json
import logging
import time

from .. import errors
from ..data import checkpoints, documents
from ..engine import scoring
from ..records import StaleStateError
from . import run_state
from .evaluated_model import check_backend, check_vocabulary
from .request_type import (
    REQUEST_KINDS,
    REQUEST_TYPE,
    RequestKind,
    ScoringContext,
    check_length,
    planned_tokens,
    task_error,
)

log = logging.getLogger("lm_eval_longctx")
# A child of lm-eval's logger: its INFO lines show where lm-eval's own ("Cached requests: ...") show, at its
# verbosity (lm-eval's CLI shows INFO; our package logger shows warnings only).
harness_log = logging.getLogger("lm_eval.lm_eval_longctx")

# --batch_size auto: where lm-eval's own detection starts when the model has no --max_batch_size (HFLM's default)
AUTO_BATCH_CEILING = 64


class TokenProgress:
    """One task's progress bar, in the unit that costs time: token positions forwarded through the model, ticked at
    every forward the engine runs (``ScoringRecord.listeners``: inside a long request too, and at every step of a
    generation), against the kind's plan of them; the requests done shown beside. Where the plan was short the total
    grows; at the end it is what ran."""

    def __init__(self, task_name: str, planned: int, n_requests: int, show: bool):
        from tqdm import tqdm

        self.total, self.n, self.updates = float(max(1, int(planned))), 0.0, 0
        self.n_requests, self.requests_done = n_requests, 0
        # smoothing 0: the rate averaged over the whole task, which predicts the rest of it
        self.bar = tqdm(
            total=self.total,
            desc=f"Running {REQUEST_TYPE} requests ({task_name})",
            unit="tok",
            unit_scale=True,
            smoothing=0,
            disable=not show,
        )

    def tokens(self, n: float) -> None:
        self.n += n
        self.updates += 1
        if self.n > self.total:  # the plan was short: the bar never runs past its end
            self.total = self.n
            self.bar.total = self.total
        self.bar.update(n)

    def revise(self, delta: float) -> None:
        """The work still to come changed by ``delta`` (a generation whose rows stopped early)."""
        self.total = max(self.n, self.total + delta, 1)
        self.bar.total = self.total
        self.bar.refresh()

    def requests(self, n: int) -> None:
        self.requests_done += n
        self.bar.set_postfix_str(f"{self.requests_done}/{self.n_requests} requests", refresh=False)

    def close(self) -> None:
        self.total = self.bar.total = max(self.n, 1)
        self.bar.refresh()
        self.bar.close()


class RunProgress:
    """The whole run's place, one line as each task starts: "task k of n", and the time the tasks left will take at
    the rate of the tasks done (their work, in the bars' unit, per second)."""

    def __init__(self, planned: list[int | None]):
        self.planned = [max(1.0, float(p or 0)) for p in planned]
        self.work = 0.0
        self.start = time.perf_counter()

    def done(self, work: float) -> None:
        self.work += work

    def line(self, k: int, task_name: str) -> str:
        head = f"{REQUEST_TYPE}: task {k + 1} of {len(self.planned)} ({task_name})"
        seconds = time.perf_counter() - self.start
        if k == 0:
            return head + ("; the time left is said from the second task on" if len(self.planned) > 1 else "")
        if self.work <= 0 or seconds <= 0:
            return head
        left = sum(self.planned[k:]) / (self.work / seconds)
        return f"{head}; {_minutes(left)} left for this and the {len(self.planned) - k - 1} after it"


def _minutes(seconds: float) -> str:
    if seconds < 60:
        return "under a minute"
    return f"about {round(seconds / 60)} min"


def _spec_key(text: str, spec: dict, model_identity: dict) -> str:
    """The --use_cache key: the request and the model that scores it (a database shared across
    checkpoints never replays another model's scores)."""
    from lm_eval.api.model import hash_args

    return hash_args(REQUEST_TYPE, [text, json.dumps(spec, sort_keys=True), json.dumps(model_identity, sort_keys=True)])


def model_identity(lm) -> dict | None:
    """What the evaluated model is, exactly enough for a cache key: its hub commit or the SHA-256 of its
    local files, dtype and maximum length (None when it cannot be told, e.g. a model object without a
    source: then nothing is cached)."""
    identities = run_state.current().model_identities  # computed once a call: a local folder is hashed
    if id(lm) in identities:
        return identities[id(lm)]
    model = getattr(lm, "model", None)
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", None) or getattr(model, "name_or_path", None)
    identity = None
    if name:
        identity = {
            "name": str(name),
            "class": type(model).__name__,
            "dtype": str(getattr(model, "dtype", None)),
            "max_length": getattr(lm, "max_length", None),
            "peft": str(getattr(lm, "peft", None) or ""),
        }
        from pathlib import Path

        if Path(str(name)).is_dir():
            identity["files_sha256"] = checkpoints.folder_fingerprint(name, checkpoints.cache_root())
        elif commit := getattr(config, "_commit_hash", None):
            identity["commit"] = commit
        else:
            identity = None
    identities[id(lm)] = identity
    return identity


def serving_batch_size(lm) -> tuple[int, dict]:
    """Sequences per forward for our requests, and its record. A whole-number --batch_size is used as is. ``auto``
    (also ``auto:N``) starts where lm-eval's own detection starts, the model's --max_batch_size (HFLM: 64): the
    engine's memory plan then lowers it for each sequence length whose estimate does not fit the free memory
    (engine/memory.py), and an out-of-memory halves it. lm-eval's detection itself is not used: it measures one
    max_length-token forward, not our lengths, and finds nothing on a CPU (no out-of-memory error there)."""
    asked = getattr(lm, "batch_size", None)
    if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 1:
        return asked, {"asked": asked, "at_most": asked}
    ceiling = getattr(lm, "max_batch_size", None)
    ceiling = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) and ceiling >= 1 else None
    at_most = ceiling or AUTO_BATCH_CEILING
    return at_most, {
        "asked": str(asked),
        "at_most": at_most,
        "from": "--max_batch_size" if ceiling else f"lm-eval's default --max_batch_size ({AUTO_BATCH_CEILING})",
        "then": "lowered per sequence length by the memory plan (engine/memory.py), halved on out-of-memory",
    }


def serve_longctx_scores(self, requests, disable_tqdm: bool = False):
    """``HFLM.longctx_scores``: one result per request, in order.

    Serves this rank's requests only and makes no collective call, so under data parallelism
    every rank works on its own shard independently.
    """
    db = getattr(getattr(self, "cache_hook", None), "dbdict", None)
    identity = model_identity(self) if db is not None else None
    if db is not None and identity is None:
        log.warning(
            "--use_cache: the evaluated model's source (hub commit or local folder) is not known, so "
            "%s results are neither read from nor written to the cache",
            REQUEST_TYPE,
        )
        db = None
    run = run_state.current()
    python_api = run.python_api
    batch, batch_record = serving_batch_size(self)
    if batch_record["asked"] != batch:
        harness_log.info(
            "--batch_size %s: %s requests take up to %d sequences per forward (%s), fewer for a sequence length "
            "whose memory estimate does not fit the free memory (engine/memory.py), half as many after an "
            "out-of-memory",
            batch_record["asked"],
            REQUEST_TYPE,
            batch,
            batch_record["from"],
        )
    out: list = [None] * len(requests)
    pending: dict[tuple[str, str], list[int]] = {}  # (task, kind) -> request indices
    keys: list[str | None] = [None] * len(requests)
    for i, req in enumerate(requests):
        text, spec = req.args
        kind = spec.get("kind", "sequence")
        if kind not in REQUEST_KINDS:
            raise ValueError(f"unknown {REQUEST_TYPE} kind {kind!r}; known: {sorted(REQUEST_KINDS)}")
        if db is not None:
            assert identity is not None  # db is None without a model identity (above)
            key = keys[i] = _spec_key(text, spec, identity)
            try:
                cached = _from_cache(db, key, REQUEST_KINDS[kind])
            except Exception as err:  # noqa: BLE001  (a database that cannot be read: the run goes on without it)
                _cache_database_off("read", err)
                db, cached = None, None
            if cached is not None:
                out[i] = cached
                n = REQUEST_KINDS[kind].n_tokens(out[i])
                if n is not None:  # the same length check as an uncached request
                    try:
                        check_length(n, self.max_length, spec)
                    except scoring.ScoringError as err:
                        raise task_error(str(getattr(req, "task_name", "")), err, python_api) from err
                continue
        pending.setdefault((str(getattr(req, "task_name", "")), kind), []).append(i)
    tokenizer = tokenizer_identity_of(self)
    for req in requests:  # what tokenized this task's texts, for its results record
        run.served_tokenizer[str(getattr(req, "task_name", ""))] = tokenizer
    if db is not None:  # the line lm-eval's CachingLM logs for its own request types
        remaining = sum(map(len, pending.values()))
        harness_log.info(
            "%s: Cached requests: %d, Requests remaining: %d", REQUEST_TYPE, len(requests) - remaining, remaining
        )
    # a backend or model the engine cannot serve faithfully is refused here, before any request is scored
    if any(REQUEST_KINDS[kind].uses_model for _, kind in pending):
        check_backend(type(self), python_api)
    check_vocabulary(self)
    for long_pass in sorted(
        {str(requests[i].args[1].get("long_pass", "auto")) for idx in pending.values() for i in idx}
    ):
        scoring.check_model(self.model, long_pass)
    ctx = ScoringContext(self.model, self.tokenizer, self.max_length, batch)
    show = not disable_tqdm and self.rank == 0
    groups = [
        (task_name, kind, idx, planned_tokens(REQUEST_KINDS[kind], ctx, [requests[i].args for i in idx]))
        for (task_name, kind), idx in pending.items()
    ]
    run_progress = RunProgress([planned for *_, planned in groups])
    for k, (task_name, kind, idx, planned) in enumerate(groups):
        items = [requests[i].args for i in idx]
        if show:
            harness_log.info("%s", run_progress.line(k, task_name))
        bar = TokenProgress(task_name, planned, len(idx), show)
        ctx.progress = bar.requests
        with scoring.recording(self.model) as record:
            record.listeners.append(bar.tokens)
            record.revisers.append(bar.revise)
            try:
                results = REQUEST_KINDS[kind].serve(ctx, items)
            except scoring.ScoringError as err:
                raise task_error(task_name, err, python_api) from err
            finally:
                bar.close()
                run_progress.done(bar.n)
        run.note_scoring(task_name, {**record.summary(), "batch_size": batch_record})
        for i, res in zip(idx, results, strict=True):
            out[i] = res
            # plain arrays, not our classes; results that say they are not cacheable (failures) are not stored
            if db is not None and keys[i] is not None and getattr(res, "cacheable", True):
                try:
                    db[keys[i]] = res.to_state()
                except Exception as err:  # noqa: BLE001  (a full or read-only database: the run goes on without it)
                    _cache_database_off("written", err)
                    db = None
    return out


def tokenizer_identity_of(lm) -> dict | None:
    """The identity of an LM's tokenizer (``documents.tokenizer_identity``), or None when it has none."""
    tokenizer = getattr(lm, "tokenizer", None)
    return None if tokenizer is None else documents.tokenizer_identity(tokenizer)


def _from_cache(db, key: str, kind: RequestKind):
    """The result stored under ``key`` in the --use_cache database, or None: not there, stored in another version's
    layout (``records.StaleStateError``) or not readable as a result (a damaged entry): a miss, scored again and its
    entry rewritten. A database that cannot be queried raises."""
    import sqlite3

    if key not in db:
        return None
    try:
        return kind.from_state(db[key])
    except StaleStateError as err:
        harness_log.info("%s: a cached result in another layout is scored again (%s)", REQUEST_TYPE, err)
        return None
    except sqlite3.Error:
        raise
    except Exception as err:  # noqa: BLE001  (an entry that cannot be decoded is a miss, never a value)
        log.warning(
            "--use_cache: a %s result cannot be read (%s); it is scored again", REQUEST_TYPE, errors.first_line(err)
        )
        return None


def _cache_database_off(failure: str, err: Exception) -> None:
    """The one warning when the --use_cache database cannot be read or written; the caller goes on without it."""
    log.warning(
        "--use_cache: the database cannot be %s (%s); the run continues without the cache for %s requests",
        failure,
        errors.first_line(err),
        REQUEST_TYPE,
    )


def longctx_scores(original):
    """``HFLM.longctx_scores`` (lm-eval has none: ``original`` is None): ``serve_longctx_scores``."""

    def longctx_scores(self, requests, disable_tqdm: bool = False):
        return serve_longctx_scores(self, requests, disable_tqdm)

    return longctx_scores
