"""How a task is sized (``tasks/sizing.py``): which value each sized setting takes, from the user, max_seq_lengths, a
preset or the evaluated model's window, and the record of where it came from."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from lm_eval_longctx.settings import Declaration, Setting, choice, integer, integer_list
from lm_eval_longctx.tasks import sizing

DECLARATION = Declaration(
    "test_sizing_owner",
    [
        Setting("preset", choice("model", "ci", "paper"), "model", "the preset"),
        Setting("max_seq_lengths", integer_list(1, 10**6), None, "lengths", optional=True),
        Setting("doc_tokens", integer(1, 10**6), None, "document tokens", optional=True),
        Setting("num_docs", integer(1, 100), 50, "documents"),
    ],
    metadata_keys=False,
    presets={"ci": {"max_seq_lengths": [256, 1024], "num_docs": 10}, "paper": {"doc_tokens": 8192}},
)
PAPER = DECLARATION.presets["paper"]


def for_lengths(lengths):
    return {"doc_tokens": max(lengths) - 50}


def for_window(window):
    return {"doc_tokens": window - 50}


def sized(metadata, window=None):
    s = DECLARATION.parse(metadata)
    return s, sizing.size(s, window, for_lengths, for_window, PAPER)


def test_the_default_sizes_from_the_window_and_records_it():
    s, out = sized({}, sizing.Window(4096, {"tokens": 8192}, 4096))
    assert s["doc_tokens"] == 4046 and s.sources["doc_tokens"] == sizing.WINDOW_SOURCE
    rec = out.record()
    assert rec["preset"] == "model" and rec["lengths"] is None and rec["lengths_from"] == sizing.WINDOW_SOURCE
    assert rec["window"] == {"tokens": 4096, "claimed": {"tokens": 8192}, "max_length": 4096}
    assert rec["settings_from"] == {"doc_tokens": sizing.WINDOW_SOURCE} and rec["notes"] == []


def test_without_a_window_the_papers_values_and_a_note():
    s, out = sized({})
    assert s["doc_tokens"] == 8192 and out.lengths_from == sizing.PAPER_SOURCE
    assert "window is not known" in out.notes[0]
    s, out = sized({"preset": "paper"}, sizing.Window(4096))
    assert s["doc_tokens"] == 8192 and not out.notes  # the paper preset: its values, whatever the window


def test_max_seq_lengths_given_maps_to_the_settings_and_beats_a_presets_own_value():
    s, out = sized({"max_seq_lengths": [2048, 512]}, sizing.Window(4096))
    assert (
        s["doc_tokens"] == 1998 and out.lengths == [512, 2048] and out.settings_from["doc_tokens"] == "max_seq_lengths"
    )
    s, _ = sized({"preset": "paper", "max_seq_lengths": [2048]}, sizing.Window(4096))
    assert s["doc_tokens"] == 1998  # an explicit key beside a preset wins


def test_a_setting_given_wins_over_the_lengths_and_the_record_says_which():
    s, out = sized({"max_seq_lengths": [2048], "doc_tokens": 300}, sizing.Window(4096))
    assert s["doc_tokens"] == 300 and out.settings_from["doc_tokens"] == "given"
    assert out.notes == ["doc_tokens = 300 (given) wins over 1998 from max_seq_lengths"]


def test_a_presets_lengths_stop_at_the_window_given_lengths_do_not():
    s, out = sized({"preset": "ci"}, sizing.Window(512))
    assert out.lengths == [256] and s["doc_tokens"] == 206 and s["num_docs"] == 10
    assert out.settings_from["doc_tokens"] == "max_seq_lengths of preset ci" and "cut to [256]" in out.notes[0]
    assert out.dropped == out.notes[:1] and out.record()["dropped"] == out.dropped
    s, out = sized({"preset": "ci"}, sizing.Window(100))
    assert out.lengths == [100]  # none fits: the window itself
    s, out = sized({"max_seq_lengths": [1024]}, sizing.Window(512))
    assert out.lengths == [1024] and s["doc_tokens"] == 974  # the user's lengths: beyond the window is their call


def test_the_window_is_the_smaller_of_the_claim_and_the_served_maximum():
    claimed = SimpleNamespace(tokens=8192, record=lambda: {"tokens": 8192})
    model = SimpleNamespace(claimed_window=lambda: claimed, max_length=4096, tokenizer=object())
    assert sizing.model_window(model, {}) == sizing.Window(4096, {"tokens": 8192}, 4096)
    model = SimpleNamespace(claimed_window=lambda: None, max_length=2048, tokenizer=object())
    assert sizing.model_window(model, {}).tokens == 2048
    assert sizing.model_window(None, {}) is None
    assert sizing.model_window(None, {"max_length": 300}).tokens == 300


def test_the_window_of_a_config_read_before_the_model_loads(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(max_position_embeddings=777).save_pretrained(tmp_path)
    window = sizing.model_window(None, {"pretrained": str(tmp_path)})
    assert window.tokens == 777 and window.claimed["source"] == "max_position_embeddings"
    assert sizing.model_window(None, {"pretrained": str(tmp_path / "absent")}) is None


@pytest.mark.parametrize(("tokens", "ladder"), [(8192, [1024, 2048, 4096, 8192]), (5, [1, 2, 5]), (1, [1])])
def test_the_window_ladder(tokens, ladder):
    assert sizing.window_ladder(tokens) == ladder


def test_nothing_is_mapped_when_every_setting_it_would_size_is_given():
    def refuses(lengths):
        raise AssertionError("mapped although every sized setting is given")

    s = DECLARATION.parse({"max_seq_lengths": [10], "doc_tokens": 300})
    out = sizing.size(s, sizing.Window(4096), refuses, refuses, PAPER, knobs=("doc_tokens",))
    assert s["doc_tokens"] == 300 and out.settings_from["doc_tokens"] == "given"
    assert out.notes == ["doc_tokens given: wins over max_seq_lengths"] and out.lengths_from == "max_seq_lengths"


def test_a_length_asked_for_and_not_run_is_one_warning_line(caplog):
    _, out = sized({"preset": "ci"}, sizing.Window(512))
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        sizing.say_dropped("some_task", out)
        sizing.say_dropped("some_task", out)  # said once per evaluation
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"some_task runs fewer lengths than asked: {out.dropped[0]}"] and "cut to [256]" in said[0]
    _, kept = sized({"preset": "ci"}, sizing.Window(4096))
    assert kept.dropped == []
