"""Tiny random models of every family the engine declares (``engine/support.py``), built from their config
classes in the test (never downloaded): 2 layers, hidden 64, float32, a 128-token vocabulary.

Sliding windows are 32 tokens and context-extended RoPE switches at 64 positions, so sequences of a few
hundred tokens cross both."""

from __future__ import annotations

import copy
import logging
import warnings

import torch

VOCAB = 128
WINDOW = 32  # sliding-window attention
ORIGINAL_POSITIONS = 64  # where dynamic NTK and LongRoPE switch to their long-context frequencies

_TOKENS = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
_ATT = dict(
    _TOKENS,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=4096,
)
_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_n_groups=1)
_LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 8,
    "long_factor": [4.0] * 8,
    "rope_theta": 10000.0,
    "original_max_position_embeddings": ORIGINAL_POSITIONS,
}

# name -> (model_type, config arguments)
FAMILY_CONFIGS: dict[str, tuple[str, dict]] = {
    "llama": ("llama", _ATT),
    "llama_rope_linear": (
        "llama",
        dict(_ATT, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
    ),
    "llama_rope_yarn": (
        "llama",
        dict(
            _ATT,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 4.0,
                "rope_theta": 10000.0,
                "original_max_position_embeddings": 1024,
            },
        ),
    ),
    "llama_rope_llama3": (
        "llama",
        dict(
            _ATT,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 1024,
                "rope_theta": 500000.0,
            },
        ),
    ),
    "llama_rope_dynamic": (
        "llama",
        dict(
            _ATT,
            max_position_embeddings=ORIGINAL_POSITIONS,
            rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
        ),
    ),
    "phi3_longrope": (
        "phi3",
        dict(
            _ATT,
            max_position_embeddings=4 * ORIGINAL_POSITIONS,
            original_max_position_embeddings=ORIGINAL_POSITIONS,
            rope_parameters=_LONGROPE,
        ),
    ),
    "phimoe_longrope": (
        "phimoe",
        dict(
            _ATT,
            num_local_experts=4,
            num_experts_per_tok=2,
            max_position_embeddings=4 * ORIGINAL_POSITIONS,
            original_max_position_embeddings=ORIGINAL_POSITIONS,
            rope_parameters=dict(_LONGROPE, short_mscale=1.0, long_mscale=1.2),
        ),
    ),
    "mistral": ("mistral", dict(_ATT, sliding_window=WINDOW)),
    "qwen2": ("qwen2", dict(_ATT, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
    "qwen3": ("qwen3", dict(_ATT, head_dim=16)),
    "qwen2_moe": (
        "qwen2_moe",
        dict(_ATT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32),
    ),
    "qwen3_moe": ("qwen3_moe", dict(_ATT, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "mixtral": ("mixtral", dict(_ATT, num_local_experts=4, num_experts_per_tok=2)),
    "phi3": ("phi3", _ATT),
    "gemma": ("gemma", dict(_ATT, head_dim=16)),
    "gemma2": ("gemma2", dict(_ATT, head_dim=16, sliding_window=WINDOW, final_logit_softcapping=5.0)),
    "gemma3_text": ("gemma3_text", dict(_ATT, head_dim=16, sliding_window=WINDOW, final_logit_softcapping=5.0)),
    "cohere": ("cohere", dict(_ATT, logit_scale=0.5)),
    "cohere2": ("cohere2", dict(_ATT, logit_scale=0.5, sliding_window=WINDOW)),
    "granite": ("granite", dict(_ATT, logits_scaling=4.0)),
    "olmo": ("olmo", _ATT),
    "olmo2": ("olmo2", _ATT),
    "starcoder2": ("starcoder2", dict(_ATT, sliding_window=WINDOW)),
    "stablelm": ("stablelm", _ATT),
    "smollm3": ("smollm3", _ATT),
    "exaone4": ("exaone4", dict(_ATT, sliding_window=WINDOW)),
    "deepseek_v3": (
        "deepseek_v3",
        dict(
            _ATT,
            num_key_value_heads=4,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            kv_lora_rank=16,
            q_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            n_group=1,
            topk_group=1,
        ),
    ),
    "gpt2": ("gpt2", dict(_TOKENS, n_embd=64, n_layer=2, n_head=4, n_positions=4096)),
    "gpt_bigcode": ("gpt_bigcode", dict(_TOKENS, n_embd=64, n_layer=2, n_head=4, n_positions=4096)),
    "gptj": ("gptj", dict(_TOKENS, n_embd=64, n_layer=2, n_head=4, n_positions=4096, rotary_dim=8)),
    "gpt_neox": (
        "gpt_neox",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=4096,
        ),
    ),
    "falcon_rotary": (
        "falcon",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            new_decoder_architecture=True,
            num_kv_heads=2,
            max_position_embeddings=4096,
        ),
    ),
    "falcon_alibi": (
        "falcon",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            alibi=True,
            max_position_embeddings=4096,
        ),
    ),
    "bloom": ("bloom", dict(_TOKENS, hidden_size=64, n_layer=2, n_head=4)),
    "mpt": ("mpt", dict(_TOKENS, d_model=64, n_layers=2, n_heads=4, max_seq_len=4096)),
    "opt": (
        "opt",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=128,
            max_position_embeddings=4096,
            word_embed_proj_dim=64,
        ),
    ),
    "mamba": ("mamba", dict(_TOKENS, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2)),
    "falcon_mamba": ("falcon_mamba", dict(_TOKENS, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2)),
    "mamba2": (
        "mamba2",
        dict(
            _TOKENS, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2, num_heads=8, head_dim=16, n_groups=1
        ),
    ),
    "rwkv": (
        "rwkv",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            attention_hidden_size=64,
            intermediate_size=128,
            context_length=4096,
        ),
    ),
    "jamba": (
        "jamba",
        dict(
            _ATT,
            num_experts=2,
            num_experts_per_tok=1,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=8,
            mamba_expand=2,
            mamba_dt_rank=8,
            use_mamba_kernels=False,
        ),
    ),
    "zamba2": (
        "zamba2",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=128,
            mamba_d_state=8,
            mamba_headdim=16,
            n_mamba_heads=8,
            layers_block_type=["mamba", "hybrid"],
            hybrid_layer_ids=[1],
            max_position_embeddings=4096,
        ),
    ),
    "falcon_h1": (
        "falcon_h1",
        dict(_ATT, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1),
    ),
    "bamba": ("bamba", dict(_ATT, attn_layer_indices=[1], **_MAMBA2)),
    "granitemoehybrid": (
        "granitemoehybrid",
        dict(_ATT, layer_types=["mamba", "attention"], num_local_experts=2, num_experts_per_tok=1, **_MAMBA2),
    ),
    "nemotron_h": (
        "nemotron_h",
        dict(_ATT, hybrid_override_pattern="M*", mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=8, n_groups=1),
    ),
    "lfm2": ("lfm2", dict(_ATT, layer_types=["conv", "full_attention"], block_ff_dim=128)),
    "qwen3_next": (
        "qwen3_next",
        dict(
            _ATT,
            head_dim=16,
            layer_types=["linear_attention", "full_attention"],
            num_experts=2,
            num_experts_per_tok=1,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
    ),
    "recurrent_gemma": (
        "recurrent_gemma",
        dict(
            _TOKENS,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            attention_window_size=WINDOW,
            lru_width=64,
        ),
    ),
    "xlstm": ("xlstm", dict(_TOKENS, hidden_size=64, num_hidden_layers=2, num_heads=4)),
}

LENGTH_DEPENDENT_ROPE = {"llama_rope_dynamic", "phi3_longrope", "phimoe_longrope"}

_PRISTINE: dict[tuple[str, int], torch.nn.Module] = {}


def _for_this_transformers(model_type: str, kwargs: dict) -> dict:
    """transformers 4.x names ``rope_parameters`` ``rope_scaling`` and keeps ``rope_theta`` beside it."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5 and "rope_parameters" in kwargs:
        rope = dict(kwargs.pop("rope_parameters"))
        kwargs["rope_theta"] = rope.pop("rope_theta", 10000.0)
        if rope["rope_type"] == "longrope" and model_type == "phi3":  # its validation: `type` and the factors only
            rope = {"type": "longrope", **{k: v for k, v in rope.items() if k.endswith("_factor")}}
        kwargs["rope_scaling"] = rope
    return kwargs


def build(name: str, seed: int = 0):
    """A fresh copy of family ``name``'s tiny random model (built once per seed, then deep-copied, so every
    copy starts in the state transformers loads a model in)."""
    key = (name, seed)
    if key not in _PRISTINE:
        from transformers import AutoConfig, AutoModelForCausalLM

        model_type, kwargs = FAMILY_CONFIGS[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            level = logging.getLogger("transformers").level
            logging.getLogger("transformers").setLevel(logging.ERROR)
            try:
                try:
                    config = AutoConfig.for_model(
                        model_type, **_for_this_transformers(model_type, copy.deepcopy(kwargs))
                    )
                except ValueError as err:  # an older transformers without this family
                    import pytest

                    pytest.skip(f"model type {model_type!r} is not in this transformers: {err}")
                torch.manual_seed(seed)
                _PRISTINE[key] = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
            finally:
                logging.getLogger("transformers").setLevel(level)
    return copy.deepcopy(_PRISTINE[key])
