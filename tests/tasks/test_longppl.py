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


# ------------------------------------------------------------------ sizing: max_seq_lengths, the window, presets


def test_lengths_map_to_documents_of_half_to_whole_and_k_a_quarter():
    from lm_eval_longctx.tasks import declarations, longppl

    # L = 32768 is the paper's selection, K and d, with the documents cut at L tokens of the evaluated model
    paper = declarations.LONGPPL.presets["paper"]
    assert longppl.settings_for_lengths([4096, 32768]) == {
        "cut_tokens": 32768,
        **{k: paper[k] for k in ("min_tokens", "max_tokens", "trunc_len", "sliding_window")},
    }
    assert longppl.settings_for_lengths([8192]) == {
        "cut_tokens": 8192,
        "min_tokens": 4096,
        "max_tokens": 8191,
        "trunc_len": 2048,
        "sliding_window": 512,
    }
    # beyond 32k: the paper's K and its shortest documents, up to L
    assert longppl.settings_for_lengths([131072])["min_tokens"] == 16384
    assert longppl.settings_for_lengths([131072])["trunc_len"] == 4096


def test_a_k_not_below_the_documents_length_is_refused_when_parsed():
    from lm_eval_longctx.settings import SettingsError
    from lm_eval_longctx.tasks import longppl

    with pytest.raises(SettingsError, match="trunc_len = 4096 is not below the documents' length 2048"):
        longppl.resolve_settings({"max_seq_lengths": [1024, 2048], "trunc_len": 4096})
    with pytest.raises(SettingsError, match="trunc_len = 600 is not below the documents' length 500"):
        longppl.resolve_settings({"cut_tokens": 500, "trunc_len": 600})
    assert longppl.resolve_settings({"max_seq_lengths": [8192], "trunc_len": 4096})["trunc_len"] == 4096


def test_the_ci_preset_judges_itself_on_the_embedded_corpus_unless_told_otherwise(tmp_path):
    from lm_eval_longctx.settings import SettingsError
    from lm_eval_longctx.tasks import longppl

    s = longppl.resolve_settings({"preset": "ci"})
    assert s["key_source"] == "self" and s["embedded_corpus"] and s["num_docs"] == 10
    assert s.sources["evaluator"] == "preset ci"
    s = longppl.resolve_settings({"preset": "ci", "evaluator": str(tmp_path), "data_files": "docs.jsonl"})
    assert s["key_source"] == "evaluator" and not s["embedded_corpus"]  # given settings win over the preset's
    assert s.sources["embedded_corpus"] == "data_files given, over preset ci"
    with pytest.raises(SettingsError, match="embedded_corpus and data_files both name the documents"):
        longppl.resolve_settings({"embedded_corpus": True, "data_files": "docs.jsonl"})


@pytest.mark.integration
def test_the_papers_documents_on_a_shorter_window_are_refused_before_the_model_loads(monkeypatch, model_dirs):
    from lm_eval_longctx.settings import SettingsError
    from tests.harness_utils import refuse_model_loading, run_task

    refuse_model_loading(monkeypatch)
    with pytest.raises(
        SettingsError, match=r"at least 16384 tokens .*beyond the model's window of 4096.*default preset"
    ):
        run_task(TASK, model_dirs["a"], {"preset": "paper", "evaluator": "self"})
