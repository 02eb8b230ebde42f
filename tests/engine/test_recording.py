"""What a recording counts (``engine/recording.py``), and its listeners: called with each forward's tokens as it
runs, for the model recorded only; what its summary names (the model, its dtype, each pass)."""

from __future__ import annotations

import torch

from lm_eval_longctx.engine import recording, scoring
from tests import families
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


def test_the_record_names_the_model_its_dtype_and_each_pass():
    model = families.build("phi3_longrope")
    ids = torch.randint(3, families.VOCAB, (100,), generator=torch.Generator().manual_seed(1))
    with scoring.recording(model) as record:
        scoring.score_long(model, ids)
        scoring.score_truncated(model, [ids], 48, 20)
        scoring.score_continuations(model, ids[:80], [ids[80:90], ids[85:95]])
    s = record.summary()
    assert s["model_type"] == "phi3" and s["rope_types"] == ["longrope"] and not s["kv_cache_exact"]
    assert s["dtype"] == "float32" and s["device"] == "cpu"
    assert s["passes"] == {
        "long": {"full": 1},
        "separate_sequences": {"full": 5},
        "continuations": {"one_forward_each": 2},
    }
