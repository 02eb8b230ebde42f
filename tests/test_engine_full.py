"""The full strategy's two properties that make it fast and small on a GPU, shown on the CPU: attention runs
with no materialized mask (so SDPA can take its flash kernel), and no [sequence x vocabulary] tensor is built.
And the strategy choice: ``auto`` by the memory estimate, each choice recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine import forward, memory
from lm_eval_longctx.engine import scoring as engine
from tests import families
from tests.tiny import tiny_llama


def spy_on_attention(monkeypatch) -> list:
    """Every call of torch's scaled_dot_product_attention: (mask is None, is_causal, query rows, key rows)."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append((attn_mask is None, bool(is_causal), q.shape[-2], k.shape[-2]))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def test_the_full_pass_calls_attention_with_no_materialized_mask(monkeypatch):
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4.x builds an explicit causal mask for SDPA even for one forward on the CPU")
    model = tiny_llama(vocab_size=97, seed=3)
    assert model.config._attn_implementation == "sdpa"
    engine.check_model(model)  # the probe runs before the spy
    calls = spy_on_attention(monkeypatch)
    ids = torch.randint(3, 97, (300,), generator=torch.Generator().manual_seed(0))
    engine.score_long(model, ids, long_pass="full")
    long_calls = [c for c in calls if c[2] == 300]
    assert len(long_calls) == model.config.num_hidden_layers
    assert all(no_mask and causal for no_mask, causal, _, _ in long_calls), long_calls
    assert all(no_mask for no_mask, _, _, _ in calls)  # the head replay and the row check add no attention
    # the chunked pass does build masks (a chunk of queries over a longer cache): the spy sees the difference
    calls.clear()
    engine.score_long(model, ids, chunk_size=64, long_pass="chunked")
    assert any(not no_mask and q < k for no_mask, _, q, k in calls)


PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    sys.path.insert(0, {root!r})
    from lm_eval_longctx.engine import scoring as engine
    from lm_eval_longctx.demo.offline import random_llama

    def status_kib(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    torch.set_num_threads(1)
    model = random_llama({vocab}, seed=0, max_position_embeddings=16384, hidden_size=32, num_hidden_layers=1)
    ids = torch.randint(3, {vocab}, ({n},), generator=torch.Generator().manual_seed(0))
    engine.check_model(model)
    with torch.no_grad():
        model(input_ids=ids[:16][None])  # warm up kernels and allocator
    with open("/proc/self/clear_refs", "w") as f:  # the peak RSS (VmHWM) starts again from the RSS now
        f.write("5")
    before = status_kib("VmRSS")
    if sys.argv[1] == "engine":
        out = engine.score_long(model, ids, long_pass="full").logprob
    else:  # the straightforward path: every row of the logits at once
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0].float()
            out = torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None]).squeeze(1).numpy()
    print(json.dumps({{"peak_kib": status_kib("VmHWM") - before, "mean": float(out.mean())}}))
""")


def _peak(path: str, root: str, vocab: int, n: int) -> dict:
    script = PEAK_SCRIPT.format(root=root, vocab=vocab, n=n)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration
@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux /proc to reset the peak RSS")
def test_the_full_pass_builds_no_sequence_by_vocabulary_tensor():
    """Peak memory of the full pass over 4,096 tokens of a 65,536-token vocabulary stays far below one float32
    [sequence x vocabulary] tensor (1.0 GiB), which the straightforward path does build (each in a fresh process)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    vocab, n = 65536, 4096
    tensor_kib = n * vocab * 4 / 1024
    ours = _peak("engine", root, vocab, n)
    plain = _peak("straightforward", root, vocab, n)
    assert abs(ours["mean"] - plain["mean"]) < 1e-4  # the same numbers
    assert plain["peak_kib"] > tensor_kib  # the measurement sees such a tensor when there is one
    assert ours["peak_kib"] < 0.25 * tensor_kib, (ours, plain, tensor_kib)


# ------------------------------------------------------------------ choosing the strategy


def test_auto_takes_full_when_it_fits_else_chunked_where_exact_else_says_how_much(monkeypatch):
    llama, mamba = tiny_llama(vocab_size=97, seed=3), families.build("mamba")
    assert engine.choose_long_pass(llama, "auto", 1000) == "full"
    need = memory.full_forward_bytes(llama, 1000, 1)
    monkeypatch.setattr(memory, "free_bytes", lambda device: need)  # below need / FREE_MEMORY_SHARE
    assert engine.choose_long_pass(llama, "auto", 1000) == "chunked"
    with pytest.raises(
        engine.ScoringError,
        match=r"model type 'mamba': one forward of 1 x 1000 tokens needs about "
        r"[0-9.]+ GiB and [0-9.]+ GiB is free on cpu",
    ):
        engine.choose_long_pass(mamba, "auto", 1000)
    assert engine.choose_long_pass(mamba, "full", 1000) == "full"  # asked for: tried anyway
    with pytest.raises(engine.ScoringError, match="long_pass chunked: model type 'mamba'"):
        engine.choose_long_pass(mamba, "chunked", 1000)
    with pytest.raises(ValueError, match="long_pass must be one of"):
        engine.choose_long_pass(llama, "chunky", 1000)
    # an auto pass that falls back to chunks gives the same numbers
    ids = torch.randint(3, 97, (120,), generator=torch.Generator().manual_seed(1))
    need = memory.full_forward_bytes(llama, 120, 1)
    monkeypatch.setattr(memory, "free_bytes", lambda device: need)
    with engine.recording(llama) as record:
        chunked = engine.score_long(llama, ids, chunk_size=16)
    assert record.summary()["passes"] == {"long": {"chunked": 1}}
    monkeypatch.undo()
    with engine.recording(llama) as record:
        full = engine.score_long(llama, ids, chunk_size=16)
    assert record.summary()["passes"] == {"long": {"full": 1}}
    assert np.max(np.abs(full.logprob - chunked.logprob)) < 1e-4


def test_memory_estimates_grow_with_the_tokens_and_the_batch():
    model = tiny_llama(vocab_size=97, seed=3)
    a, b, c = (memory.full_forward_bytes(model, n, batch) for n, batch in ((1000, 1), (2000, 1), (2000, 2)))
    assert a < b < c
    assert memory.chunked_bytes(model, 2000, 1, 64) > memory.kv_cache_bytes(model, 2000, 1) > 0
    free = memory.free_bytes(torch.device("cpu"))
    assert free is None or free > 0


def test_the_record_names_the_model_its_dtype_and_each_pass():
    model = families.build("phi3_longrope")
    ids = torch.randint(3, families.VOCAB, (100,), generator=torch.Generator().manual_seed(1))
    with engine.recording(model) as record:
        engine.score_long(model, ids)
        engine.score_truncated(model, [ids], 48, 20)
        engine.score_continuations(model, ids[:80], [ids[80:90], ids[85:95]])
    s = record.summary()
    assert s["model_type"] == "phi3" and s["rope_types"] == ["longrope"] and not s["kv_cache_exact"]
    assert s["dtype"] == "float32" and s["device"] == "cpu"
    assert s["passes"] == {
        "long": {"full": 1},
        "separate_sequences": {"full": 5},
        "continuations": {"one_forward_each": 2},
    }


def test_a_head_that_the_replay_cannot_reproduce_is_refused(monkeypatch):
    """The replayed head is compared with the model's own logits on every forward: a difference is an error."""
    model = tiny_llama(vocab_size=97, seed=3)
    engine.check_model(model)
    real = forward.FullForward.logits
    monkeypatch.setattr(forward.FullForward, "logits", lambda self, a, b: real(self, a, b) * 1.01)
    with pytest.raises(engine.ScoringError, match="does not give the model's own logits"):
        engine.score_long(model, torch.arange(3, 40), long_pass="full")


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
        engine.score_long(model, ids, chunk_size=16, long_pass="chunked")
        engine.score_continuations(model, ids[:60], [ids[60:70], ids[70:80]], long_pass="chunked")
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]


def test_a_batch_that_does_not_fit_one_forward_is_split_not_chunked(monkeypatch):
    """auto on a model that cannot be chunked (Mamba): a batch too large for one forward runs in smaller
    forwards, with the same numbers."""
    model = families.build("mamba")
    seqs = [torch.randint(3, families.VOCAB, (64,), generator=torch.Generator().manual_seed(s)) for s in range(4)]
    whole = engine.score_long_batch(model, seqs)
    one, two = memory.full_forward_bytes(model, 64, 1), memory.full_forward_bytes(model, 64, 2)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int((one + two) / 2 / memory.FREE_MEMORY_SHARE))
    sizes = []
    real = forward.FullForward.__init__
    monkeypatch.setattr(
        forward.FullForward, "__init__", lambda self, m, ids, s: sizes.append(ids.shape[0]) or real(self, m, ids, s)
    )
    split = engine.score_long_batch(model, seqs)
    assert sizes == [1, 1, 1, 1]
    for a, b in zip(whole, split):
        assert np.max(np.abs(a.logprob - b.logprob)) < 1e-5


def test_a_peft_model_is_scored_through_its_adapters():
    """lm-eval's `peft=` wraps the model in a PeftModel, whose forward has no logits_to_keep: the engine scores the
    transformers model under it, whose layers carry the adapters."""
    peft = pytest.importorskip("peft")
    base = tiny_llama(vocab_size=97, seed=3)
    ids = torch.randint(3, 97, (120,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = base(input_ids=ids[None]).logits[0].float()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
        logits = model(input_ids=ids[None]).logits[0].float()
    assert (plain - logits).abs().max() > 1.0  # the adapter matters
    ref = torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None]).squeeze(1).numpy()
    for long_pass in ("full", "chunked"):
        got = engine.score_long(model, ids, chunk_size=16, long_pass=long_pass)
        assert np.max(np.abs(got.logprob - ref)) < 1e-4
