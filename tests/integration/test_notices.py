"""A shortfall of documents is said once, by the task that has it, and only when the run would use more documents
than there are (not under a --limit the documents cover)."""

from __future__ import annotations

import contextvars
import logging

import pytest

from lm_eval_longctx import errors
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration
MD = {"doc_tokens": 200, "query_tokens": 8, "answer_tokens": 6}


def shortfall_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "documents match the selection" in r.getMessage()]


def test_a_shortfall_is_said_once_with_the_task_name_and_not_under_a_covered_limit(
    model_dirs, corpus_texts, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(errors, "_SAID", contextvars.ContextVar("said", default=None))  # nothing said yet
    docs = write_docs(tmp_path / "docs.jsonl", corpus_texts[:3])
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        run_task("retrieval_gain", model_dirs["a"], {"data_files": docs, **MD}, limit=2)
    assert shortfall_lines(caplog) == []
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        run_task("retrieval_gain", model_dirs["a"], {"data_files": docs, **MD})
    assert shortfall_lines(caplog) == [
        "retrieval_gain: only 3 documents match the selection (num_docs asks for 50); the run evaluates all 3"
    ]
