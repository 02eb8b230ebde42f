"""What a model was scored with, while a ``recording`` is open: the harness writes it into the results
(``runtime.scoring``): the sequences per pass and strategy, the plans that ran (with their memory counts) and every
retry after an out-of-memory error, the model's dtype and device, and the support facts the strategies rest on."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections import Counter
from collections.abc import Callable

from .forward import capabilities, causal_lm, input_device, on_forward, on_layer

# the recordings open in this context, innermost last
_RECORDINGS: contextvars.ContextVar[tuple] = contextvars.ContextVar("lm_eval_longctx_recordings", default=())


class ScoringRecord:
    """How the engine scored one model inside a ``recording`` block."""

    def __init__(self, model):
        self.model = causal_lm(model)
        self.counts: Counter = Counter()
        self.plans: Counter = Counter()
        self.retries: list[dict] = []
        self.tokens_forwarded = 0
        # progress: ``listeners`` get each forward's work as it happens (its tokens; a generation step the tokens its
        # time is worth), ``revisers`` a change of the work still to come (a generation that stopped early)
        self.listeners: list[Callable[[float], None]] = []
        self.revisers: list[Callable[[float], None]] = []

    def summary(self) -> dict:
        passes: dict = {}
        for (what, how), n in sorted(self.counts.items()):
            passes.setdefault(what, {})[how] = n
        model = self.model
        dtype = next((str(p.dtype).replace("torch.", "") for p in model.parameters() if p.is_floating_point()), None)
        out = {
            "passes": passes,
            "dtype": dtype,
            "device": str(input_device(model)),
            **capabilities(model).support.summary(),
            "tokens_forwarded": self.tokens_forwarded,
        }
        if self.plans:
            # a chunked plan's chunk_size is an int where a full plan's is None: order by the text of each plan
            ordered = sorted(
                self.plans.items(), key=lambda item: json.dumps(dict(item[0]), sort_keys=True, default=str)
            )
            out["plans"] = [{**dict(key), "times": n} for key, n in ordered]
        if self.retries:
            out["retries"] = list(self.retries)
        return out


@contextlib.contextmanager
def recording(model):
    """Count how ``model`` is scored inside the block (``ScoringRecord``)."""
    record = ScoringRecord(model)
    token = _RECORDINGS.set((*_RECORDINGS.get(), record))
    try:
        yield record
    finally:
        _RECORDINGS.reset(token)


def _records_of(model):
    model = causal_lm(model)
    return [record for record in _RECORDINGS.get() if record.model is model]


def count(model, what: str, how: str, n: int = 1) -> None:
    """``n`` sequences of pass ``what`` scored by strategy ``how``."""
    for record in _records_of(model):
        record.counts[(what, how)] += n


def count_tokens(model, n: int, ticked: float = 0.0, work: float | None = None) -> None:
    """``n`` token positions run through the model's decoder (a forward of [batch, length] counts batch x length);
    ``work``: what the forward counts for in progress (default ``n``), of which ``ticked`` was already given to the
    listeners layer by layer (``layer_done``)."""
    rest = (float(n) if work is None else work) - ticked
    for record in _records_of(model):
        record.tokens_forwarded += int(n)
        if rest > 1e-6:  # not the float remainder of a forward whose layers gave it all
            for listener in record.listeners:
                listener(rest)


def layer_done(model, work: float) -> None:
    """A decoder layer ended inside a forward: its share of the forward's work goes to the progress listeners."""
    for record in _records_of(model):
        for listener in record.listeners:
            listener(work)


def revise_work(model, delta: float) -> None:
    """The work still to come changed by ``delta`` (progress totals follow)."""
    for record in _records_of(model):
        for reviser in record.revisers:
            reviser(delta)


def note_plan(model, what: str, plan_summary: dict) -> None:
    """A plan chosen for pass ``what`` (its strategy, sequences per forward, chunk, attention kernel, memory)."""
    key = tuple(sorted({"pass": what, **plan_summary}.items()))
    for record in _records_of(model):
        record.plans[key] += 1


def note_retry(model, what: str, failed: dict, next_plan: dict, error: str) -> None:
    """An out-of-memory error in pass ``what`` under ``failed``, retried under ``next_plan``."""
    for record in _records_of(model):
        record.retries.append({"pass": what, "failed": failed, "retried_with": next_plan, "error": error[:200]})


on_forward(count_tokens)
on_layer(layer_done)


def merge_scoring(previous: dict | None, summary: dict) -> dict:
    """An engine record (``ScoringRecord.summary``) with an earlier one's pass counts added."""
    if previous is not None:
        for what, by_strategy in previous.get("passes", {}).items():
            merged = summary["passes"].setdefault(what, {})
            for how, n in by_strategy.items():
                merged[how] = merged.get(how, 0) + n
    return summary
