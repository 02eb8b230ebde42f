"""Harness glue: the ONE module that touches lm-eval internals (tested with lm-eval 0.4.13).

* A custom request type, ``longctx_scores``, served by the stock ``hf`` backend: ``install()``
  attaches a method of that name to ``HFLM`` (the evaluator dispatches with
  ``getattr(lm, request_type)``), so ``--model hf`` and its subclasses serve it with their own
  model, tokenizer, device, batch size and max length. Any other backend gets an error naming
  the supported ones.
* ``--use_cache``: the method reads and writes the harness's cache database (``cache_hook.dbdict``)
  itself, because ``CachingLM`` only caches the three built-in request types.
* Progress: a bar per task in token positions forwarded (``TokenProgress``), ticked at every forward the engine
  runs (``ScoringRecord.listeners``), against each request kind's plan of its tokens (``planned_tokens``).
* The named aggregations the tasks' metric declarations use (``aggregation_fn``), registered with lm-eval once;
  the harness knows no task's metrics: each task declares its own (``MetricDeclaration``).
* Bootstrap stderr for corpus perplexities: lm-eval only bootstraps a fixed list of aggregations
  and reports "N/A" for token-weighted ones; ``install()`` wraps the stderr lookup so aggregations
  flagged ``_longctx_bootstrap`` get a bootstrap estimate.
* The evaluated model as an object (``evaluated_model``): a task takes its tokenizer and maximum length from the
  model ``simple_evaluate`` evaluates, whether built from ``--model_args`` or passed in (the Python API), and the
  chat options it was given; the start-up hook's wrapper of ``simple_evaluate`` records them (``discovery.py``).
* Backends and models the engine cannot serve faithfully are refused before any work: an HFLM subclass that
  overrides HFLM's scoring (``check_backend``), a tokenizer with more ids than the model's embedding has rows
  (``check_vocabulary``).

Requests carry ``args = (text, spec)``: ``text`` is a str (the harness hashes ``args[0]`` for
``--log_samples``) and ``spec`` is a small JSON-able dict, so cache keys are stable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .. import errors, output_dirs, settings
from ..data import documents
from ..engine import scoring, window
from ..keytokens import cache, evaluator, text_scoring
from ..metrics import bootstrap, per_token
from ..records import StaleStateError

log = logging.getLogger("lm_eval_longctx")
# A child of lm-eval's logger: its INFO lines show where lm-eval's own ("Cached requests: ...") show, at its
# verbosity (lm-eval's CLI shows INFO; our package logger shows warnings only).
harness_log = logging.getLogger("lm_eval.lm_eval_longctx")

REQUEST_TYPE = "longctx_scores"
SUPPORTED_MODELS = ("hf", "hf-auto", "huggingface")
TESTED_LM_EVAL = ">=0.4.13,<0.5"
# Resamples for corpus-perplexity stderr: lm-eval's default is 100000, far more than a
# 50-document stderr needs.
BOOTSTRAP_ITERS_CAP = 1000
# --batch_size auto: where lm-eval's own detection starts when the model has no --max_batch_size (HFLM's default)
AUTO_BATCH_CEILING = 64


class UnsupportedModelError(NotImplementedError):
    pass


# ------------------------------------------------------------------ the request type
#
# One request type serves every task; ``spec["kind"]`` says what to compute. A kind is a pair of
# plain functions (no lm-eval inside): ``serve(ctx, [(text, spec), ...]) -> [result, ...]`` gets
# all uncached requests of that kind at once (so it can batch across them), and
# ``from_state(dict) -> result`` rebuilds a cached result; results have ``to_state() -> dict``
# (plain arrays and numbers: what the harness cache stores).


@dataclass
class ScoringContext:
    """What a request kind may use: the HFLM's model, tokenizer, limits, and ``progress(n)``: n requests done (shown
    beside the task's progress bar, which counts the tokens forwarded)."""

    model: object
    tokenizer: object
    max_length: int | None
    batch_size: int
    progress: Callable[[int], None] = lambda n: None


@dataclass(frozen=True)
class RequestKind:
    serve: Callable[[ScoringContext, list], list]
    from_state: Callable[[dict], object]
    # tokens the model read for a result (None: nothing to check), so the length check holds on
    # --use_cache hits too
    n_tokens: Callable[[object], int | None] = lambda result: None
    # whether serving runs the model (False: the tokenizer only, e.g. counting a prompt's tokens)
    uses_model: bool = True
    # about the token positions serving these requests will run through the model: the progress bar's total (None:
    # one token a request, the bar then grows as the tokens come)
    planned_tokens: Callable[[ScoringContext, list], int] | None = None


REQUEST_KINDS: dict[str, RequestKind] = {}


def register_request_kind(
    name: str, serve, from_state, n_tokens=None, uses_model: bool = True, planned_tokens=None
) -> None:
    """Add (or replace, on re-import) a request kind served by ``longctx_scores``."""
    REQUEST_KINDS[name] = RequestKind(serve, from_state, n_tokens or (lambda result: None), uses_model, planned_tokens)


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


def planned_tokens(kind: RequestKind, ctx: ScoringContext, items: list) -> int:
    """The kind's plan of the tokens it forwards for ``items``; one a request when it has none or it fails (a
    request the engine refuses is refused by serving, with its own error)."""
    if kind.planned_tokens is not None:
        try:
            return int(kind.planned_tokens(ctx, items))
        except Exception as err:  # noqa: BLE001  (the plan only sizes a progress bar)
            log.debug("no token plan for the progress bar (%s)", err)
    return len(items)


def _spec_key(text: str, spec: dict, model_identity: dict) -> str:
    """The --use_cache key: the request and the model that scores it (a database shared across
    checkpoints never replays another model's scores)."""
    from lm_eval.api.model import hash_args

    return hash_args(REQUEST_TYPE, [text, json.dumps(spec, sort_keys=True), json.dumps(model_identity, sort_keys=True)])


def model_identity(lm) -> dict | None:
    """What the evaluated model is, exactly enough for a cache key: its hub commit or the SHA-256 of its
    local files, dtype and maximum length (None when it cannot be told, e.g. a model object without a
    source: then nothing is cached)."""
    cached = getattr(lm, "_longctx_identity", False)
    if cached is not False:
        return cached
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
            identity["files_sha256"] = evaluator.folder_fingerprint(name, cache.default_cache_dir().parent)
        elif getattr(config, "_commit_hash", None):
            identity["commit"] = config._commit_hash
        else:
            identity = None
    lm._longctx_identity = identity
    return identity


def check_length(n_tokens: int, max_length: int | None, spec: dict) -> None:
    """The length rule (``text_scoring.check_length``) for a request's spec."""
    text_scoring.check_length(n_tokens, max_length, bool(spec.get("allow_beyond_max_length", False)))


# How to raise the maximum length of a model object passed to simple_evaluate, in place of the command line's
# ``text_scoring.RAISE_MAX_LENGTH`` in the errors of a run through the Python API.
PYTHON_RAISE_MAX_LENGTH = (
    "Build the model object passed to simple_evaluate (Python API) with a larger max_length, e.g. "
    "HFLM(pretrained=..., max_length=N), if the model supports it"
)


def task_error(task_name: str, err: scoring.ScoringError, python_api: bool = False) -> scoring.ScoringError:
    """``err`` as our errors read: starting with the task's name, and (``python_api``: the model is an object passed
    to simple_evaluate) naming the Python API's way to raise the maximum length instead of --model_args."""
    message = str(err)
    if python_api:
        message = message.replace(text_scoring.RAISE_MAX_LENGTH, PYTHON_RAISE_MAX_LENGTH)
    if task_name and not message.startswith(f"{task_name}:"):
        message = f"{task_name}: {message}"
    return scoring.ScoringError(message)


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


def serve_each(score_one):
    """A kind's ``serve`` for requests scored one at a time: ``score_one(ctx, text, spec) -> result``."""

    def serve(ctx: ScoringContext, items: list) -> list:
        out = []
        for text, spec in items:
            out.append(score_one(ctx, text, spec))
            ctx.progress(1)
        return out

    return serve


register_request_kind(
    "sequence",
    serve_each(
        lambda ctx, text, spec: text_scoring.score_text(
            ctx.model, ctx.tokenizer, text, text_scoring.TextRequest.from_spec(spec), ctx.max_length, ctx.batch_size
        )
    ),
    scoring.SequenceScores.from_state,
    n_tokens=lambda result: len(result.token_ids),
    planned_tokens=lambda ctx, items: sum(
        text_scoring.tokens_to_forward(ctx.tokenizer, text, text_scoring.TextRequest.from_spec(spec))
        for text, spec in items
    ),
)


def _hflm_longctx_scores(self, requests, disable_tqdm: bool = False):
    """HFLM method for ``longctx_scores``: one result per request, in order.

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
    python_api = bool(getattr(self, PYTHON_API_ATTR, False))
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
            keys[i] = _spec_key(text, spec, identity)
            try:
                cached = _from_cache(db, keys[i], REQUEST_KINDS[kind])
            except Exception as err:  # noqa: BLE001  (a database that cannot be read: the run goes on without it)
                db, cached = _cache_database_off("read", err), None
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
        SERVED_TOKENIZER[str(getattr(req, "task_name", ""))] = tokenizer
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
    for (task_name, kind), idx in pending.items():
        items = [requests[i].args for i in idx]
        bar = TokenProgress(
            task_name, planned_tokens(REQUEST_KINDS[kind], ctx, items), len(idx), not disable_tqdm and self.rank == 0
        )
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
        note_scoring(task_name, {**record.summary(), "batch_size": batch_record})
        for i, res in zip(idx, results, strict=True):
            out[i] = res
            # plain arrays, not our classes; results that say they are not cacheable (failures) are not stored
            if db is not None and keys[i] is not None and getattr(res, "cacheable", True):
                try:
                    db[keys[i]] = res.to_state()
                except Exception as err:  # noqa: BLE001  (a full or read-only database: the run goes on without it)
                    db = _cache_database_off("written", err)
    return out


# How each task's requests were scored in this process (strategy per pass, dtype, model type): the tasks put it
# into their results record (``configs.<task>.metadata.longctx_settings.runtime.scoring``).
SCORING_BY_TASK: dict[str, dict] = {}


def merge_scoring(previous: dict | None, summary: dict) -> dict:
    """An engine record (``ScoringRecord.summary``) with an earlier one's pass counts added."""
    if previous is not None:
        for what, by_strategy in previous.get("passes", {}).items():
            merged = summary["passes"].setdefault(what, {})
            for how, n in by_strategy.items():
                merged[how] = merged.get(how, 0) + n
    return summary


def note_scoring(task_name: str, summary: dict) -> None:
    """Add one serving round's engine record to the task's."""
    SCORING_BY_TASK[task_name] = merge_scoring(SCORING_BY_TASK.get(task_name), summary)


def forget_scoring(task_name: str) -> None:
    """A new run of the task: nothing of it scored yet."""
    SCORING_BY_TASK.pop(task_name, None)
    SERVED_TOKENIZER.pop(task_name, None)


def scoring_of(task_name: str) -> dict | None:
    return SCORING_BY_TASK.get(task_name)


def _unsupported_backend(self, requests, disable_tqdm: bool = False):
    raise UnsupportedModelError(
        f"lm_eval_longctx tasks need per-token scores ({REQUEST_TYPE} requests), which the "
        f"{type(self).__name__} backend does not provide. Use --model {' / '.join(SUPPORTED_MODELS)} "
        "(Hugging Face transformers models; under `accelerate launch` for several GPUs)."
    )


# ------------------------------------------------------------------ metrics


def _twp(items):
    return per_token.token_weighted_perplexity(items)


def _ratio(items):
    return per_token.corpus_ratio(items)


_twp.__name__ = "token_weighted_perplexity"
_ratio.__name__ = "corpus_ratio"
_twp._longctx_bootstrap = True
_ratio._longctx_bootstrap = True

AGGREGATIONS = {"token_weighted_perplexity": _twp, "corpus_ratio": _ratio}


@dataclass(frozen=True)
class MetricDeclaration:
    """One metric of a task: how its per-document values aggregate, and which way is better (None: a diagnostic
    with no better direction, which a regression gate shows and never fails on)."""

    aggregation: Callable
    higher_is_better: bool | None


def declare(aggregation: str | Callable, higher_is_better: bool | None) -> MetricDeclaration:
    """A metric declaration from a named aggregation (``mean``, ``token_weighted_perplexity``, ``corpus_ratio``) or
    an aggregation function (a module-level function or a partial of one: it must pickle)."""
    return MetricDeclaration(
        aggregation_fn(aggregation) if isinstance(aggregation, str) else aggregation, higher_is_better
    )


def perplexity_or_note(note: str):
    """Token-weighted perplexity, or ``note`` (a text for the table and the results) when no item has a token."""
    import functools

    fn = functools.partial(per_token.token_weighted_perplexity_or, note)
    fn._longctx_bootstrap = True
    return fn


def _register_aggregations() -> None:
    """Our named aggregations in lm-eval's registry (never replacing an entry, so built-ins stay as they are)."""
    import lm_eval.api.metrics  # noqa: F401  (fills the built-in registries first)
    from lm_eval.api import registry

    for name, fn in AGGREGATIONS.items():
        if name not in registry.aggregation_registry:
            registry.register_aggregation(name)(fn)


def aggregation_fn(name: str):
    from lm_eval.api.metrics import mean

    return mean if name == "mean" else AGGREGATIONS[name]


def _install_stderr_hook() -> None:
    import lm_eval.evaluator_utils as eu

    if getattr(eu.stderr_for_metric, "_longctx_wrapped", False):
        return
    original = eu.stderr_for_metric

    def stderr_for_metric(metric, bootstrap_iters):
        if getattr(metric, "_longctx_bootstrap", False) and bootstrap_iters > 0:
            iters = min(bootstrap_iters, BOOTSTRAP_ITERS_CAP)
            return lambda xs: bootstrap.stderr(metric, xs, n_resamples=iters)
        return original(metric, bootstrap_iters)

    stderr_for_metric._longctx_wrapped = True
    eu.stderr_for_metric = stderr_for_metric


# ------------------------------------------------------------------ install


def install() -> None:
    """Every change this package makes to lm-eval, in one place; idempotent (a second call changes nothing).
    Called when a task of the suite is built, before lm-eval reads its metrics or sends its requests:
    attach the request type to HFLM and the clear error to other LMs, register the named aggregations, wrap the
    stderr lookup, the results tracker's save and the metric-count check; print our own errors without a traceback."""
    errors.install_excepthook()
    import lm_eval.models  # noqa: F401  (built-in model registrations before anything of ours)
    from lm_eval.api.model import LM
    from lm_eval.models.huggingface import HFLM

    if getattr(HFLM, REQUEST_TYPE, None) is not _hflm_longctx_scores:
        setattr(HFLM, REQUEST_TYPE, _hflm_longctx_scores)
    if not hasattr(LM, REQUEST_TYPE):
        setattr(LM, REQUEST_TYPE, _unsupported_backend)
    _install_model_creation_hooks(HFLM)
    _register_aggregations()
    if os.environ.get("LM_EVAL_LONGCTX_NO_STDERR_HOOK", "") not in ("1", "true", "True"):
        _install_stderr_hook()
    _install_results_saved_hook()


# ------------------------------------------------------------------ the model being evaluated
#
# lm-eval builds the model before the tasks (simple_evaluate), and merges the --model_args into every
# task's metadata. The hooks below note which backend was built and with which arguments, so a task
# can refuse an unsupported backend when it is built (before any evaluator or scoring runs), and its
# settings parser knows the model_args keys from its own settings. The watch itself lives in the
# discovery hook (_discovery.watch_model_creation), which lm-eval's CLI loads before it builds the model.


def _install_model_creation_hooks(HFLM) -> None:
    import inspect

    import lm_eval.evaluator

    from .discovery import watch_model_creation, wrap_simple_evaluate

    hf_keys = [
        k
        for k, p in inspect.signature(HFLM.__init__).parameters.items()
        if k != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    settings.add_external_keys("hf model_args", hf_keys + ["model"])
    watch_model_creation()
    # the start-up hook wraps it when lm-eval is imported; with the hook off, the later calls of this process
    wrap_simple_evaluate(lm_eval.evaluator)


# Set on the evaluated LM when a task is built: True when it was passed to simple_evaluate as an object (the Python
# API), so that its serving errors speak of that API rather than of --model_args.
PYTHON_API_ATTR = "_longctx_python_api"


@dataclass(frozen=True)
class EvaluatedModel:
    """The LM that the running ``simple_evaluate`` call evaluates: what a task builds its samples and lengths from,
    exactly as its requests are served (its tokenizer, its max_length)."""

    lm: object
    python_api: bool  # passed as simple_evaluate(model=<LM object>), not built from --model_args

    @property
    def tokenizer(self):
        return getattr(self.lm, "tokenizer", None)

    @property
    def max_length(self) -> int | None:
        value = getattr(self.lm, "max_length", None)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @property
    def position_table(self) -> int | None:
        """Positions of the model's learned position table (GPT-2, OPT, ...), or None: no sequence can pass it."""
        model = getattr(self.lm, "model", None)
        return scoring.learned_position_table(model) if model is not None else None

    def claimed_window(self):
        """The window the model's config claims (``engine/window.py``, the audit's reading), or None: no config, or
        one that states no window."""
        config = getattr(getattr(self.lm, "model", None), "config", None)
        if config is None:
            return None
        try:
            return window.claimed_window(config)
        except window.WindowError:
            return None

    def max_length_words(self) -> str:
        """Where the maximum length comes from and how to raise it, in the words of the API the user called."""
        if self.python_api:
            return (
                f"the max_length of the {type(self.lm).__name__} object passed to simple_evaluate (Python API); "
                f"build it with {type(self.lm).__name__}(..., max_length=N) if the model supports more"
            )
        return "from --model_args max_length or the model's config; raise --model_args max_length=N if it supports more"


def _evaluation_in_progress() -> dict | None:
    """The innermost ``lm_eval.simple_evaluate`` call in progress, as the start-up hook records it
    (``discovery.wrap_simple_evaluate``): what was passed as ``model``, the LM it evaluates once known
    (``lm``), ``apply_chat_template``, ``system_instruction`` and ``gen_kwargs``; None outside one."""
    from lm_eval.api.model import LM

    from .discovery import EVALUATIONS_ATTR

    runs = getattr(LM, EVALUATIONS_ATTR, None)
    return runs[-1] if runs else None


def evaluated_model() -> EvaluatedModel | None:
    """The model of the running ``lm_eval.simple_evaluate`` call, or None outside one (tasks built by hand, for
    ``lm_eval.evaluator.evaluate``, or with the start-up hook off). lm-eval hands a task no model: simple_evaluate
    builds the model from --model_args, or takes the object passed in, before it builds the tasks; the start-up hook
    records which (``_evaluation_in_progress``)."""
    from lm_eval.api.model import LM, CachingLM

    run = _evaluation_in_progress()
    lm = run.get("lm") if run is not None else None
    lm = lm.lm if isinstance(lm, CachingLM) else lm
    if not isinstance(lm, LM):
        return None
    return EvaluatedModel(lm, python_api=not isinstance(run.get("model"), str))


def prompt_options() -> tuple[bool, str | None] | None:
    """``(apply_chat_template, system_instruction)`` of the running ``simple_evaluate`` call, or None outside one.
    Read when a task is built, because simple_evaluate looks the chat template up (and fails on a model without
    one) after it has built the tasks but before it hands them these options."""
    run = _evaluation_in_progress()
    if run is None:
        return None
    return bool(run.get("apply_chat_template")), run.get("system_instruction")


def documents_evaluated(n_docs: int, task_name: str | None = None) -> list[int]:
    """The indices of the ``n_docs`` documents of a task that the running ``simple_evaluate`` call evaluates: the
    first ``limit`` (a count, or a fraction below 1, as lm-eval reads it), the ``samples`` listed for the task, or all
    of them (also outside a call)."""
    import math

    run = _evaluation_in_progress()
    samples = run.get("samples") if run is not None else None
    if isinstance(samples, dict) and task_name in samples:
        return sorted({int(i) for i in samples[task_name] if 0 <= int(i) < n_docs})
    limit = run.get("limit") if run is not None else None
    if limit is None:
        return list(range(n_docs))
    count = int(math.ceil(n_docs * float(limit))) if float(limit) < 1.0 else int(limit)
    return list(range(min(count, n_docs)))


def generation_options() -> dict | None:
    """The ``gen_kwargs`` of the running ``simple_evaluate`` call (--gen_kwargs) as a dict, or None (none given, or
    outside one): simple_evaluate applies them to the generating tasks after it has built them."""
    from lm_eval.utils import simple_parse_args_string

    run = _evaluation_in_progress()
    given = run.get("gen_kwargs") if run is not None else None
    if isinstance(given, str):
        given = simple_parse_args_string(given)
    return dict(given) if given else None


def note_evaluated_model(task_name: str, scores_per_token: bool = True) -> EvaluatedModel | None:
    """When a task is built: refuse a backend that cannot serve our requests (``scores_per_token``: the task's
    requests run the model, so a backend whose scoring the engine would bypass is refused too) or a model whose
    embedding is smaller than its tokenizer, accept the model_args keys that lm-eval merged into the metadata (the
    model is built before the tasks), and return the evaluated model when it is known."""
    from lm_eval.api.model import LM

    from .discovery import LAST_MODEL_ATTR, MODEL_ARGS_ATTR

    settings.add_external_keys("model_args of the evaluated model", getattr(LM, MODEL_ARGS_ATTR, ()))
    model = evaluated_model()
    cls = type(model.lm) if model is not None else getattr(LM, LAST_MODEL_ATTR, None)
    python_api = model is not None and model.python_api
    if cls is not None:
        check_model_class(cls, task_name, scores_per_token, python_api)
    if model is not None:
        setattr(model.lm, PYTHON_API_ATTR, model.python_api)
        check_vocabulary(model.lm, task_name)
    return model


def check_model_class(cls, task_name: str, scores_per_token: bool = True, python_api: bool = False) -> None:
    """Refuse a backend class that cannot serve our requests, or (``scores_per_token``) whose scoring the engine
    would bypass; what ``note_evaluated_model`` checks, also asked of ``--model``'s class before it is built."""
    from lm_eval.models.huggingface import HFLM

    if not issubclass(cls, HFLM):
        way_out = (
            "Pass an lm_eval.models.huggingface.HFLM (or a subclass) to simple_evaluate"
            if python_api
            else f"Use --model {' / '.join(SUPPORTED_MODELS)}"
        )
        raise UnsupportedModelError(
            f"{task_name} needs per-token scores ({REQUEST_TYPE} requests), which the {cls.__name__} backend does "
            f"not provide. {way_out} (Hugging Face transformers models; under `accelerate launch` for several GPUs)."
        )
    if scores_per_token:
        check_backend(cls, python_api, task_name)


# ------------------------------------------------------------------ backends and models the engine cannot serve
#
# The engine scores with the transformers model an HFLM holds (``lm.model``), never through HFLM's own scoring
# methods: a subclass that changes scores by overriding one of them would get plain hf's numbers.

SCORING_METHODS = ("_model_call", "_loglikelihood_tokens", "loglikelihood", "loglikelihood_rolling")


class UnfaithfulBackendError(UnsupportedModelError):
    """An HFLM subclass whose scoring the engine would bypass."""


class VocabularyMismatchError(ValueError):
    """A tokenizer with more token ids than the model's input embedding has rows."""


def check_backend(cls, python_api: bool = False, task_name: str = "") -> None:
    """Refuse an HFLM subclass that overrides a scoring method of HFLM (``SCORING_METHODS``): the engine calls none
    of them, so the override would silently change nothing."""
    from lm_eval.models.huggingface import HFLM

    if not (isinstance(cls, type) and issubclass(cls, HFLM)):
        return
    overridden = [name for name in SCORING_METHODS if getattr(cls, name, None) is not getattr(HFLM, name, None)]
    if not overridden:
        return
    owner = next(c for c in cls.__mro__ if overridden[0] in vars(c))
    way_out = "pass a plain HFLM to simple_evaluate" if python_api else "use --model hf"
    raise UnfaithfulBackendError(
        f"{task_name + ': ' if task_name else ''}the {cls.__name__} backend overrides HFLM."
        f"{', HFLM.'.join(overridden)} ({owner.__module__}.{owner.__name__}), which this suite never calls: its "
        f"per-token passes run the transformers model itself, so the scores would be plain hf's, not "
        f"{cls.__name__}'s. Ways out: {way_out}, or make the change in the transformers model (its forward, or "
        "forward hooks) so that every pass sees it."
    )


def check_vocabulary(lm, task_name: str = "") -> None:
    """Refuse a model whose input embedding has fewer rows than its tokenizer has token ids (a token id past the
    last row would stop the run deep inside the model), before any model runs."""
    model = getattr(lm, "model", None)
    tokenizer = getattr(lm, "tokenizer", None)
    get_embeddings = getattr(model, "get_input_embeddings", None)
    if tokenizer is None or not callable(get_embeddings):
        return
    try:
        embedding = get_embeddings()
        n_ids = len(tokenizer)
    except (AttributeError, NotImplementedError, TypeError):
        return
    rows = getattr(embedding, "num_embeddings", None)
    if rows is None and getattr(embedding, "weight", None) is not None:
        rows = int(embedding.weight.shape[0])
    if rows is None or n_ids <= rows:
        return
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    raise VocabularyMismatchError(
        f"{task_name + ': ' if task_name else ''}the tokenizer {name} has {n_ids} token ids, but the model's input "
        f"embedding has {rows} rows: ids {rows}..{n_ids - 1} would index past it. Ways out: the model's own "
        "tokenizer (--model_args tokenizer=PATH), or a model whose embedding matches its tokenizer "
        "(model.resize_token_embeddings(len(tokenizer)), then save it)."
    )


# ------------------------------------------------------------------ the tokenizer that served each task

SERVED_TOKENIZER: dict[str, dict] = {}


def tokenizer_identity_of(lm) -> dict | None:
    """The identity of an LM's tokenizer (``documents.tokenizer_identity``), or None when it has none."""
    tokenizer = getattr(lm, "tokenizer", None)
    return None if tokenizer is None else documents.tokenizer_identity(tokenizer)


def tokenizer_of(task_name: str) -> dict | None:
    """The identity of the tokenizer that served ``task_name``'s requests in this process, or None."""
    return SERVED_TOKENIZER.get(task_name)


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
    return None


def build_requests_without_request_cache(task, super_build, **kwargs):
    """``--cache_requests`` keys cached Instances by task name only, not by metadata, so a run
    with other settings (K, d, evaluator, ...) would replay stale requests. Ours are cheap to
    build, so they are always rebuilt."""
    if kwargs.get("cache_requests"):
        log.warning(
            "%s: --cache_requests is ignored for this task (cached requests do not record "
            "the task settings); requests are rebuilt",
            getattr(task.config, "task", "task"),
        )
    kwargs["cache_requests"] = False
    kwargs["rewrite_requests_cache"] = False
    return super_build(**kwargs)


# ------------------------------------------------------------------ after the results are saved
#
# With --output_path, lm-eval writes the results JSON in EvaluationTracker.save_results_aggregated,
# which returns nothing and offers no hook. Tasks that write files beside the results (the
# forgetting curve's PNG) register a callback; install() wraps that method so every callback gets
# (results dict, path of the results JSON just written). A failing callback only logs a warning:
# the results are already saved.

RESULTS_SAVED_CALLBACKS: dict[str, Callable] = {}


def on_results_saved(name: str, callback) -> None:
    """Call ``callback(results: dict, results_file: pathlib.Path)`` after each results JSON is saved
    (registered under ``name``: re-registering replaces it)."""
    RESULTS_SAVED_CALLBACKS[name] = callback


def task_load_in_progress():
    """``(call number, task list)`` of lm-eval's ``TaskManager.load`` call that is building tasks now, or None
    (recorded by the discovery hook; None when the hook is off)."""
    from lm_eval.tasks.manager import TaskManager

    from .discovery import LOADING_ATTR

    return getattr(TaskManager, LOADING_ATTR, None)


class ResultsNotSavedError(OSError):
    """``--output_path`` was given and the results JSON could not be written there."""


def _saved_results_file(tracker):
    """The file save_results_aggregated has just written (its own naming, 0.4.13)."""
    from pathlib import Path

    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.with_name(f"{path.stem}_{tracker.date_id}.json")
    return path / str(tracker.general_config_tracker.model_name_sanitized) / f"results_{tracker.date_id}.json"


def _whole_results_file(path) -> bool:
    """Whether ``path`` holds a whole results JSON (an object), not the start of one."""
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def _complete_lines(path) -> int:
    """The newline-terminated lines of a samples file (a write cut short leaves a last line without one)."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n if last == b"\n" else -1


@contextlib.contextmanager
def _lm_eval_save_error():
    """A list that receives the error lm-eval's tracker catches while it saves: it logs a warning inside its
    ``except`` block and goes on, so the cause (a full or read-only file system) is read from there."""
    logger = logging.getLogger("lm_eval.loggers.evaluation_tracker")
    shown = logger.getEffectiveLevel()
    caught: list[Exception] = []

    def note(record: logging.LogRecord) -> bool:
        err = sys.exc_info()[1]
        if record.levelno >= logging.WARNING and isinstance(err, Exception):
            caught.append(err)
        return record.levelno >= shown

    level = logger.level
    if shown > logging.WARNING:  # the warning must be made to be seen here, and is not shown
        logger.setLevel(logging.WARNING)
    logger.addFilter(note)
    try:
        yield caught
    finally:
        logger.removeFilter(note)
        logger.setLevel(level)


def _save_failure(path, caught: list[Exception], cut_short: bool) -> str:
    """``PATH: the cause`` of a failed save, in one line."""
    if caught and isinstance(caught[-1], OSError):
        return output_dirs.cannot_write(path, caught[-1])
    if caught:
        return f"cannot write {path}: {errors.first_line(caught[-1])}"
    return f"cannot write {path}" + (": it was cut short" if cut_short else "")


def _remove_partial(path, size_before: int | None) -> None:
    """Put back what ``path`` was before a failed write: its first ``size_before`` bytes, or nothing."""
    with contextlib.suppress(OSError):
        if size_before is None:
            os.unlink(path)
        else:
            os.truncate(path, size_before)


def _install_results_saved_hook() -> None:
    import functools

    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    original = EvaluationTracker.save_results_aggregated
    if getattr(original, "_longctx_wrapped", False):
        return

    @functools.wraps(original)
    def save_results_aggregated(self, results, samples=None, *args, **kwargs):
        before = getattr(self, "date_id", None)
        with _lm_eval_save_error() as caught:
            out = original(self, results, samples, *args, **kwargs)
        if not self.output_path:
            return out
        path = _saved_results_file(self) if getattr(self, "date_id", None) not in (None, before) else None
        if path is None or not path.is_file() or not _whole_results_file(path):
            # lm-eval logs a warning and exits 0; a CI job would then gate on a file that is not there (or is cut
            # short: a full file system leaves the start of it, which goes, the file name being new)
            cut_short = path is not None and path.is_file()
            if cut_short:
                _remove_partial(path, None)
            if path is not None:
                why = _save_failure(path, caught, cut_short)
            else:
                why = errors.first_line(caught[-1]) if caught else "see lm-eval's warning above"
            raise ResultsNotSavedError(
                f"--output_path {self.output_path}: the results file could not be written ({why}); nothing was "
                "saved. Free space or pass an --output_path that can be written."
            )
        if path.exists():
            for name, callback in list(RESULTS_SAVED_CALLBACKS.items()):
                try:
                    callback(results, path)
                except Exception as e:  # noqa: BLE001  (the results are saved; a picture must not fail the run)
                    why = (
                        output_dirs.cannot_write(e.filename, e)
                        if getattr(e, "filename", None)
                        else errors.first_line(e)
                    )
                    log.warning("%s: could not write its files beside %s: %s; the results are saved", name, path, why)
        return out

    save_results_aggregated._longctx_wrapped = True
    EvaluationTracker.save_results_aggregated = save_results_aggregated

    original_samples = EvaluationTracker.save_results_samples

    @functools.wraps(original_samples)
    def save_results_samples(self, task_name, samples, *args, **kwargs):
        path = None
        if self.output_path and samples and getattr(self, "date_id", None):
            path = _saved_results_file(self).with_name(f"samples_{task_name}_{self.date_id}.jsonl")
        lines_before = _complete_lines(path) if path is not None and path.is_file() else 0
        size_before = path.stat().st_size if path is not None and path.is_file() else None
        with _lm_eval_save_error() as caught:
            out = original_samples(self, task_name, samples, *args, **kwargs)
        if path is not None and (not path.is_file() or _complete_lines(path) != lines_before + len(samples)):
            cut_short = path.is_file()
            if cut_short:  # lm-eval appends: what it wrote of these samples goes, what was there stays
                _remove_partial(path, size_before)
            raise ResultsNotSavedError(
                f"--output_path {self.output_path}: the samples of {task_name} could not be written "
                f"({_save_failure(path, caught, cut_short)}); the results file beside it is saved, these samples "
                "are not. Free space or pass an --output_path that can be written."
            )
        return out

    save_results_samples._longctx_wrapped = True
    EvaluationTracker.save_results_samples = save_results_samples


def cli_evaluate():
    """lm-eval's command-line entry point, what the ``lm_eval`` console script calls (reads ``sys.argv``)."""
    import lm_eval.__main__

    return lm_eval.__main__.cli_evaluate()
