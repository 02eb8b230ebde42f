"""The run state: one ``Evaluation`` per ``lm_eval.simple_evaluate`` call, holding what lm-eval hands no task (the
call's options, the model it evaluates) and what serving and aggregating record for the results. The current one
is a context variable (a nested call sees its own), set by ``evaluation.evaluate``; outside a call it is
``OUTSIDE``."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

from ..engine.recording import merge_scoring
from .evaluated_model import EvaluatedModel


@dataclass
class Evaluation:
    """One ``simple_evaluate`` call: its arguments (lm-eval's names), the LM it evaluates once known, and what
    serving and aggregating record for the tasks' results."""

    arguments: dict = field(default_factory=dict)
    lm: object = None  # the LM object passed in, or the first LM built while the call runs
    scoring: dict[str, dict] = field(default_factory=dict)  # task -> how its requests were scored (engine record)
    served_tokenizer: dict[str, dict | None] = field(default_factory=dict)  # task -> the tokenizer that served it
    aggregated: dict[tuple[str, str], tuple] = field(default_factory=dict)  # (task, metric) -> (function, items)
    model_identities: dict[int, dict | None] = field(default_factory=dict)  # id(LM) -> its --use_cache identity
    resources_checked: bool = False  # the hub resources of all the call's tasks (tasks/preflight.py)

    @property
    def python_api(self) -> bool:
        """The model was passed to simple_evaluate as an object, not named with --model and --model_args."""
        model = self.arguments.get("model")
        return model is not None and not isinstance(model, str)

    def model_args(self) -> dict:
        """The call's ``model_args`` as a dict (lm-eval takes a "k=v,..." string or a dict)."""
        return model_args_of(self.arguments)

    def evaluated_model(self) -> EvaluatedModel | None:
        """The model this call evaluates, or None before it is built (or outside a call)."""
        from lm_eval.api.model import LM, CachingLM

        lm = self.lm.lm if isinstance(self.lm, CachingLM) else self.lm
        return EvaluatedModel(lm, python_api=self.python_api) if isinstance(lm, LM) else None

    def note_scoring(self, task_name: str, summary: dict) -> None:
        """Add one serving round's engine record to the task's."""
        self.scoring[task_name] = merge_scoring(self.scoring.get(task_name), summary)

    def forget_task(self, task_name: str) -> None:
        """A new build of the task: nothing of it scored yet."""
        self.scoring.pop(task_name, None)
        self.served_tokenizer.pop(task_name, None)


OUTSIDE = Evaluation()
_CURRENT: contextvars.ContextVar[Evaluation | None] = contextvars.ContextVar("lm_eval_longctx_evaluation", default=None)


def current() -> Evaluation:
    """The innermost ``simple_evaluate`` call running, else ``OUTSIDE``."""
    return _CURRENT.get() or OUTSIDE


def in_progress() -> Evaluation | None:
    """The innermost ``simple_evaluate`` call running, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def running(evaluation: Evaluation):
    """``evaluation`` is the current one inside this block."""
    token = _CURRENT.set(evaluation)
    try:
        yield evaluation
    finally:
        _CURRENT.reset(token)


def model_args_of(arguments: dict) -> dict:
    """``arguments["model_args"]`` as a dict (lm-eval takes a "k=v,..." string or a dict)."""
    from lm_eval.utils import simple_parse_args_string

    model_args = arguments.get("model_args")
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    return dict(model_args) if isinstance(model_args, dict) else {}
