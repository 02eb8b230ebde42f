"""The engine's entry points (``engine/scoring.py``) against slow, obviously-correct computations (float32, random
tiny models): the long and truncated passes, batches, continuations after a shared prefix and the prefix ladder.
And the full strategy's two properties that make it fast and small on a GPU, shown on the CPU: attention runs with
no materialized mask (so SDPA can take its flash kernel), and no [sequence x vocabulary] tensor is built; the
strategy choice, ``auto`` by the memory estimate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine import forward, memory, scoring
from lm_eval_longctx.engine.scoring import ScoringError, score_long, score_truncated, truncated_windows
from tests import families
from tests.brute_force import brute_last
from tests.tiny import tiny_llama

TOL = 1e-4


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=97, seed=3)


def random_ids(n, seed=0, vocab=97):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g)


def mixed_ids(model, n, seed=0):
    """Half random tokens, half the model's own greedy choice, so greedy hits are not all False."""
    g = torch.Generator().manual_seed(seed)
    ids = [int(torch.randint(3, 97, (1,), generator=g))]
    with torch.no_grad():
        while len(ids) < n:
            if torch.rand(1, generator=g).item() < 0.5:
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            else:
                ids.append(int(torch.randint(3, 97, (1,), generator=g)))
    return torch.tensor(ids)


def full_forward_scores(model, ids):
    """One forward over the whole sequence, full logits (what a naive scorer does)."""
    with torch.no_grad():
        logits = model(ids[None]).logits[0].float()
    lp = torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None]).squeeze(1)
    greedy = logits[:-1].argmax(-1) == ids[1:]
    return lp.numpy(), greedy.numpy()


def window_slice_scores(model, ids, K, d):
    """A separate forward over every reference window slice ids[s : s + K + d']."""
    n = len(ids)
    lp = np.full(n - 1, np.nan, dtype=np.float32)
    greedy = np.zeros(n - 1, dtype=bool)
    for s in range(0, n - K, d):
        dd = min(d, n - s - K)
        piece = ids[s : s + K + dd]
        wlp, wg = full_forward_scores(model, piece)
        # window column j predicts piece[j + 1]; targets s+K .. s+K+dd-1 are columns K-1 .. K+dd-2
        lp[s + K - 1 : s + K + dd - 1] = wlp[K - 1 : K + dd - 1]
        greedy[s + K - 1 : s + K + dd - 1] = wg[K - 1 : K + dd - 1]
    return lp, greedy


@pytest.mark.parametrize("chunk", [7, 10, 50, 64, 1])
def test_long_pass_equals_one_full_forward(model, chunk):
    ids = mixed_ids(model, 50, seed=chunk)
    ref_lp, ref_g = full_forward_scores(model, ids)
    got = score_long(model, ids, chunk_size=chunk)
    assert got.logprob.dtype == np.float32 and len(got) == 49
    assert np.max(np.abs(got.logprob - ref_lp)) <= TOL
    assert np.array_equal(got.greedy, ref_g)
    assert ref_g.any() and not ref_g.all()  # the comparison is not vacuous


def test_long_pass_score_from_only_fills_the_cache(model):
    ids = random_ids(40, seed=5)
    ref_lp, ref_g = full_forward_scores(model, ids)
    got = score_long(model, ids, chunk_size=9, score_from=23)
    assert np.isnan(got.logprob[:22]).all() and not got.greedy[:22].any()
    assert np.max(np.abs(got.logprob[22:] - ref_lp[22:])) <= TOL
    assert np.array_equal(got.greedy[22:], ref_g[22:])


def test_long_pass_trivial_lengths(model):
    assert len(score_long(model, random_ids(1))) == 0
    two = score_long(model, random_ids(2), chunk_size=1)
    ref, _ = full_forward_scores(model, random_ids(2))
    assert np.allclose(two.logprob, ref, atol=TOL)


def test_reference_windows():
    # n = 4096 + 2 * 1024 + 1: two full windows and a last window of one token
    w = truncated_windows(4096 + 2048 + 1, 4096, 1024)
    assert [(x.start, x.score_from, x.stop) for x in w] == [(0, 4096, 5120), (1024, 5120, 6144), (2048, 6144, 6145)]
    assert truncated_windows(4096, 4096, 1024) == []
    assert truncated_windows(100, 4096, 1024) == []
    # every target >= K is scored exactly once
    for n in [17, 18, 25, 33]:
        scored = [t for x in truncated_windows(n, 8, 5) for t in range(x.score_from, x.stop)]
        assert scored == list(range(8, n))


@pytest.mark.parametrize("n,K,d", [(60, 16, 8), (61, 16, 8), (57, 16, 8), (40, 16, 30), (17, 16, 4)])
def test_truncated_pass_equals_separate_forward_per_window(model, n, K, d):
    ids = random_ids(n, seed=n + K)
    ref_lp, ref_g = window_slice_scores(model, ids, K, d)
    got = score_truncated(model, [ids], K, d, batch_size=3)[0]
    assert np.array_equal(np.isnan(got.logprob), np.isnan(ref_lp))
    assert np.isnan(got.logprob[: K - 1]).all()
    m = ~np.isnan(ref_lp)
    assert m.sum() == n - K
    assert np.max(np.abs(got.logprob[m] - ref_lp[m])) <= TOL
    assert np.array_equal(got.greedy, ref_g)


def test_truncated_pass_differs_from_long_pass(model):
    # a meaningful truncation: the short context must change the numbers
    ids = random_ids(60, seed=11)
    short = score_truncated(model, [ids], 8, 8)[0]
    long = score_long(model, ids)
    m = ~np.isnan(short.logprob)
    assert np.max(np.abs(short.logprob[m] - long.logprob[m])) > 1e-3


def test_truncated_pass_last_window_of_one_token(model):
    K, d = 12, 6
    n = K + 2 * d + 1
    ids = random_ids(n, seed=2)
    got = score_truncated(model, [ids], K, d, batch_size=8)[0]
    ref_lp, _ = window_slice_scores(model, ids, K, d)
    assert not np.isnan(got.logprob[n - 2])
    assert abs(got.logprob[n - 2] - ref_lp[n - 2]) <= TOL


def test_truncated_pass_length_at_most_K(model):
    for n in (5, 16):
        got = score_truncated(model, [random_ids(n)], 16, 4)[0]
        assert len(got) == n - 1 and np.isnan(got.logprob).all() and not got.greedy.any()


def test_batch_size_and_padding_do_not_change_results(model):
    # Several sequences whose last windows differ in length, so batches mix lengths and pad.
    seqs = [mixed_ids(model, n, seed=n) for n in (45, 50, 39, 61, 16)]
    one = score_truncated(model, seqs, 16, 10, batch_size=1)
    eight = score_truncated(model, seqs, 16, 10, batch_size=8)
    three = score_truncated(model, seqs, 16, 10, batch_size=3)
    for a, b, c, s in zip(one, eight, three, seqs):
        ref_lp, ref_g = window_slice_scores(model, s, 16, 10)
        for x in (a, b, c):
            assert np.array_equal(np.isnan(x.logprob), np.isnan(ref_lp))
            m = ~np.isnan(ref_lp)
            if m.any():
                assert np.max(np.abs(x.logprob[m] - ref_lp[m])) <= TOL
            assert np.array_equal(x.greedy, ref_g)
    assert any(x.greedy.any() for x in one)


class _CacheIgnoring(torch.nn.Module):
    """A Llama whose forward takes a cache argument but does not use it (or returns none)."""

    def __init__(self, inner, return_cache: bool):
        super().__init__()
        self.inner, self.config, self.return_cache = inner, inner.config, return_cache

    def forward(self, input_ids, past_key_values=None, use_cache=None, logits_to_keep=0, **kwargs):
        out = self.inner(input_ids=input_ids, use_cache=self.return_cache, logits_to_keep=logits_to_keep)
        if not self.return_cache:
            out["cache"] = None
        return out


@pytest.mark.parametrize(
    "return_cache,message", [(True, "did not extend the KV cache"), (False, "returned no KV cache")]
)
def test_a_model_that_ignores_its_cache_is_caught_not_scored(model, return_cache, message):
    wrapped = _CacheIgnoring(model, return_cache)
    with pytest.raises(ScoringError, match=message):
        score_long(wrapped, random_ids(30), chunk_size=8, long_pass="chunked")
    # a single chunk needs no cache and still works
    ref, _ = full_forward_scores(model, random_ids(30))
    got = score_long(wrapped, random_ids(30), chunk_size=64, long_pass="chunked").logprob
    assert np.allclose(got, ref, atol=TOL)


def test_blocked_logprobs_equal_one_log_softmax(model, monkeypatch):
    """Blocks of a few rows (as with a large vocabulary) give the same numbers as one block."""
    from lm_eval_longctx.engine import forward

    ids = mixed_ids(model, 45, seed=9)
    ref_lp, ref_g = full_forward_scores(model, ids)
    monkeypatch.setattr(forward, "LOGPROB_BLOCK_BYTES", 4 * 97 * 3)  # 3 rows per log-prob block
    monkeypatch.setattr(forward, "HEAD_BLOCK_BYTES", 4 * 97 * 5)  # 5 rows per replay of the output head
    got = score_long(model, ids, chunk_size=20)
    assert np.max(np.abs(got.logprob - ref_lp)) <= TOL and np.array_equal(got.greedy, ref_g)
    short = score_truncated(model, [ids], 16, 7, batch_size=2)[0]
    ref_s, _ = window_slice_scores(model, ids, 16, 7)
    m = ~np.isnan(ref_s)
    assert np.max(np.abs(short.logprob[m] - ref_s[m])) <= TOL


# ------------------------------------------------------------------ the full strategy, and choosing it


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
    scoring.check_model(model)  # the probe runs before the spy
    calls = spy_on_attention(monkeypatch)
    ids = torch.randint(3, 97, (300,), generator=torch.Generator().manual_seed(0))
    scoring.score_long(model, ids, long_pass="full")
    long_calls = [c for c in calls if c[2] == 300]
    assert len(long_calls) == model.config.num_hidden_layers
    assert all(no_mask and causal for no_mask, causal, _, _ in long_calls), long_calls
    assert all(no_mask for no_mask, _, _, _ in calls)  # the head replay and the row check add no attention
    # the chunked pass does build masks (a chunk of queries over a longer cache): the spy sees the difference
    calls.clear()
    scoring.score_long(model, ids, chunk_size=64, long_pass="chunked")
    assert any(not no_mask and q < k for no_mask, _, q, k in calls)


PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    sys.path.insert(0, {root!r})
    from lm_eval_longctx.engine import scoring
    from lm_eval_longctx.demo.offline import random_llama

    def status_kib(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    torch.set_num_threads(1)
    model = random_llama({vocab}, seed=0, max_position_embeddings=16384, hidden_size=32, num_hidden_layers=1)
    ids = torch.randint(3, {vocab}, ({n},), generator=torch.Generator().manual_seed(0))
    scoring.check_model(model)
    with torch.no_grad():
        model(input_ids=ids[:16][None])  # warm up kernels and allocator
    with open("/proc/self/clear_refs", "w") as f:  # the peak RSS (VmHWM) starts again from the RSS now
        f.write("5")
    before = status_kib("VmRSS")
    if sys.argv[1] == "engine":
        out = scoring.score_long(model, ids, long_pass="full").logprob
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
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    vocab, n = 65536, 4096
    tensor_kib = n * vocab * 4 / 1024
    ours = _peak("engine", root, vocab, n)
    plain = _peak("straightforward", root, vocab, n)
    assert abs(ours["mean"] - plain["mean"]) < 1e-4  # the same numbers
    assert plain["peak_kib"] > tensor_kib  # the measurement sees such a tensor when there is one
    assert ours["peak_kib"] < 0.25 * tensor_kib, (ours, plain, tensor_kib)


def test_auto_takes_full_when_it_fits_else_chunked_where_exact_else_says_how_much(monkeypatch):
    llama, mamba = tiny_llama(vocab_size=97, seed=3), families.build("mamba")
    assert scoring.choose_long_pass(llama, "auto", 1000) == "full"
    need = memory.full_forward_bytes(llama, 1000, 1)
    monkeypatch.setattr(memory, "free_bytes", lambda device: need)  # below need / FREE_MEMORY_SHARE
    assert scoring.choose_long_pass(llama, "auto", 1000) == "chunked"
    with pytest.raises(
        scoring.ScoringError,
        match=r"model type 'mamba': one forward of 1 x 1000 tokens needs about "
        r"[0-9.]+ GiB and [0-9.]+ GiB is free on cpu",
    ):
        scoring.choose_long_pass(mamba, "auto", 1000)
    assert scoring.choose_long_pass(mamba, "full", 1000) == "full"  # asked for: tried anyway
    with pytest.raises(scoring.ScoringError, match="long_pass chunked: model type 'mamba'"):
        scoring.choose_long_pass(mamba, "chunked", 1000)
    with pytest.raises(ValueError, match="long_pass must be one of"):
        scoring.choose_long_pass(llama, "chunky", 1000)
    # an auto pass that falls back to chunks gives the same numbers
    ids = torch.randint(3, 97, (120,), generator=torch.Generator().manual_seed(1))
    need = memory.full_forward_bytes(llama, 120, 1)
    monkeypatch.setattr(memory, "free_bytes", lambda device: need)
    with scoring.recording(llama) as record:
        chunked = scoring.score_long(llama, ids, chunk_size=16)
    assert record.summary()["passes"] == {"long": {"chunked": 1}}
    monkeypatch.undo()
    with scoring.recording(llama) as record:
        full = scoring.score_long(llama, ids, chunk_size=16)
    assert record.summary()["passes"] == {"long": {"full": 1}}
    assert np.max(np.abs(full.logprob - chunked.logprob)) < 1e-4


def test_a_batch_that_does_not_fit_one_forward_is_split_not_chunked(monkeypatch):
    """auto on a model that cannot be chunked (Mamba): a batch too large for one forward runs in smaller
    forwards, with the same numbers."""
    model = families.build("mamba")
    seqs = [torch.randint(3, families.VOCAB, (64,), generator=torch.Generator().manual_seed(s)) for s in range(4)]
    whole = scoring.score_long_batch(model, seqs)
    one, two = memory.full_forward_bytes(model, 64, 1), memory.full_forward_bytes(model, 64, 2)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int((one + two) / 2 / memory.FREE_MEMORY_SHARE))
    sizes = []
    real = forward.FullForward.__init__
    monkeypatch.setattr(
        forward.FullForward, "__init__", lambda self, m, ids, s: sizes.append(ids.shape[0]) or real(self, m, ids, s)
    )
    split = scoring.score_long_batch(model, seqs)
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
        got = scoring.score_long(model, ids, chunk_size=16, long_pass=long_pass)
        assert np.max(np.abs(got.logprob - ref)) < 1e-4


# ------------------------------------------------------------------ a batch of sequences of one length


def test_score_long_batch_equals_one_full_forward_per_sequence():
    model = tiny_llama(vocab_size=61, seed=3)
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 61, (50,), generator=gen) for _ in range(3)]
    seqs[1][25:] = seqs[1][:25]  # a repeat, so some predictions are greedy hits
    full = []
    for s in seqs:
        with torch.no_grad():
            full.append(torch.log_softmax(model(s[None]).logits[0, :-1].float(), -1))
    for chunk, score_from in ((7, 20), (64, 1), (16, 49)):
        out = scoring.score_long_batch(model, seqs, chunk_size=chunk, score_from=score_from)
        for s, f, r in zip(seqs, full, out):
            t = np.arange(score_from, 50)  # targets scored
            want = f[t - 1, s[t]].numpy()
            np.testing.assert_allclose(r.logprob[t - 1], want, atol=1e-4)
            assert (r.greedy[t - 1] == (f[t - 1].argmax(-1) == s[t]).numpy()).all()
            assert np.isnan(r.logprob[: score_from - 1]).all() and not r.greedy[: score_from - 1].any()
            single = scoring.score_long(model, s, chunk_size=chunk, score_from=score_from)
            np.testing.assert_allclose(r.logprob, single.logprob, atol=1e-5)
    assert scoring.score_long_batch(model, seqs, 7, 20)[1].greedy.any()
    with pytest.raises(scoring.ScoringError, match="one length"):
        scoring.score_long_batch(model, [seqs[0], seqs[0][:40]])
    assert scoring.score_long_batch(model, []) == []


# ------------------------------------------------------------------ continuations after a shared prefix


@pytest.fixture(scope="module")
def prefix_model():
    return tiny_llama(vocab_size=97, seed=5)


@pytest.mark.parametrize("chunk", [1, 7, 64, 149, 1000])
def test_score_continuations_equals_one_forward_per_continuation(prefix_model, chunk):
    prefix = random_ids(150, 0)
    conts = [random_ids(10, 1), random_ids(7, 2), random_ids(12, 3), random_ids(1, 4)]
    n_scored = [4, 7, 12, 1]  # 7 and 12: the whole continuation (its first token read off the prefix)
    out = scoring.score_continuations(prefix_model, prefix, conts, n_scored=n_scored, chunk_size=chunk)
    hits = 0
    for c, k, res in zip(conts, n_scored, out):
        lp, greedy = brute_last(prefix_model, torch.cat([prefix, c]), k)
        assert res.logprob.shape == (k,)
        np.testing.assert_allclose(res.logprob, lp, atol=TOL, rtol=0)
        np.testing.assert_array_equal(res.greedy, greedy)
        hits += int(greedy.sum())
    # one-token prefix: nothing is cached, every continuation reads the prefix token itself
    single = scoring.score_continuations(prefix_model, prefix[:1], conts[:2], chunk_size=chunk)
    for c, res in zip(conts[:2], single):
        np.testing.assert_allclose(
            res.logprob, brute_last(prefix_model, torch.cat([prefix[:1], c]), len(c))[0], atol=TOL
        )


def test_prefix_sharing_changes_nothing_and_reads_the_prefix_once(prefix_model):
    prefix, conts = random_ids(300, 10), [random_ids(20, 11), random_ids(20, 12), random_ids(9, 13)]
    seen = []
    hook = prefix_model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].numel()))
    try:
        shared = scoring.score_continuations(prefix_model, prefix, conts, n_scored=6, chunk_size=64)
    finally:
        hook.remove()
    # the prefix once (its last token travels with each continuation), then each continuation
    assert sum(seen) == (300 - 1) + sum(len(c) + 1 for c in conts)
    alone = [scoring.score_continuations(prefix_model, prefix, [c], n_scored=6, chunk_size=64)[0] for c in conts]
    reversed_order = scoring.score_continuations(prefix_model, prefix, conts[::-1], n_scored=6, chunk_size=64)[::-1]
    # equal-length continuations share a forward (rows of a batch round differently by a few float32 units)
    for a, b, c in zip(shared, alone, reversed_order):
        np.testing.assert_allclose(a.logprob, b.logprob, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a.logprob, c.logprob, atol=1e-5, rtol=0)


def test_score_sequence_ends_batches_equal_one_forward_each(prefix_model):
    seqs = [random_ids(n, 20 + n) for n in (15, 9, 30, 9, 2, 21)]
    n_scored = [6, 8, 3, 1, 1, 20]
    out = scoring.score_sequence_ends(prefix_model, seqs, n_scored, batch_size=4)
    for s, k, res in zip(seqs, n_scored, out):
        lp, greedy = brute_last(prefix_model, s, k)
        np.testing.assert_allclose(res.logprob, lp, atol=TOL, rtol=0)
        np.testing.assert_array_equal(res.greedy, greedy)
    with pytest.raises(scoring.ScoringError, match="last 9 tokens of a 9-token"):
        scoring.score_sequence_ends(prefix_model, [random_ids(9, 0)], 9)


# ------------------------------------------------------------------ the prefix ladder


@pytest.fixture(scope="module")
def ladder_model():
    return tiny_llama(vocab_size=97, seed=7)


@pytest.mark.parametrize("chunk", [1, 5, 32, 200, 1000])
def test_ladder_equals_one_forward_per_sequence_and_per_length_calls(ladder_model, chunk):
    seq = random_ids(200, 0)
    # rungs: a one-token prefix (nothing cached), interior lengths, the whole sequence
    rungs = [
        (1, [random_ids(7, 1)]),
        (37, [random_ids(9, 2), random_ids(4, 3)]),
        (38, [random_ids(5, 4)]),
        (130, [random_ids(8, 5), random_ids(8, 6), random_ids(3, 7)]),
        (200, [random_ids(6, 8)]),
    ]
    out = scoring.score_prefix_ladder(ladder_model, seq, rungs, n_scored=3, chunk_size=chunk)
    assert [len(r) for r in out] == [len(c) for _, c in rungs]
    for (p, conts), rung in zip(rungs, out):
        per_length = scoring.score_continuations(ladder_model, seq[:p], conts, n_scored=3, chunk_size=chunk)
        for c, res, ref in zip(conts, rung, per_length):
            lp, greedy = brute_last(ladder_model, torch.cat([seq[:p], c]), 3)
            assert res.logprob.shape == (3,)
            np.testing.assert_allclose(res.logprob, lp, atol=TOL, rtol=0)
            np.testing.assert_array_equal(res.greedy, greedy)
            np.testing.assert_allclose(res.logprob, ref.logprob, atol=1e-5, rtol=0)
    # whole continuations by default (the first token read off the prefix's last token)
    [[whole]] = scoring.score_prefix_ladder(ladder_model, seq, [(50, [random_ids(6, 9)])], chunk_size=chunk)
    np.testing.assert_allclose(
        whole.logprob, brute_last(ladder_model, torch.cat([seq[:50], random_ids(6, 9)]), 6)[0], atol=TOL
    )


def test_ladder_reads_the_prefix_once(ladder_model):
    seq = random_ids(300, 10)
    rungs = [
        (50, [random_ids(10, 11), random_ids(10, 12)]),
        (150, [random_ids(10, 13)]),
        (300, [random_ids(10, 14), random_ids(4, 15)]),
    ]
    assert forward.capabilities(ladder_model).packing_problem is None  # its probes run now, before the count
    seen = []
    hook = ladder_model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].numel()))
    try:
        scoring.score_prefix_ladder(ladder_model, seq, rungs, n_scored=4, chunk_size=64)
    finally:
        hook.remove()
    # the prefix once up to the longest rung (each rung's last token travels with its continuations)
    assert sum(seen) == (300 - 1) + sum(len(c) + 1 for _, cs in rungs for c in cs)


def test_ladder_rejects_bad_rungs(ladder_model):
    seq = random_ids(40, 0)
    for rungs in (
        [(10, [random_ids(3, 1)]), (10, [random_ids(3, 1)])],
        [(20, [random_ids(3, 1)]), (10, [random_ids(3, 1)])],
        [(41, [random_ids(3, 1)])],
        [(0, [random_ids(3, 1)])],
    ):
        with pytest.raises(scoring.ScoringError, match="increase strictly"):
            scoring.score_prefix_ladder(ladder_model, seq, rungs)
    with pytest.raises(scoring.ScoringError, match="last 4 tokens of a 3-token"):
        scoring.score_prefix_ladder(ladder_model, seq, [(10, [random_ids(3, 1)])], n_scored=4)
