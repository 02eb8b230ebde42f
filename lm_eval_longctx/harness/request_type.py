"""The request type of the suite, ``longctx_scores``, and its kinds (served by ``serving.py``).

One request type serves every task; ``spec["kind"]`` says what to compute. A kind is a pair of plain functions (no
lm-eval inside): ``serve(ctx, [(text, spec), ...]) -> [result, ...]`` gets all uncached requests of that kind at once
(so it can batch across them), and ``from_state(dict) -> result`` rebuilds a cached result; results have
``to_state() -> dict`` (plain arrays and numbers: what the harness cache stores). A task class declares the kind
its requests name (its ``REQUEST_KIND``), registered here when the class is defined, as lm-eval's registries declare
metrics; ``register_request_kind`` adds one by hand (the plain ``sequence`` kind below).

Requests carry ``args = (text, spec)``: ``text`` is a str (the harness hashes ``args[0]`` for ``--log_samples``) and
``spec`` is a small JSON-able dict, so cache keys are stable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine import scoring
from ..keytokens import text_scoring

log = logging.getLogger("lm_eval_longctx")

REQUEST_TYPE = "longctx_scores"


@dataclass
class ScoringContext:
    """What a request kind may use: the HFLM's model, tokenizer, limits, and ``progress(n)``: n requests done (shown
    beside the task's progress bar, which counts the tokens forwarded)."""

    model: object
    tokenizer: Any  # the HFLM's tokenizer (transformers), called and decoded by the request kinds
    max_length: int | None
    batch_size: int
    progress: Callable[[int], None] = lambda n: None


@dataclass(frozen=True)
class RequestKind:
    # what the requests name (spec["kind"])
    name: str
    serve: Callable[[ScoringContext, list], list]
    from_state: Callable[[dict], object]
    # tokens the model read for a result (None: nothing to check), so the length check holds on
    # --use_cache hits too
    n_tokens: Callable[[Any], int | None] = lambda result: None
    # whether serving runs the model (False: the tokenizer only, e.g. counting a prompt's tokens)
    uses_model: bool = True
    # about the token positions serving these requests will run through the model: the progress bar's total (None:
    # one token a request, the bar then grows as the tokens come)
    planned_tokens: Callable[[ScoringContext, list], int] | None = None


REQUEST_KINDS: dict[str, RequestKind] = {}


def register_request_kind(kind: RequestKind) -> None:
    """Add (or replace, on re-import) a request kind served by ``longctx_scores``."""
    REQUEST_KINDS[kind.name] = kind


def planned_tokens(kind: RequestKind, ctx: ScoringContext, items: list) -> int:
    """The kind's plan of the tokens it forwards for ``items``; one a request when it has none or it fails (a
    request the engine refuses is refused by serving, with its own error)."""
    if kind.planned_tokens is not None:
        try:
            return int(kind.planned_tokens(ctx, items))
        except Exception as err:  # noqa: BLE001  (the plan only sizes a progress bar)
            log.debug("no token plan for the progress bar (%s)", err)
    return len(items)


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
    RequestKind(
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
)


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
