"""A learned position table bounds every pass: a sequence past it is refused with the table's size, never an
IndexError from the model's embedding."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

from lm_eval_longctx.engine import generation, scoring, support

VOCAB = 64
TABLE = 256


def gpt2(positions: int = TABLE):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=positions)
    return GPT2LMHeadModel(config).eval()


def opt(positions: int = TABLE):
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, ffn_dim=64,
        max_position_embeddings=positions, word_embed_proj_dim=32,
    )  # fmt: skip
    return OPTForCausalLM(config).eval()


def ids_for(n: int) -> torch.Tensor:
    return torch.arange(n) % (VOCAB - 3) + 3


@pytest.mark.parametrize("build", [gpt2, opt])
def test_the_table_size_is_read_from_the_model(build):
    assert support.learned_position_table(build()) == TABLE


def test_rotary_models_have_no_table():
    from tests.tiny import tiny_llama

    assert support.learned_position_table(tiny_llama()) is None


@pytest.mark.parametrize(
    "score",
    [
        lambda m: scoring.score_long(m, ids_for(TABLE + 1), long_pass="full"),
        lambda m: scoring.score_long(m, ids_for(TABLE + 1), long_pass="chunked", chunk_size=64),
        lambda m: scoring.score_sequence_ends(m, [ids_for(300)], 4),
        lambda m: scoring.score_continuations(m, ids_for(250), [ids_for(10)]),
        lambda m: generation.generate(m, [ids_for(250)], generation.GenerationSettings(10, (2,), 0)),
    ],
    ids=["full", "chunked", "separate", "continuations", "generation"],
)
def test_a_sequence_past_the_table_is_refused_naming_it(score):
    with pytest.raises(scoring.ScoringError, match=r"model type 'gpt2' has a learned table of 256 positions"):
        score(gpt2())


def test_a_sequence_that_fills_the_table_is_scored():
    out = scoring.score_long(gpt2(), ids_for(TABLE), long_pass="full")
    assert torch.isfinite(torch.as_tensor(out.logprob[1:])).all()
