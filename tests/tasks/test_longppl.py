"""LongPPL with a key-span cache that cannot be used: the documents are judged, one warning, no lost run."""

from __future__ import annotations

import logging
import os

import pytest

from tests.harness_utils import TASK_DIR, write_docs

TASK = "longppl_govreport"


@pytest.mark.integration
@pytest.mark.parametrize("broken", ["regular file", "symlink loop"])
def test_a_cache_that_cannot_be_used_costs_one_warning_not_the_run(
    model_dirs, corpus_texts, tmp_path, monkeypatch, caplog, broken
):
    from lm_eval.tasks import TaskManager

    if broken == "regular file":
        (tmp_path / "cache").write_text("not a folder")
    else:
        os.symlink(tmp_path / "loop_b", tmp_path / "cache")
        os.symlink(tmp_path / "cache", tmp_path / "loop_b")
    monkeypatch.setenv("LM_EVAL_LONGCTX_CACHE", str(tmp_path / "cache"))
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:2]])
    metadata = {"data_files": docs, "evaluator": model_dirs["b"], "trunc_len": 40, "sliding_window": 16}
    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=metadata)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        task = tm.load([TASK])["tasks"][TASK]
        task.build_all_requests(rank=0, world_size=1)
    assert sorted(task._judgements) == [0, 1]
    cache_warnings = [r.getMessage() for r in caplog.records if "key-span cache" in r.getMessage()]
    assert len(cache_warnings) == 1 and "the run continues without the cache" in cache_warnings[0]
