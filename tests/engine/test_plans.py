"""Plans: which attention kernel a model runs, what a plan counts, which plan the planner takes for the free memory
it is given, and out-of-memory errors at every stage of every pass retried under the next plan with the same
numbers (CPU: the kernel probe's answer, the free memory and the errors are injected where a GPU would give them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lm_eval_longctx.engine import attention, forward, memory, plans, scoring
from tests import families
from tests.tiny import tiny_llama

VOCAB = 97


def ids_for(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def llama(**overrides):
    return tiny_llama(vocab_size=VOCAB, seed=3, **overrides)  # 4 query heads, 2 key/value heads


MATH = attention.AttentionKernel("math", heads=4, head_dim=8, bytes_per_score=8)


def with_kernels(monkeypatch, model, no_cache, with_cache=None):
    caps = forward.capabilities(model)
    monkeypatch.setattr(caps, "attention", attention.AttentionKernels(no_cache, with_cache or no_cache))


# ------------------------------------------------------------------ the kernel probe


def test_the_probe_names_the_kernel_pytorchs_dispatch_rule_gives_the_models_own_calls():
    model = llama()
    kernels = forward.capabilities(model).attention
    # the same question asked directly, of the shapes a Llama forward with and without a cache hands SDPA
    q, k = torch.randn(1, 4, 8, 8), torch.randn(1, 2, 8, 8)
    no_cache = torch._fused_sdp_choice(q, k, k, None, 0.0, True, scale=None, enable_gqa=True)
    k4, mask = torch.randn(1, 4, 16, 8), torch.ones(1, 1, 8, 16, dtype=torch.bool)
    with_cache = torch._fused_sdp_choice(q, k4, k4, mask, 0.0, False, scale=None, enable_gqa=False)
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
    assert kernels.no_cache.name == names[int(no_cache)] and not kernels.no_cache.repeats_kv
    assert kernels.with_cache.name == names[int(with_cache)]
    assert kernels.with_cache.repeats_kv  # grouped-query keys are repeated per head when a mask is given
    assert (kernels.no_cache.heads, kernels.no_cache.head_dim) == (4, 8)


def test_eager_attention_is_counted_quadratic_and_a_recurrent_model_has_none():
    eager = llama(attn_implementation="eager")
    kernel = forward.capabilities(eager).attention.no_cache
    assert kernel.name == "eager" and kernel.quadratic
    full_eager = memory.full_forward_bytes(eager, 4000, 1, "cpu", kernel)
    assert full_eager >= 4 * 4000 * 4000 * kernel.bytes_per_score  # [heads x n x n] scores counted
    mamba = families.build("mamba")
    assert forward.capabilities(mamba).attention.no_cache.name == "none"


def test_the_math_kernel_recorded_under_a_mode_that_sees_every_sdpa_call():
    """The recorder sees SDPA calls made through torch.nn.functional, as transformers makes them."""
    with attention.recording_sdpa_calls() as calls:
        F.scaled_dot_product_attention(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))
    assert len(calls.calls) == 1


# ------------------------------------------------------------------ the planner and the free memory


def test_the_planner_never_takes_a_plan_counted_above_the_free_memory(monkeypatch):
    """For every free-memory figure, the plan taken counts at most the usable share of it (the math kernel's
    quadratic scores included), or the pass is refused before any work, naming what it needs."""
    model = llama()
    with_kernels(monkeypatch, model, MATH)
    rng = np.random.default_rng(0)
    for _ in range(60):
        n, batch = int(rng.integers(64, 20000)), int(rng.integers(1, 9))
        candidates = plans.long_pass_plans(model, n, batch, "auto", 1024)
        free = int(rng.uniform(0.2, 1.5) * candidates[0].need_bytes)
        try:
            plan = plans.choose(candidates, "auto", free)
        except scoring.ScoringError as err:
            assert all(p.need_bytes > memory.FREE_MEMORY_SHARE * free for p in candidates)
            assert "is free on cpu (math attention)" in str(err) and "Ways out" in str(err)
            continue
        assert plan.need_bytes <= memory.FREE_MEMORY_SHARE * free
        assert plan is next(p for p in candidates if p.need_bytes <= memory.FREE_MEMORY_SHARE * free)


def test_the_math_kernel_sends_a_long_sequence_to_chunks_where_a_fused_kernel_keeps_one_forward(monkeypatch):
    model = llama()
    n = 16384
    fused = plans.long_pass_plans(model, n, 1, "auto", 1024)[0]
    free = int(2 * fused.need_bytes / memory.FREE_MEMORY_SHARE)
    assert plans.choose(plans.long_pass_plans(model, n, 1, "auto", 1024), "auto", free).strategy == "full"
    with_kernels(monkeypatch, model, MATH)
    candidates = plans.long_pass_plans(model, n, 1, "auto", 1024)
    assert candidates[0].need_bytes >= 4 * n * n * 8  # the [heads x n x n] float32 scores and their softmax
    chosen = plans.choose(candidates, "auto", free)
    assert chosen.strategy == "chunked"
    # without a cache-exact family the same memory refuses before any work, saying how much one forward needs
    mamba = families.build("mamba")
    mamba_plans = plans.long_pass_plans(mamba, n, 1, "auto", 1024)
    with pytest.raises(scoring.ScoringError, match=r"one forward of 1 x 16384 tokens needs about .* GiB and"):
        plans.choose(mamba_plans, "auto", mamba_plans[-1].need_bytes // 2)


def test_fewer_sequences_per_forward_before_chunks_then_smaller_chunks():
    model = llama()
    candidates = plans.long_pass_plans(model, 4096, 4, "auto", 1024)
    assert [(p.strategy, p.batch, p.chunk_size) for p in candidates] == [
        ("full", 4, None),
        ("full", 2, None),
        ("full", 1, None),
        ("chunked", 4, 1024),
        ("chunked", 2, 1024),
        ("chunked", 1, 1024),
        ("chunked", 1, 512),
        ("chunked", 1, 256),
        ("chunked", 1, 128),
        ("chunked", 1, 64),
    ]
    assert [p.need_bytes for p in candidates[:3]] == sorted(p.need_bytes for p in candidates[:3])[::-1]
    assert candidates[0].fallbacks == tuple(candidates[1:])


# ------------------------------------------------------------------ out of memory at every stage


def oom_once(monkeypatch, owner, name, when=lambda *args, **kwargs: True):
    """Make ``owner.name`` raise a CUDA out-of-memory error the first time ``when(*args)`` holds."""
    real = getattr(owner, name)
    raised = []

    def patched(*args, **kwargs):
        if not raised and when(*args, **kwargs):
            raised.append(1)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 44.56 GiB (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, patched)
    return raised


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(np.isnan(x.logprob), np.isnan(y.logprob))
        assert np.nanmax(np.abs(x.logprob - y.logprob)) <= 1e-5
        assert np.array_equal(x.greedy, y.greedy)


def retries(record) -> list[dict]:
    return record.summary().get("retries", [])


@pytest.mark.parametrize("long_pass", ["full", "chunked"])
def test_an_oom_in_the_long_pass_is_retried_with_fewer_sequences_and_the_same_numbers(monkeypatch, long_pass):
    model = llama()
    seqs = [ids_for(150, s) for s in range(4)]
    clean = scoring.score_long_batch(model, seqs, chunk_size=32, long_pass=long_pass)
    if long_pass == "full":
        raised = oom_once(monkeypatch, forward.FullForward, "__init__", lambda self, m, ids, s: ids.shape[0] == 4)
    else:
        raised = oom_once(monkeypatch, forward.KVCache, "feed", lambda self, ids, keep: ids.shape[0] == 4)
    with scoring.recording(model) as record:
        got = scoring.score_long_batch(model, seqs, chunk_size=32, long_pass=long_pass)
    assert raised and len(retries(record)) == 1
    retry = retries(record)[0]
    assert retry["failed"]["batch"] == 4 and retry["retried_with"]["batch"] == 2 and "44.56 GiB" in retry["error"]
    assert record.summary()["passes"] == {"long": {long_pass: 4}}
    assert_same(clean, got)


def test_an_oom_in_separate_sequences_is_retried(monkeypatch):
    model = llama()
    clean = scoring.score_truncated(model, [ids_for(300, 1)], 64, 16, batch_size=8)
    raised = oom_once(monkeypatch, forward.FullForward, "__init__", lambda self, m, ids, s: ids.shape[0] > 1)
    with scoring.recording(model) as record:
        got = scoring.score_truncated(model, [ids_for(300, 1)], 64, 16, batch_size=8)
    assert raised and retries(record)[0]["pass"] == "a pass of separate sequences"
    assert_same(clean, got)


@pytest.mark.parametrize("stage", ["prefix fill", "packed continuations", "one continuation per forward"])
def test_an_oom_on_a_shared_prefix_is_retried(monkeypatch, stage):
    model = llama()
    doc = ids_for(300, 2)
    conts = [ids_for(10, 3), ids_for(12, 4), ids_for(10, 5)]
    rungs = [(60, conts[:2]), (150, conts), (300, conts[1:])]
    clean_ladder = scoring.score_prefix_ladder(model, doc, rungs, n_scored=5)
    clean_conts = scoring.score_continuations(model, doc[:200], conts, n_scored=[4, 12, 6])
    # a prefix fill: a forward with no mask of its own; a packed read: several continuations behind one mask
    if stage == "prefix fill":
        when = lambda self, ids, keep, **kw: ids.shape[1] > 20 and "attention_mask" not in kw  # noqa: E731
    elif stage == "packed continuations":
        when = lambda self, ids, keep, **kw: "attention_mask" in kw and self.length >= 100  # noqa: E731
    else:  # one continuation per forward
        monkeypatch.setattr(plans.Plan, "packed_tokens", lambda *args: 0)
        when = lambda self, ids, keep, **kw: ids.shape[1] <= 20 and self.length >= 100  # noqa: E731
    with scoring.recording(model) as record:
        raised = oom_once(monkeypatch, forward.KVCache, "feed", when)
        ladder = scoring.score_prefix_ladder(model, doc, rungs, n_scored=5)
        assert raised
        raised = oom_once(monkeypatch, forward.KVCache, "feed", when)
        got_conts = scoring.score_continuations(model, doc[:200], conts, n_scored=[4, 12, 6])
        assert raised
    assert len(retries(record)) == 2
    if stage == "packed continuations":  # the same cache, half as many tokens per packed forward
        for retry in retries(record):
            assert retry["pass"] == "packed continuations"
            assert retry["retried_with"]["tokens_per_forward"] == retry["failed"]["tokens_per_forward"] // 2
    else:
        assert {r["failed"]["strategy"] for r in retries(record)} == {"full"}
        assert {r["retried_with"]["strategy"] for r in retries(record)} == {"chunked"}
    for a, b in zip(clean_ladder, ladder, strict=True):
        assert_same(a, b)
    assert_same(clean_conts, got_conts)


def test_oom_under_every_plan_is_an_error_naming_the_pass_and_the_ways_out(monkeypatch):
    model = llama()

    def always(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(forward.FullForward, "__init__", always)
    monkeypatch.setattr(forward.KVCache, "feed", always)
    with pytest.raises(scoring.OutOfMemoryScoringError, match="out of memory in the long pass even under the smallest"):
        scoring.score_long(model, ids_for(100, 1), chunk_size=64)


def test_a_cpu_allocation_failure_counts_as_out_of_memory():
    assert plans.is_out_of_memory(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory: 1 GB"))
    assert plans.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not plans.is_out_of_memory(RuntimeError("shape mismatch"))


# ------------------------------------------------------------------ one copy of a shared prefix


def test_continuations_read_the_one_copy_of_the_prefix(monkeypatch):
    """No per-row copy of the prefix's cache: every forward on the cache has one row, and the cache is never
    repeated along the batch."""
    from transformers import DynamicCache

    model = llama()
    doc = ids_for(400, 7)
    conts = [ids_for(8, s) for s in range(10)]
    rows = []
    real = forward.KVCache.feed
    monkeypatch.setattr(
        forward.KVCache, "feed", lambda self, ids, keep, **kw: rows.append(ids.shape[0]) or real(self, ids, keep, **kw)
    )
    monkeypatch.setattr(DynamicCache, "batch_repeat_interleave", lambda *a: pytest.fail("the cache was repeated"))
    scoring.score_prefix_ladder(model, doc, [(100, conts), (400, conts)], n_scored=4, batch_size=10)
    assert rows and set(rows) == {1}


def test_token_ids_beyond_the_embedding_are_refused_before_any_forward():
    model = llama()
    forward.capabilities(model)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    bad = ids_for(50, 1)
    bad[10] = VOCAB + 5
    with pytest.raises(scoring.ScoringError, match=r"token id 102 is outside the model's input embedding \(97 rows\)"):
        scoring.score_long(model, bad)
    with pytest.raises(scoring.ScoringError, match="outside the model's input embedding"):
        scoring.score_continuations(model, ids_for(50, 1), [bad[:12]])
    assert calls == []


# ------------------------------------------------------------------ continuations packed into one forward


def test_the_packed_layout_puts_each_sequence_at_its_own_positions_behind_the_cache():
    positions, mask = forward.packed_layout(2, [2, 1], torch.float32, torch.device("cpu"))
    assert positions.tolist() == [[2, 3, 2]]
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1]]
    assert mask.dtype == torch.float32 and float(mask.min()) == torch.finfo(torch.float32).min


def test_a_model_that_would_ignore_the_packed_mask_reads_one_continuation_per_forward(monkeypatch):
    """The probe compares packed sequences with each fed alone: a mask that lets one continuation see another (as a
    model that builds its own causal mask would) is caught, and the continuations are read one per forward."""
    model = llama()
    real = forward.packed_layout
    monkeypatch.setattr(forward, "packed_layout", lambda held, lengths, *a: real(held, [sum(lengths)], *a))
    problem = forward.capabilities(model).packing_problem
    assert problem and "do not get the logits each gets alone" in problem
    doc, conts = ids_for(120, 8), [ids_for(6, 9), ids_for(4, 10)]
    with scoring.recording(model) as record:
        got = scoring.score_continuations(model, doc, conts)
    assert record.summary()["passes"]["continuation_forwards"] == {"one_per_forward": 2}
    for c, res in zip(conts, got):
        ids = torch.cat([doc, c])
        ref = torch.log_softmax(llama()(input_ids=ids[None]).logits[0, -len(c) - 1 : -1].float(), -1)
        assert np.max(np.abs(res.logprob - ref.gather(1, c[:, None]).squeeze(1).detach().numpy())) <= 1e-4


def test_a_packed_read_takes_as_many_tokens_as_the_free_memory_allows(monkeypatch):
    model = llama()
    plan = plans.choose(plans.long_pass_plans(model, 400, 1, "auto", 1024, keep_cache=True))
    lengths = [9] * 20
    assert plan.packed_tokens(300, lengths) == 180  # all of them: within chunk_size, and the CPU has room
    kernel = forward.capabilities(model).attention.with_cache
    need = memory.packed_read_bytes(model, 300, 45, "cpu", kernel)
    free = int(need / memory.FREE_MEMORY_SHARE) + 1
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    assert plan.packed_tokens(300, lengths) == 45  # 180 -> 90 -> 45
    assert memory.packed_read_bytes(model, 300, 90, "cpu", kernel) > memory.FREE_MEMORY_SHARE * free
    assert (
        plans.choose(plans.long_pass_plans(model, 400, 1, "auto", 16, keep_cache=True)).packed_tokens(300, lengths)
        == 16
    )  # never more than a chunk
