"""What a recording counts (``engine/recording.py``), and its listeners: called with each forward's tokens as it
runs, for the model recorded only."""

from __future__ import annotations

import torch

from lm_eval_longctx.engine import recording, scoring
from tests.tiny import tiny_llama


def test_listeners_hear_every_forward_of_their_model_as_it_happens():
    model, other = tiny_llama(seed=1), tiny_llama(seed=2)
    ids = torch.randint(3, 97, (300,), generator=torch.Generator().manual_seed(0))
    scoring.score_long(model, ids[:20])  # the engine's probes of the model run once, before
    ticks: list[int] = []
    with recording.recording(model) as record:
        record.listeners.append(ticks.append)
        scoring.score_truncated(model, [ids], 64, 32, batch_size=2)
        scoring.score_long(other, ids)  # another model's forwards are not this record's
    assert len(ticks) > 2 and sum(ticks) == record.tokens_forwarded
    assert record.tokens_forwarded == sum(w.stop - w.start for w in scoring.truncated_windows(300, 64, 32))
