"""Non-finite logits are named as the model's output, with its dtype and the likely cause, on every plan: never
blamed on the head replay, never passed on to the metrics. A replayed head that differs from the model's own logits
is refused, and the cache goes under the name the forward takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine import forward, scoring
from tests import families
from tests.tiny import tiny_llama

VOCAB = 97


def ids_for(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def nan_from(model, position: int):
    """Make the first decoder layer output NaN from ``position`` on (absolute positions, any chunking)."""
    seen = {"n": 0}

    def hook(_module, args, kwargs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        positions = kwargs.get("position_ids")
        if positions is None:
            positions = torch.arange(hidden.shape[1])[None]
        hidden = hidden.clone()
        hidden[(positions >= position).expand(hidden.shape[0], -1)] = float("nan")
        seen["n"] += 1
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    return model.model.layers[0].register_forward_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("long_pass", ["full", "chunked"])
def test_a_model_that_outputs_nan_is_named_as_such_not_as_a_replay_fault(long_pass):
    model = tiny_llama(vocab_size=VOCAB, seed=3)
    nan_from(model, 300)
    with pytest.raises(scoring.NonFiniteLogitsError) as caught:
        scoring.score_long(model, ids_for(400), chunk_size=64, long_pass=long_pass)
    message = str(caught.value)
    assert "model type 'llama' (float32): its logits are not finite (NaN or inf)" in message
    assert "replayed" not in message and "long_pass" not in message
    assert "weights are finite" in message
    if long_pass == "chunked":  # NaN values reach every query of their chunk (0 x NaN in attention): from 256 on
        assert "in the long pass at 64 of 64 scored tokens (first at token position 257)" in message


def test_nan_in_the_last_row_is_the_models_output_not_the_replay():
    model = tiny_llama(vocab_size=VOCAB, seed=3)
    nan_from(model, 0)
    with pytest.raises(scoring.NonFiniteLogitsError, match=r"logits are not finite .* in the last row of a full"):
        scoring.score_long(model, ids_for(50), long_pass="full")


def test_float16_overflow_names_the_dtype_and_the_way_out():
    model = tiny_llama(vocab_size=VOCAB, seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(1e4)  # logits beyond float16's 65504
    model = model.half()
    with pytest.raises(scoring.NonFiniteLogitsError) as caught:
        scoring.score_long(model, ids_for(40), long_pass="chunked", chunk_size=16)
    message = str(caught.value)
    assert "(float16)" in message and "float16 activations overflow" in message and "dtype=bfloat16" in message


def test_weights_holding_nan_are_named():
    model = tiny_llama(vocab_size=VOCAB, seed=3)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    with pytest.raises(scoring.NonFiniteLogitsError, match=r"1 of its weight tensors hold NaN or inf \(first: "):
        scoring.score_long(model, ids_for(40), long_pass="full")


def test_finite_logits_pass_the_check():
    lp, hit = forward.logprob_and_greedy(torch.randn(5, VOCAB), torch.arange(5), 1)
    assert torch.isfinite(lp).all() and hit.dtype == torch.bool


def test_a_head_that_the_replay_cannot_reproduce_is_refused(monkeypatch):
    """The replayed head is compared with the model's own logits on every forward: a difference is an error."""
    model = tiny_llama(vocab_size=97, seed=3)
    scoring.check_model(model)
    real = forward.FullForward.logits
    monkeypatch.setattr(forward.FullForward, "logits", lambda self, a, b: real(self, a, b) * 1.01)
    with pytest.raises(scoring.ScoringError, match="does not give the model's own logits"):
        scoring.score_long(model, torch.arange(3, 40), long_pass="full")


def test_the_cache_goes_under_the_name_the_forward_takes_without_a_deprecation_warning():
    """transformers 5.x takes the cache as `cache=` and warns for `past_key_values=` (removed in 5.40.0); the
    engine reads the name from the forward's signature, so a chunked pass warns nothing."""
    import warnings

    import transformers
    from transformers import DynamicCache

    model = tiny_llama(vocab_size=97, seed=3)
    ids = torch.arange(3, 90)
    if int(transformers.__version__.split(".")[0]) < 5:
        assert forward.cache_argument(model) == "past_key_values"
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model(input_ids=ids[None, :10], past_key_values=DynamicCache(), use_cache=True)
        assert any("past_key_values" in str(w.message) for w in caught)  # the old name does warn
        assert forward.cache_argument(model) == "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scoring.score_long(model, ids, chunk_size=16, long_pass="chunked")
        scoring.score_continuations(model, ids[:60], [ids[60:70], ids[70:80]], long_pass="chunked")
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "mamba", "falcon_alibi"])
@pytest.mark.parametrize("long_pass", ["full", "chunked"])
def test_progress_moves_layer_by_layer_inside_one_forward_and_adds_up(family, long_pass):
    model = families.build(family)
    seqs = [torch.randint(3, families.VOCAB, (200,), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    if long_pass == "chunked" and not forward.capabilities(model).support.kv_cache_exact:
        pytest.skip(f"{family}: no exact KV cache")
    plain = scoring.score_long_batch(model, seqs, chunk_size=64, long_pass=long_pass)
    ticks: list[float] = []
    with scoring.recording(model) as record:
        record.listeners.append(ticks.append)
        got = scoring.score_long_batch(model, seqs, chunk_size=64, long_pass=long_pass)
    n_layers = len(forward.decoder_layers(model))
    assert n_layers == 2
    # one forward of both sequences, or four chunks of 64 tokens: each ticks once per layer, its share
    forwards, per_forward = (1, 400) if long_pass == "full" else (4, 128)
    assert len(ticks) >= n_layers * forwards
    assert max(ticks) <= per_forward / n_layers
    assert sum(ticks) == pytest.approx(record.tokens_forwarded)
    for a, b in zip(plain, got, strict=True):
        assert np.array_equal(a.logprob, b.logprob, equal_nan=True) and np.array_equal(a.greedy, b.greedy)


def test_a_model_without_a_layer_list_of_its_config_size_ticks_once_per_forward():
    model = tiny_llama()
    model.config.num_hidden_layers = 99  # no module list of that size: the forward counts at its end only
    forward._DECODER_LAYERS.pop(model, None)
    ticks: list[float] = []
    with scoring.recording(model) as record:
        record.listeners.append(ticks.append)
        scoring.score_long_batch(model, [ids_for(100)], chunk_size=64, long_pass="full")
    assert forward.decoder_layers(model) == []
    # the probes' 8-token forwards, then the 100-token one, each whole (no layer's half)
    assert ticks[-1] == 100 and set(ticks) == {8.0, 100.0} and sum(ticks) == record.tokens_forwarded
