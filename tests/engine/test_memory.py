"""What a forward is counted to need (``engine/memory.py``): more with more tokens and a larger batch."""

from __future__ import annotations

import torch

from lm_eval_longctx.engine import memory
from tests.tiny import tiny_llama


def test_memory_estimates_grow_with_the_tokens_and_the_batch():
    model = tiny_llama(vocab_size=97, seed=3)
    a, b, c = (memory.full_forward_bytes(model, n, batch) for n, batch in ((1000, 1), (2000, 1), (2000, 2)))
    assert a < b < c
    assert memory.chunked_bytes(model, 2000, 1, 64) > memory.kv_cache_bytes(model, 2000, 1) > 0
    free = memory.free_bytes(torch.device("cpu"))
    assert free is None or free > 0
