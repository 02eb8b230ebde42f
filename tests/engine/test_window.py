"""The window a config claims, from every field that states one, with what the others say."""

from __future__ import annotations

import pytest
from transformers import GPT2Config, LlamaConfig, MistralConfig

from lm_eval_longctx.engine.window import WindowError, WindowFieldError, claimed_window


def test_max_position_embeddings_of_a_transformers_config():
    w = claimed_window(LlamaConfig(max_position_embeddings=8192))
    assert (w.tokens, w.source) == (8192, "max_position_embeddings") and w.notes == ()


def test_gpt2_names_its_positions_n_positions():
    w = claimed_window(GPT2Config(n_positions=1024))
    assert (w.tokens, w.source) == (1024, "n_positions")


def test_a_nested_text_config_is_read():
    w = claimed_window({"model_type": "llava", "text_config": {"max_position_embeddings": 4096}})
    assert (w.tokens, w.source) == (4096, "text_config.max_position_embeddings")


@pytest.mark.parametrize("field", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("rope_type", ["linear", "dynamic"])
def test_rope_scaling_without_an_original_window_extends_the_position_field(field, rope_type):
    w = claimed_window({"max_position_embeddings": 8192, field: {"rope_type": rope_type, "factor": 4.0}})
    assert (w.tokens, w.source) == (32768, field)
    assert w.fields["max_position_embeddings"] == 8192
    assert w.notes == (
        f"{field}: {rope_type} RoPE scaling x4 of an original window of 8192 (its position field) = 32768",
    )


def test_transformers_5_loads_rope_scaling_as_rope_parameters():
    w = claimed_window(LlamaConfig(max_position_embeddings=8192, rope_scaling={"rope_type": "linear", "factor": 4.0}))
    assert w.tokens == 32768 and w.source.startswith("rope_")


def test_yarn_names_its_original_window():
    cfg = {
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    }
    w = claimed_window(cfg)
    assert (w.tokens, w.source) == (131072, "rope_scaling")
    assert "original window of 32768 (original_max_position_embeddings) = 131072" in w.notes[0]


def test_llama3_scaling_below_the_position_field_leaves_it_the_claim():
    cfg = {
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    }
    w = claimed_window(cfg)
    assert (w.tokens, w.source) == (131072, "max_position_embeddings")
    assert "llama3 RoPE scaling x8 of an original window of 8192" in w.notes[0]


def test_longrope_states_its_original_window():
    cfg = {
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "type": "longrope", "short_factor": [1.0], "long_factor": [4.0], "original_max_position_embeddings": 4096,
        },
    }  # fmt: skip
    w = claimed_window(cfg)
    assert (w.tokens, w.source) == (131072, "max_position_embeddings")
    assert w.notes == ("rope_scaling: longrope RoPE scaling of an original window of 4096",)


def test_rope_per_layer_type_takes_the_largest_extension():
    cfg = {
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0},
            "sliding_attention": {"rope_type": "default"},
        },
        "sliding_window": 1024,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    }
    w = claimed_window(cfg)
    assert (w.tokens, w.source) == (262144, "rope_parameters.full_attention")
    assert "5 of 6 layers attend within a sliding window of 1024 tokens" in w.notes
    assert w.fields["sliding_window"] == 1024


def test_a_sliding_window_is_stated_not_taken_as_the_claim():
    w = claimed_window(MistralConfig(max_position_embeddings=32768, sliding_window=4096))
    assert w.tokens == 32768 and "its layers attend within a sliding window of 4096 tokens" in w.notes


def test_window_given_overrides_and_names_what_the_config_says():
    w = claimed_window(LlamaConfig(max_position_embeddings=8192), window=16384)
    assert (w.tokens, w.source) == (16384, "--window")
    assert w.notes[0] == "the config claims 8192 (max_position_embeddings)"


def test_no_window_anywhere_is_an_error_naming_the_way_out():
    with pytest.raises(WindowError, match="give it with --window N"):
        claimed_window({"model_type": "x"})
    with pytest.raises(WindowError, match="positive number of tokens"):
        claimed_window({"max_position_embeddings": 8}, window=0)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"max_position_embeddings": "abc"}, "max_position_embeddings"),
        ({"max_position_embeddings": 4096.5}, "max_position_embeddings"),
        ({"text_config": {"n_positions": -3}}, "text_config.n_positions"),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear"}}, "rope_scaling"),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "foo", "factor": 2.0}}, "rope_scaling"),
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": float("inf")}},
            "rope_scaling.factor",
        ),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": -2}}, "rope_scaling"),
        (
            {"max_position_embeddings": 4096,
             "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": "x"}},
            "rope_scaling.original_max_position_embeddings",
        ),
    ],
)  # fmt: skip
def test_a_window_field_no_model_is_built_with_is_refused_by_name(config, field):
    for given in (None, 1024):  # --window does not hide a broken field
        with pytest.raises(WindowFieldError, match=f"config field {field}"):
            claimed_window(config, given)


def test_a_field_left_out_or_null_is_no_claim_not_an_error():
    assert claimed_window({"max_position_embeddings": None, "n_positions": 512}).tokens == 512
    with pytest.raises(WindowError, match="states no window") as caught:
        claimed_window({"max_position_embeddings": None})
    assert not isinstance(caught.value, WindowFieldError)


def test_the_window_readers_examples_run():
    import doctest

    from lm_eval_longctx.engine import window

    assert doctest.testmod(window, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
