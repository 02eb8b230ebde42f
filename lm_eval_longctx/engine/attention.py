"""Which attention kernel a model's forward runs, asked of PyTorch on a few tokens, and what it holds in memory.

A forward with no cache and no mask hands ``scaled_dot_product_attention`` ``is_causal`` (and, for grouped-query
attention, ``enable_gqa``); a chunk fed onto a KV cache hands it an explicit mask, with the keys repeated to every
head. Which kernel PyTorch then runs depends on the device, the dtype, the head layout and the mask: the fused ones
(flash, memory-efficient, cuDNN) keep O(queries) memory, the math kernel builds the [heads x queries x keys] score
matrix in float32 (a float32 model with grouped-query attention on CUDA falls back to it). The probe records the
calls the model itself makes and asks PyTorch's own dispatch rule (``torch._fused_sdp_choice``) which kernel each
gets; a model that calls no SDPA runs its own attention (``eager``: quadratic) or none (recurrent layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# torch.nn.attention.SDPBackend values, as torch._fused_sdp_choice returns them
_BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
FUSED_IMPLEMENTATIONS = ("flash_attention", "flex_attention", "paged", "kernels")


@dataclass(frozen=True)
class AttentionKernel:
    """One kind of attention call of a model: the kernel that runs and the memory it needs beyond its inputs."""

    name: str  # "flash", "efficient", "cudnn", "math", "eager", "fused" (another fused implementation), "none"
    heads: int = 0  # query heads of the call
    head_dim: int = 0
    repeats_kv: bool = False  # keys and values are expanded to every query head before the kernel
    bytes_per_score: int = 0  # bytes held per (batch, head, query, key) while the call runs; 0: not quadratic

    @property
    def quadratic(self) -> bool:
        return self.bytes_per_score > 0

    def workspace_bytes(self, batch: int, queries: int, keys: int, elem: int) -> int:
        """Memory of one call beyond q, k, v and its output: score matrices and the mask they are built with, and
        keys and values repeated per head (an explicit mask given to the call is counted by its caller)."""
        total = batch * self.heads * queries * keys * self.bytes_per_score
        if self.quadratic:
            total += batch * queries * keys  # the causal mask (bool) a quadratic kernel builds
        if self.repeats_kv:
            total += 2 * batch * self.heads * keys * self.head_dim * elem
        return int(total)

    def summary(self) -> str:
        return self.name + (" (repeats keys per head)" if self.repeats_kv else "")


NO_ATTENTION = AttentionKernel("none")


@dataclass(frozen=True)
class AttentionKernels:
    """The kernels of a model's two kinds of forward: a whole sequence with no cache, and a chunk on a KV cache."""

    no_cache: AttentionKernel
    with_cache: AttentionKernel


class _SDPACalls(TorchFunctionMode):
    """Records the arguments of every scaled_dot_product_attention call made while active."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[tuple, dict]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.calls.append((args, dict(kwargs)))
        return func(*args, **kwargs)


def _backend_of(args: tuple, kwargs: dict) -> str:
    """The kernel PyTorch's dispatcher picks for these SDPA arguments."""
    q, k, v = args[:3]
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    dropout = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    is_causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
    scale, enable_gqa = kwargs.get("scale"), bool(kwargs.get("enable_gqa", False))
    try:
        choice = torch._fused_sdp_choice(q, k, v, mask, dropout, is_causal, scale=scale, enable_gqa=enable_gqa)
    except (TypeError, RuntimeError, AttributeError):
        try:  # releases whose dispatch rule takes no enable_gqa
            choice = torch._fused_sdp_choice(q, k, v, mask, dropout, is_causal, scale=scale)
        except (TypeError, RuntimeError, AttributeError):
            return "math"  # cannot ask: count the kernel that needs the most
    return _BACKENDS.get(int(choice), "math")


def kernel_from_call(args: tuple, kwargs: dict, kv_heads: int) -> AttentionKernel:
    """The kernel of one recorded call; ``kv_heads``: the model's key/value heads (fewer than the query heads under
    grouped-query attention, so keys given with as many heads as queries were repeated before the call)."""
    q, k = args[0], args[1]
    heads = int(q.shape[-3])
    name = _backend_of(args, kwargs)
    # the math kernel computes in float32 (half inputs upcast) and holds the scores and their softmax at once
    return AttentionKernel(
        name,
        heads=heads,
        head_dim=int(q.shape[-1]),
        repeats_kv=int(k.shape[-3]) == heads and 0 < kv_heads < heads,
        bytes_per_score=8 if name == "math" else 0,
    )


def _eager_kernel(model, elem: int, heads: int, head_dim: int) -> AttentionKernel:
    # transformers' eager attention: scores in the model's dtype, their softmax in float32, cast back
    return AttentionKernel("eager", heads=heads, head_dim=head_dim, bytes_per_score=2 * elem + 4)


def kernel_without_sdpa(model, elem: int, heads: int, head_dim: int, has_attention: bool) -> AttentionKernel:
    """The kernel of a model whose forward made no SDPA call: by its attention implementation."""
    if not has_attention:
        return NO_ATTENTION
    implementation = str(getattr(getattr(model, "config", None), "_attn_implementation", "") or "")
    if any(name in implementation for name in FUSED_IMPLEMENTATIONS):
        return AttentionKernel("fused", heads=heads, head_dim=head_dim)
    return _eager_kernel(model, elem, heads, head_dim)


def costliest_kernel(calls, kv_heads: int) -> AttentionKernel | None:
    """The kernel needing the most memory among the recorded calls (hybrids mix attention and other layers)."""
    kernels = [kernel_from_call(args, kwargs, kv_heads) for args, kwargs in calls]
    if not kernels:
        return None
    return max(kernels, key=lambda kernel: (kernel.bytes_per_score, kernel.repeats_kv, kernel.heads))


def recording_sdpa_calls() -> _SDPACalls:
    """A context that records the SDPA calls made inside it (``.calls``)."""
    return _SDPACalls()
