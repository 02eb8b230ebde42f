"""The aggregations the tasks' metric declarations use, and their bootstrap stderr.

lm-eval bootstraps the stderr of a fixed list of aggregations and reports "N/A" for any other; a corpus perplexity
(token-weighted) is not on that list. The tasks hand lm-eval a ``BootstrappedAggregation`` for each such metric: it
aggregates as the plain function does and keeps the per-document items in the running evaluation, and
``add_bootstrap_stderrs`` puts a bootstrap estimate where lm-eval wrote "N/A" once ``simple_evaluate`` has
aggregated (``evaluation.evaluate``). The harness knows no task's metrics: each task declares its own
(``MetricDeclaration``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..metrics import bootstrap, per_token
from . import run_state

# Resamples for corpus-perplexity stderr: lm-eval's default is 100000, far more than a 50-document stderr needs.
BOOTSTRAP_ITERS_CAP = 1000
# lm-eval's own "N/A" for these stderrs, as before this package bootstrapped them
NO_STDERR_ENV = "LM_EVAL_LONGCTX_NO_STDERR_HOOK"
# the attribute that flags an aggregation whose stderr this package bootstraps (``for_task``)
BOOTSTRAP_FLAG = "_longctx_bootstrap"


def _twp(items):
    return per_token.token_weighted_perplexity(items)


def _ratio(items):
    return per_token.corpus_ratio(items)


_twp.__name__ = "token_weighted_perplexity"
_ratio.__name__ = "corpus_ratio"
setattr(_twp, BOOTSTRAP_FLAG, True)
setattr(_ratio, BOOTSTRAP_FLAG, True)

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
    fn = functools.partial(per_token.token_weighted_perplexity_or, note)
    setattr(fn, BOOTSTRAP_FLAG, True)
    return fn


def register_aggregations() -> None:
    """Our named aggregations in lm-eval's registry (never replacing an entry, so built-ins stay as they are)."""
    import lm_eval.api.metrics  # noqa: F401  (fills the built-in registries first)
    from lm_eval.api import registry

    for name, fn in AGGREGATIONS.items():
        if name not in registry.aggregation_registry:
            registry.register_aggregation(name)(fn)


def aggregation_fn(name: str):
    from lm_eval.api.metrics import mean

    return mean if name == "mean" else AGGREGATIONS[name]


@dataclass(frozen=True)
class BootstrappedAggregation:
    """``function`` as lm-eval calls an aggregation, keeping the items it aggregates for the bootstrap stderr of
    ``task``'s ``metric`` (``add_bootstrap_stderrs``)."""

    function: Callable
    task: str
    metric: str

    def __call__(self, items):
        run_state.current().aggregated[(self.task, self.metric)] = (self.function, list(items))
        return self.function(items)


def for_task(function: Callable, task: str, metric: str) -> Callable:
    """The aggregation lm-eval gets for ``task``'s ``metric``: ``function`` itself, or one that keeps its items when
    lm-eval has no stderr for it (a function flagged ``_longctx_bootstrap``)."""
    if getattr(function, BOOTSTRAP_FLAG, False):
        return BootstrappedAggregation(function, task, metric)
    return function


def add_bootstrap_stderrs(results: dict | None, aggregated: dict, bootstrap_iters) -> None:
    """Put a bootstrap stderr (``metrics/bootstrap.py``, at most ``BOOTSTRAP_ITERS_CAP`` resamples) where lm-eval
    left "N/A" for an aggregation it does not know: every ``(task, metric) -> (function, items)`` of ``aggregated``
    with two items or more, when ``bootstrap_iters`` asks for stderrs at all (lm-eval's rule)."""
    if not results or not isinstance(bootstrap_iters, int) or bootstrap_iters <= 0:
        return
    if os.environ.get(NO_STDERR_ENV, "") in ("1", "true", "True"):
        return
    table = results.get("results") or {}
    for (task, metric), (function, items) in aggregated.items():
        row = table.get(task)
        if not isinstance(row, dict) or len(items) < 2:
            continue
        for key in [k for k in row if k.split(",", 1)[0] == f"{metric}_stderr"]:
            row[key] = bootstrap.stderr(function, items, n_resamples=min(bootstrap_iters, BOOTSTRAP_ITERS_CAP))
