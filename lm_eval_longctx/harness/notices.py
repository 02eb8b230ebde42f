"""Warnings the suite causes on purpose, said once in a line of ours instead of lm-eval's or transformers' alarm.

Inside a ``simple_evaluate`` call (``expected_notices``, entered by ``evaluation.evaluate``), a filter on the
logger that prints each one drops it and says once per call what it means:

* lm-eval's "Metrics were not scored on the same number of documents", for a task of this suite (one that scored
  in this call): its per-length and per-size metrics are each aggregated over the documents of that length, by
  design (docs/tasks/forgetting_curve.md, docs/tasks/longeval_lines.md);
* transformers' "Token indices sequence length is longer than the specified maximum sequence length": the suite
  tokenizes whole documents and cuts them to the lengths it tests itself, never past the model's maximum.

lm-eval's notice that an instruct model runs without its chat template passes, followed by one line on what the
chat options do to this suite's tasks.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator

from .. import errors
from .run_state import in_progress

COUNTS_LOGGER = "lm_eval.evaluator_utils"
COUNTS_MESSAGE = re.compile(r"^\[(?P<task>[^\]]+)\] Metrics were not scored on the same number of documents")
COUNTS_NOTE = (
    "lm_eval_longctx: {task}: each per-length metric is aggregated over the documents of its length, so the "
    "metrics hold different numbers of values by design (lm-eval's warning about it is left out)"
)
TOKENS_LOGGER = "transformers.tokenization_utils_base"
TOKENS_MESSAGE = "Token indices sequence length is longer than the specified maximum sequence length"
TOKENS_NOTE = (
    "lm_eval_longctx: documents are tokenized whole and cut to the lengths tested, never past the model's maximum "
    "length (transformers' warning about sequences longer than the maximum is left out)"
)
CHAT_LOGGER = "lm_eval.evaluator"
CHAT_MESSAGE = "chat template is not applied"
CHAT_NOTE = (
    "lm_eval_longctx: the suite's document tasks read raw text whatever the chat options (recorded under "
    "runtime.prompt_format); LongEval applies --apply_chat_template when given"
)


def _ours(task: str) -> bool:
    """Whether ``task`` is a task of this suite that scored in the running call."""
    run = in_progress()
    return run is not None and task in run.scoring


def _counts(record: logging.LogRecord) -> bool:
    m = COUNTS_MESSAGE.match(record.getMessage())
    if m is None or not _ours(m["task"]):
        return True
    errors.notice(COUNTS_NOTE.format(task=m["task"]))
    return False


def _tokens(record: logging.LogRecord) -> bool:
    if TOKENS_MESSAGE not in record.getMessage():
        return True
    errors.notice(TOKENS_NOTE)
    return False


def _chat(record: logging.LogRecord) -> bool:
    if CHAT_MESSAGE in " ".join(record.getMessage().split()):
        errors.notice(CHAT_NOTE)
    return True


FILTERS: tuple[tuple[str, Callable[[logging.LogRecord], bool]], ...] = (
    (COUNTS_LOGGER, _counts),
    (TOKENS_LOGGER, _tokens),
    (CHAT_LOGGER, _chat),
)


@contextlib.contextmanager
def expected_notices() -> Iterator[None]:
    """The filters above on their loggers while the block runs (a simple_evaluate call)."""
    added = []
    try:
        for name, fn in FILTERS:
            logger = logging.getLogger(name)
            logger.addFilter(fn)
            added.append((logger, fn))
        yield
    finally:
        for logger, fn in added:
            logger.removeFilter(fn)
