"""Rough memory needs of the two long-pass strategies, and what the device has free: what ``long_pass: auto``
decides by (``scoring.choose_long_pass``). Estimates from the config; ``scripts/bench_long_pass.py`` prints
them beside measured peaks."""

from __future__ import annotations

import os

import torch

from .forward import (
    HEAD_BLOCK_BYTES,
    HEAD_BLOCK_BYTES_ACCELERATOR,
    LOGPROB_BLOCK_BYTES,
    LOGPROB_BLOCK_BYTES_ACCELERATOR,
)

# auto takes the full strategy only when its estimate fits in this share of the free memory
FREE_MEMORY_SHARE = 0.85


def _first(config, *names, default=0) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return default


def config_sizes(model) -> dict:
    """The sizes the estimates use, read from the (text) config under the names transformers families use."""
    config = getattr(model, "config", None)
    text = getattr(config, "get_text_config", None)
    config = text() if callable(text) else config
    hidden = _first(config, "hidden_size", "n_embd", "d_model", default=1024)
    heads = _first(config, "num_attention_heads", "n_head", "n_heads", default=max(1, hidden // 64))
    head_dim = _first(config, "head_dim", default=max(1, hidden // heads))
    intermediate = max(
        _first(config, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", default=4 * hidden),
        _first(config, "moe_intermediate_size") * _first(config, "num_experts_per_tok", default=1),
    )
    expand = _first(config, "expand", "mamba_expand", default=2)
    return {
        "hidden": hidden,
        "heads": heads,
        "head_dim": head_dim,
        "kv_heads": _first(config, "num_key_value_heads", "num_kv_heads", default=heads),
        "layers": _first(config, "num_hidden_layers", "n_layer", "n_layers", default=32),
        "intermediate": intermediate,
        "vocab": _first(config, "vocab_size", default=32000),
        # state-space layers without fused kernels hold [tokens, expand * hidden, state] during their scan
        "ssm_state": _first(config, "state_size", "ssm_state_size", "mamba_d_state"),
        "ssm_inner": expand * hidden,
    }


def dtype_bytes(model) -> int:
    for p in model.parameters():
        if p.is_floating_point():
            return p.element_size()
    return 4


def _head_bytes(sizes: dict, device_type: str) -> int:
    """One replayed head block and the float32 log-prob block made from it."""
    head = HEAD_BLOCK_BYTES if device_type == "cpu" else HEAD_BLOCK_BYTES_ACCELERATOR
    block = LOGPROB_BLOCK_BYTES if device_type == "cpu" else LOGPROB_BLOCK_BYTES_ACCELERATOR
    return head + 2 * block + 4 * sizes["vocab"]


def full_forward_bytes(model, n_tokens: int, batch: int, device_type: str = "cpu") -> int:
    """One forward of ``batch`` sequences of ``n_tokens`` with no cache: the activations alive inside one layer
    (residual stream, attention projections, the MLP's up and gate products), the decoder output kept for the
    head, and one block of float32 logits. Attention without a mask runs in a fused kernel (no n x n scores)."""
    s, b = config_sizes(model), dtype_bytes(model)
    per_token = b * (8 * s["hidden"] + 2 * s["kv_heads"] * s["head_dim"] + 4 * s["intermediate"])
    per_token += 4 * 3 * s["ssm_inner"] * s["ssm_state"]
    total = batch * n_tokens * per_token
    if getattr(getattr(model, "config", None), "_attn_implementation", "sdpa") == "eager":
        total += batch * s["heads"] * n_tokens * n_tokens * 4
    return int(total + _head_bytes(s, device_type))


def kv_cache_bytes(model, n_tokens: int, batch: int) -> int:
    s, b = config_sizes(model), dtype_bytes(model)
    return int(batch * n_tokens * s["layers"] * 2 * s["kv_heads"] * s["head_dim"] * b)


def chunked_bytes(model, n_tokens: int, batch: int, chunk_size: int, device_type: str = "cpu") -> int:
    """The KV cache of the whole sequence, one chunk's activations, its attention scores against the cache
    (a chunk with a cache offset needs an explicit mask, so no fused kernel) and its logits."""
    s, b = config_sizes(model), dtype_bytes(model)
    chunk = min(chunk_size, n_tokens)
    activations = batch * chunk * b * (8 * s["hidden"] + 4 * s["intermediate"])
    scores = batch * s["heads"] * chunk * n_tokens * 4 + chunk * n_tokens
    logits = batch * chunk * s["vocab"] * (b + 4)
    return int(kv_cache_bytes(model, n_tokens, batch) + activations + scores + logits + _head_bytes(s, device_type))


def free_bytes(device: torch.device) -> int | None:
    """Memory the device can still give: CUDA's free memory plus what PyTorch holds unused; the CPU's available
    memory (Linux /proc/meminfo, else sysconf); None when it cannot be told."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
