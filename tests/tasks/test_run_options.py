"""lm-eval's chat options and the tasks that score raw documents (``tasks/run_options.py``): the documents stay raw,
as in lm-eval's own loglikelihood_rolling tasks, said once per task and recorded."""

from __future__ import annotations

import logging

from lm_eval_longctx.tasks import run_options


def test_chat_options_are_not_applied_to_raw_documents_said_once_and_recorded(caplog, monkeypatch):
    monkeypatch.setattr(run_options, "_NOTED", set())
    assert run_options.prompt_options_not_applied("retrieval_gain", False, None) is None
    assert run_options.prompt_options_not_applied("retrieval_gain", False, "") is None  # an empty one changes nothing
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        for _ in range(3):
            record = run_options.prompt_options_not_applied("retrieval_gain", True, "Be brief.")
    assert record == {
        "given": ["--apply_chat_template", "--system_instruction"],
        "applied": False,
        "why": run_options.RAW_DOCUMENTS_WHY,
    }
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(
        "retrieval_gain: --apply_chat_template and --system_instruction not applied to its documents, which are "
        "scored raw (recorded in the results)"
    )
