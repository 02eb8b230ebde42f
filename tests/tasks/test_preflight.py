"""Every hub resource a run of the suite fetches is checked before any is loaded, and all that is missing is named
in one message."""

import pytest

from lm_eval_longctx import errors, settings
from lm_eval_longctx.tasks import base, preflight

CLASSES = base.suite_tasks()


@pytest.fixture(autouse=True)
def model_args_keys(monkeypatch):
    """``pretrained`` comes from --model_args, which the harness accepts as a known metadata key."""
    monkeypatch.setitem(settings.EXTERNAL_KEYS, "model_args", frozenset({"pretrained"}))


def test_what_lm_eval_was_asked_for_expands_to_our_tasks():
    assert set(preflight.our_tasks(["longctx"], CLASSES)) == {
        "forgetting_curve",
        "longeval_lines_acc",
        "longeval_lines_ppl",
        "longppl_govreport",
        "retrieval_gain",
        "retrieval_gain_map",
    }
    assert preflight.our_tasks(["arc_easy", "longeval_lines", {"task": "retrieval_gain"}], CLASSES) == [
        "longeval_lines_acc",
        "longeval_lines_ppl",
        "retrieval_gain",
    ]
    assert preflight.our_tasks(None, CLASSES) == []


def _names(task, metadata):
    """The hub resources the task class declares for these settings."""
    settings = CLASSES[task].resolve_settings(metadata)
    return [(r.kind, r.name) for r in CLASSES[task].hub_resources(settings)]


def test_resources_follow_the_settings(tmp_path):
    assert _names("longppl_govreport", {}) == [
        ("dataset", "emozilla/govreport-test-tokenized"),
        ("tokenizer", "NousResearch/Llama-2-7b-hf"),
        ("evaluator", "meta-llama/Llama-3.1-8B"),
    ]
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "a"}\n')
    assert _names("longppl_govreport", {"data_files": str(docs), "evaluator": "self"}) == []
    assert _names("longppl_govreport", {"data_files": str(docs), "evaluator": str(tmp_path)}) == []  # a local folder
    assert _names("forgetting_curve", {"pretrained": "x"}) == [("dataset", "emozilla/pg19-test")]
    assert _names("longeval_lines_acc", {}) == []


def test_all_that_is_missing_is_one_message(monkeypatch):
    seen = []

    def problem(self):
        seen.append((self.kind, self.name))
        return None if self.kind == "tokenizer" else f"{self.name} is not here"

    monkeypatch.setattr(preflight.Resource, "problem", problem)
    with pytest.raises(errors.ResourceUnavailableError) as info:
        preflight.check(
            {t: CLASSES[t] for t in ["longppl_govreport", "retrieval_gain", "forgetting_curve"]}, {"pretrained": "x"}
        )
    message = str(info.value)
    assert "3 of the 4 resources" in message
    assert "the dataset 'emozilla/govreport-test-tokenized' (for longppl_govreport, retrieval_gain)" in message
    assert "the dataset 'emozilla/pg19-test' (for forgetting_curve)" in message
    assert "the evaluator 'meta-llama/Llama-3.1-8B' (for longppl_govreport)" in message
    assert "Ways out" in message
    assert len(seen) == len(set(seen)) == 4  # each resource checked once, whatever number of tasks needs it


def test_a_run_checks_the_tasks_it_was_asked_for_and_this_one(monkeypatch):
    calls = []
    monkeypatch.setattr(preflight, "check", lambda tasks, metadata: calls.append(tuple(tasks)))
    preflight.check_run("retrieval_gain", {}, ["longctx"], CLASSES)
    preflight.check_run("retrieval_gain", {}, None, CLASSES)  # outside a call: this task alone
    preflight.check_run("retrieval_gain", {}, "longeval_lines", CLASSES)  # simple_evaluate also takes one name
    assert set(calls[0]) == set(CLASSES) and calls[1] == ("retrieval_gain",)
    assert calls[2] == ("longeval_lines_acc", "longeval_lines_ppl", "retrieval_gain")
