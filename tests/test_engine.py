"""The engine against slow, obviously-correct computations (float32, random tiny models)."""

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine.scoring import ScoringError, score_long, score_truncated, truncated_windows
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
