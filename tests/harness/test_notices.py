"""harness/notices.py: inside a call, lm-eval's warning on differing metric counts is replaced for the suite's own
tasks (only theirs) by one line, transformers' over-length tokenizer warning by one line, and lm-eval's chat-template
notice is kept with a line on what the chat options do here; outside the block nothing is filtered."""

from __future__ import annotations

import logging

from lm_eval_longctx import errors
from lm_eval_longctx.harness import notices
from lm_eval_longctx.harness.run_state import Evaluation, running

COUNTS = (
    "[{}] Metrics were not scored on the same number of documents (acc@1,none=5, acc@2,none=4). Each metric was "
    "aggregated over only the documents that produced it"
)
TOKENS = (
    "Token indices sequence length is longer than the specified maximum sequence length for this model (36757 > "
    "8192). Running this sequence through the model will result in indexing errors"
)
CHAT = "pretrained=m appears to be an\n   instruct or chat variant but chat template is not applied."


def emit_all() -> None:
    logging.getLogger(notices.COUNTS_LOGGER).warning(COUNTS.format("forgetting_curve"))
    logging.getLogger(notices.COUNTS_LOGGER).warning(COUNTS.format("forgetting_curve"))
    logging.getLogger(notices.COUNTS_LOGGER).warning(COUNTS.format("someone_elses_task"))
    logging.getLogger(notices.TOKENS_LOGGER).warning(TOKENS)
    logging.getLogger(notices.TOKENS_LOGGER).warning(TOKENS)
    logging.getLogger(notices.CHAT_LOGGER).warning(CHAT)


def shown(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_expected_warnings_become_one_line_each_for_the_suites_tasks_only(caplog):
    run = Evaluation()
    run.note_scoring("forgetting_curve", {"strategy": "x"})
    with caplog.at_level(logging.WARNING), running(run), errors.new_evaluation(), notices.expected_notices():
        emit_all()
    said = shown(caplog)
    assert said == [
        notices.COUNTS_NOTE.format(task="forgetting_curve"),
        COUNTS.format("someone_elses_task"),
        notices.TOKENS_NOTE,
        notices.CHAT_NOTE,
        CHAT,
    ]
    # the filters are gone after the block
    assert all(not logging.getLogger(name).filters for name, _ in notices.FILTERS)


def test_outside_a_call_every_warning_passes(caplog):
    with caplog.at_level(logging.WARNING):
        emit_all()
    assert len(shown(caplog)) == 6
