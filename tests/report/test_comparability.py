"""What must match for two runs' numbers of a task to be compared (``report/comparability.py``): the run's chat
options count only for a task whose prompts they reached."""

from __future__ import annotations

from lm_eval_longctx.report import comparability


def results(task: str, record: dict, chat: str | None) -> dict:
    data = {"configs": {task: {"metadata": {"longctx_settings": record}}}, "versions": {task: 1}}
    if chat:
        data["chat_template_sha"] = chat
    return data


def test_chat_options_left_out_of_raw_documents_do_not_make_a_difference():
    raw = {"doc_tokens": 8143, "runtime": {"prompt_format": {"given": ["--apply_chat_template"], "applied": False}}}
    plain = {"doc_tokens": 8143, "runtime": {}}
    with_chat = comparability.signature(results("retrieval_gain", raw, "abc"), "retrieval_gain")
    other_chat = comparability.signature(results("retrieval_gain", raw, "xyz"), "retrieval_gain")
    without = comparability.signature(results("retrieval_gain", plain, None), "retrieval_gain")
    assert comparability.differences(with_chat, other_chat) == []  # two templates, neither reached the documents
    assert comparability.differences(with_chat, without) == []
    # a task whose prompts took the template: the run's template is part of what its numbers mean
    prompt = {"num_lines": [40], "prompt_format": {"apply_chat_template": True}}
    applied = comparability.signature(results("longeval_lines_acc", prompt, "abc"), "longeval_lines_acc")
    assert applied["run.chat_template_sha"] == "abc"
