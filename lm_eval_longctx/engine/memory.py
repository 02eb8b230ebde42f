"""Memory a forward needs, counted from the config and the attention kernel it runs (``attention.py``), and what the
device has free: what the plans are chosen by (``plans.py``). ``scripts/bench_long_pass.py`` prints the counts
beside measured peaks."""

from __future__ import annotations

import os

import torch

# Logits are turned into float32 log-probs a block of rows at a time, the block about this many bytes, so no
# [sequence x vocabulary] tensor exists; CPU blocks stay under glibc's mmap threshold (reused, not page-faulted
# in afresh), GPU blocks are larger because there a block costs kernel launches (docs/architecture.md).
LOGPROB_BLOCK_BYTES = 16 * 2**20
LOGPROB_BLOCK_BYTES_ACCELERATOR = 256 * 2**20
# Rows of the output head replayed at once (their logits, as float32, about this many bytes): on a CPU larger than
# a log-prob block, because small head matmuls are slower per row (docs/architecture.md)
HEAD_BLOCK_BYTES = 64 * 2**20
HEAD_BLOCK_BYTES_ACCELERATOR = 256 * 2**20
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


def compute_dtype(model) -> torch.dtype:
    """The dtype of the model's first floating-point weight: what its activations, scores and masks are in."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def dtype_bytes(model) -> int:
    return compute_dtype(model).itemsize


def activation_bytes_per_token(model) -> int:
    """Bytes per token alive at the peak of one decoder layer of a forward without grad: the layer's input, the
    residual, the normed input and the embedding output, the MLP's three intermediate products (gate, up and their
    product), the key/value projections; state-space layers without fused kernels add their [expand x hidden x
    state] scan in float32."""
    s, b = config_sizes(model), dtype_bytes(model)
    per_token = b * (3 * s["intermediate"] + 4 * s["hidden"] + 2 * s["kv_heads"] * s["head_dim"])
    return int(per_token + 4 * 3 * s["ssm_inner"] * s["ssm_state"])


def logprob_block_bytes(model, rows: int, device_type: str) -> int:
    """The float32 blocks the log-softmax makes of ``rows`` rows of logits: the exponentials, and the float32 copy of
    half-precision logits."""
    s, b = config_sizes(model), dtype_bytes(model)
    block = LOGPROB_BLOCK_BYTES if device_type == "cpu" else LOGPROB_BLOCK_BYTES_ACCELERATOR
    block_rows = min(max(rows, 1), max(1, block // (4 * s["vocab"])))
    return int(block_rows * s["vocab"] * 4 * (1 if b == 4 else 2))


def head_bytes(model, batch: int, kept_tokens: int, device_type: str) -> int:
    """The output head replayed on ``kept_tokens`` hidden states of ``batch`` sequences: those states, one head block
    of logits in the model's dtype, and the log-softmax's float32 blocks."""
    s, b = config_sizes(model), dtype_bytes(model)
    head = HEAD_BLOCK_BYTES if device_type == "cpu" else HEAD_BLOCK_BYTES_ACCELERATOR
    rows = min(max(kept_tokens, 1), max(1, head // (4 * s["vocab"] * max(1, batch))))
    logits = max(1, batch) * rows * s["vocab"] * b
    # one more log-prob block: the gather, argmax and maximum temporaries and the allocator's slack around them
    blocks = 2 * logprob_block_bytes(model, rows, device_type)
    return int(batch * kept_tokens * s["hidden"] * b + logits + blocks)


def full_forward_bytes(model, n_tokens: int, batch: int, device_type: str = "cpu", kernel=None) -> int:
    """One forward of ``batch`` sequences of ``n_tokens`` with no cache, then the head on its rows: the larger of the
    decoder's peak (activations, and the attention kernel's score matrices when it builds them) and the head phase."""
    b = dtype_bytes(model)
    decoder = batch * n_tokens * activation_bytes_per_token(model)
    if kernel is not None:
        decoder += kernel.workspace_bytes(batch, n_tokens, n_tokens, b)
    return int(max(decoder, head_bytes(model, batch, n_tokens, device_type)))


def kv_cache_bytes(model, n_tokens: int, batch: int) -> int:
    s, b = config_sizes(model), dtype_bytes(model)
    return int(batch * n_tokens * s["layers"] * 2 * s["kv_heads"] * s["head_dim"] * b)


def layer_cache_bytes(model, n_tokens: int, batch: int) -> int:
    """One layer's keys and values: the copy a cache makes of a layer when a forward appends to it."""
    s = config_sizes(model)
    return kv_cache_bytes(model, n_tokens, batch) // max(1, s["layers"])


def cached_forward_bytes(model, held: int, fed: int, batch: int, kept: int, device_type: str, kernel=None) -> int:
    """``fed`` tokens fed onto a cache of ``held``: the cache as it grows (one layer copied as it is appended to), the
    chunk's activations, its mask against every cached key, the attention kernel's workspace, and the logits of the
    ``kept`` positions with their float32 blocks."""
    s, b = config_sizes(model), dtype_bytes(model)
    total = held + fed
    need = kv_cache_bytes(model, total, batch) + layer_cache_bytes(model, total, batch)
    need += batch * fed * activation_bytes_per_token(model) + batch * fed * total
    if kernel is not None:
        need += kernel.workspace_bytes(batch, fed, total, b)
    need += batch * kept * s["vocab"] * b + 2 * logprob_block_bytes(model, kept, device_type)
    return int(need)


def packed_read_bytes(model, held: int, fed: int, device_type: str, kernel=None, longest: int | None = None) -> int:
    """``fed`` tokens of several continuations fed together onto a cache of ``held`` (``forward.packed_layout``):
    the cache as it grows, the activations, the additive mask in the model's dtype (and the bool one transformers
    may build), the attention workspace, every fed position's logits, and the log-softmax blocks of one continuation
    at a time (``longest``: its most rows; default ``fed``)."""
    s, b = config_sizes(model), dtype_bytes(model)
    total = held + fed
    need = kv_cache_bytes(model, total, 1) + layer_cache_bytes(model, total, 1)
    need += fed * activation_bytes_per_token(model) + fed * total * (b + 1)
    if kernel is not None:
        need += kernel.workspace_bytes(1, fed, total, b)
    need += fed * s["vocab"] * b + 2 * logprob_block_bytes(model, longest or fed, device_type)
    return int(need)


def fill_bytes(model, n_tokens: int, batch: int, device_type: str = "cpu", kernel=None) -> int:
    """A prefix's KV cache filled in one forward (its last row's logits only): the decoder's peak with the cache
    it leaves behind."""
    b = dtype_bytes(model)
    decoder = batch * n_tokens * activation_bytes_per_token(model)
    if kernel is not None:
        decoder += kernel.workspace_bytes(batch, n_tokens, n_tokens, b)
    return int(decoder + kv_cache_bytes(model, n_tokens, batch) + head_bytes(model, batch, 1, device_type))


def chunked_bytes(model, n_tokens: int, batch: int, chunk_size: int, device_type: str = "cpu", kernel=None) -> int:
    """A sequence fed in chunks of ``chunk_size``: its last chunk, on the cache of everything before it, costs most."""
    chunk = min(chunk_size, n_tokens)
    return cached_forward_bytes(model, n_tokens - chunk, chunk, batch, chunk, device_type, kernel)


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
