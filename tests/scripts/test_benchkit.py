"""scripts/benchkit.py: the forward ledger sees every decoder call with its cache, and the head's rows."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import benchkit  # noqa: E402

sys.path.pop(0)


def test_the_ledger_records_each_decoder_call_with_its_cached_tokens_and_the_head_rows():
    from transformers import DynamicCache

    model = benchkit.random_llama("tiny", vocab_size=50, max_positions=64, dtype="float32", device="cpu")
    ledger, detach = benchkit.attach_ledger(model, "cpu")
    ids = torch.randint(3, 50, (2, 12))
    with torch.no_grad():
        cache = DynamicCache()
        model(input_ids=ids[:, :10], past_key_values=cache, use_cache=True)
        model(input_ids=ids[:, 10:], past_key_values=cache, use_cache=True)
    detach()
    model(input_ids=ids[:, :3])  # after detaching: not recorded
    assert [call[:3] for call in ledger.decoder_calls] == [(2, 10, 0), (2, 2, 10)]
    assert ledger.head_rows == 2 * 12 and ledger.head_seconds > 0 and ledger.decoder_seconds > 0


def test_the_heads_replay_on_kept_hidden_states_is_not_a_decoder_call():
    from lm_eval_longctx.engine import forward

    model = benchkit.random_llama("tiny", vocab_size=50, max_positions=64, dtype="float32", device="cpu")
    ids = torch.randint(3, 50, (1, 20))
    support = forward.capabilities(model).support  # its probes run before the ledger
    ledger, detach = benchkit.attach_ledger(model, "cpu")
    with torch.no_grad():
        full = forward.FullForward(model, ids, support)
        full.logits(0, 10)  # the head on rows the one forward kept
    detach()
    assert [call[:3] for call in ledger.decoder_calls] == [(1, 20, 0)]
    assert ledger.head_rows >= 10
