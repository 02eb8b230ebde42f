"""The support matrix: on a tiny random model of every declared family, every pass of the engine equals
brute-force full forwards (a fresh copy of the model, one plain forward per sequence, log_softmax at the
targets) to float32 tolerance, or the engine refuses the model before any work with an error that names it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lm_eval_longctx.engine import forward, scoring, support
from tests import families

TOL = 1e-4
N = 200  # tokens of the long sequence: beyond the sliding windows (32) and the RoPE switch (64)

EXACT = list(families.FAMILY_CONFIGS)


def ids_for(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, families.VOCAB, (n,), generator=g)


@torch.no_grad()
def brute_force(name: str, ids: torch.Tensor):
    """One plain forward of ids on a freshly built copy of the family's model: float32 log-probs of every next
    token, and the top-2 margin (greedy hits are compared only where the top choice is not a near tie)."""
    model = families.build(name)
    logits = model(input_ids=ids[None], use_cache=False).logits[0].float()
    lp = torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None]).squeeze(1)
    top2 = logits[:-1].topk(2, dim=-1).values
    greedy = logits[:-1].argmax(-1) == ids[1:]
    return lp.numpy(), greedy.numpy(), (top2[:, 0] - top2[:, 1]).numpy()


def assert_equal_scores(got_lp, got_greedy, ref_lp, ref_greedy, margin, where: str):
    assert got_lp.shape == ref_lp.shape, where
    diff = np.max(np.abs(got_lp - ref_lp)) if len(ref_lp) else 0.0
    assert diff <= TOL, f"{where}: max |logprob difference| {diff:.3g}"
    clear = margin > 1e-3
    assert np.array_equal(got_greedy[clear], ref_greedy[clear]), where


def test_every_declared_model_type_has_a_tiny_model_here():
    declared = {t for f in support.FAMILIES for t in f.model_types}
    built = {model_type for model_type, _ in families.FAMILY_CONFIGS.values()}
    assert declared <= built, f"declared but not tested: {sorted(declared - built)}"


def refused_here(model) -> bool:
    """A family this transformers release cannot serve (support.VERSION_LIMITS): the engine refuses it, saying why."""
    reason = support.describe(model).refused
    if reason:
        with pytest.raises(scoring.ScoringError, match="refused with transformers"):
            scoring.check_model(model)
    return bool(reason)


@pytest.mark.parametrize("name", EXACT)
def test_long_pass_equals_one_forward(name):
    model = families.build(name)
    if refused_here(model):
        return
    ids = ids_for(N, seed=1)
    ref_lp, ref_g, margin = brute_force(name, ids)
    caps = forward.capabilities(model)
    if not caps.full:  # a transformers whose forward for this family cannot keep only the last logits: chunks
        assert caps.support.kv_cache_exact and "logits_to_keep" in caps.full_problem, caps.full_problem
    for long_pass in ("auto", "full") if caps.full else ("auto",):
        got = scoring.score_long(model, ids, long_pass=long_pass)
        assert_equal_scores(got.logprob, got.greedy, ref_lp, ref_g, margin, f"{name} {long_pass}")
    got = scoring.score_long(model, ids, score_from=150)
    assert np.isnan(got.logprob[:149]).all()
    assert_equal_scores(
        got.logprob[149:], got.greedy[149:], ref_lp[149:], ref_g[149:], margin[149:], f"{name} score_from"
    )
    if caps.support.kv_cache_exact:
        for chunk in (7, 64):
            got = scoring.score_long(model, ids, chunk_size=chunk, long_pass="chunked")
            assert_equal_scores(got.logprob, got.greedy, ref_lp, ref_g, margin, f"{name} chunked {chunk}")
    else:
        with pytest.raises(scoring.ScoringError, match=f"model type '{caps.support.model_type}'"):
            scoring.score_long(model, ids, chunk_size=64, long_pass="chunked")


@pytest.mark.parametrize("name", EXACT)
def test_batched_long_pass_and_truncated_windows_equal_one_forward_each(name):
    model = families.build(name)
    if refused_here(model):
        return
    seqs = [ids_for(120, seed=s) for s in (2, 3)]
    refs = [brute_force(name, s) for s in seqs]
    for got, (ref_lp, ref_g, margin) in zip(scoring.score_long_batch(model, seqs), refs):
        assert_equal_scores(got.logprob, got.greedy, ref_lp, ref_g, margin, f"{name} batch of 2")
    # truncated windows K = 48, d = 20: each window ids[s : s + K + d'] on its own
    long_seq = ids_for(150, seed=4)
    K, d = 48, 20
    got = scoring.score_truncated(model, [long_seq, seqs[0]], K, d, batch_size=2)
    for result, s in zip(got, [long_seq, seqs[0]]):
        n = len(s)
        assert np.isnan(result.logprob[: K - 1]).all()
        for w in scoring.truncated_windows(n, K, d):
            wlp, wg, wm = brute_force(name, s[w.start : w.stop])
            k = w.stop - w.score_from
            assert_equal_scores(
                result.logprob[w.score_from - 1 : w.stop - 1],
                result.greedy[w.score_from - 1 : w.stop - 1],
                wlp[-k:],
                wg[-k:],
                wm[-k:],
                f"{name} window {w}",
            )


@pytest.mark.parametrize("name", EXACT)
def test_continuations_and_the_ladder_equal_one_forward_each(name):
    model = families.build(name)
    if refused_here(model):
        return
    doc = ids_for(N, seed=5)
    prefix = doc[:150]
    conts = [ids_for(10, seed=6), ids_for(10, seed=7), ids_for(6, seed=8)]
    with scoring.recording(model) as record:
        got = scoring.score_continuations(model, prefix, conts, n_scored=[4, 10, 6], batch_size=2)
    for c, k, res in zip(conts, [4, 10, 6], got):
        lp, g, m = brute_force(name, torch.cat([prefix, c]))
        assert_equal_scores(res.logprob, res.greedy, lp[-k:], g[-k:], m[-k:], f"{name} continuation")
    rungs = [(40, conts[:2]), (100, conts[1:]), (N, conts)]
    ladder = scoring.score_prefix_ladder(model, doc, rungs, n_scored=5, batch_size=2)
    for (p, cs), results in zip(rungs, ladder):
        for c, res in zip(cs, results):
            lp, g, m = brute_force(name, torch.cat([doc[:p], c]))
            assert_equal_scores(res.logprob, res.greedy, lp[-5:], g[-5:], m[-5:], f"{name} ladder rung {p}")
    caps = forward.capabilities(model)
    if caps.support.kv_cache_exact:  # the chunked ladder too
        chunked = scoring.score_prefix_ladder(model, doc, rungs, n_scored=5, chunk_size=16, long_pass="chunked")
        for a, b in zip(ladder, chunked):
            for x, y in zip(a, b):
                assert np.max(np.abs(x.logprob - y.logprob)) <= TOL
    used = record.summary()["passes"]["continuations"]
    assert used == {"shared_kv_cache" if caps.support.kv_cache_exact else "one_forward_each": 3}


@pytest.mark.parametrize("name", EXACT)
def test_packed_continuations_equal_one_forward_each(name):
    """Continuations packed into one forward on their prefix's cache, where the model allows it, equal one forward
    each: within the sliding windows (a short prefix) and beyond them (where a windowed model reads them one per
    forward); a model that does not allow it reads one per forward."""
    model = families.build(name)
    if refused_here(model):
        return
    caps = forward.capabilities(model)
    if not caps.support.kv_cache_exact:
        assert caps.packing_problem == caps.support.no_cache_reason
        return
    doc = ids_for(N, seed=9)
    conts = [ids_for(5, seed=10), ids_for(3, seed=11), ids_for(6, seed=12), ids_for(4, seed=13)]
    window = support.attention_window(model)
    # prefix 8: 7 cached positions + 22 packed ones stay within the 32-token windows; prefix 150 goes beyond them
    for p in (8, 150):
        with scoring.recording(model) as record:
            got = scoring.score_continuations(model, doc[:p], conts)
        for c, res in zip(conts, got):
            lp, g, m = brute_force(name, torch.cat([doc[:p], c]))
            k = len(c)
            assert_equal_scores(res.logprob, res.greedy, lp[-k:], g[-k:], m[-k:], f"{name} packed after {p}")
        packs = caps.packing_problem is None and (window is None or p - 1 + sum(len(c) + 1 for c in conts) <= window)
        forwards = record.summary()["passes"]["continuation_forwards"]
        assert forwards == ({"packed": 1} if packs else {"one_per_forward": len(conts)}), (p, forwards)


def test_the_attention_families_that_take_a_mask_pack_their_continuations():
    models = {name: families.build(name) for name in EXACT}
    allowed = {name for name, model in models.items() if forward.capabilities(model).packing_problem is None}
    assert {"llama", "mistral", "qwen3", "gemma", "gemma2", "phi3", "gpt2", "gpt_neox", "gptj", "opt"} <= allowed
    # ALiBi built from a 2-D mask, length-dependent RoPE, recurrent state: one continuation per forward
    refused = {"bloom", "mpt", "falcon_alibi", "llama_rope_dynamic", "phi3_longrope", "mamba", "jamba"}
    assert not refused & allowed


class _OwnHeadModel(torch.nn.Module):
    """A model type of no declared family whose logits come from no decoder module the engine can read (its forward
    computes them from a Llama's logits itself): neither strategy is exact for it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = type("Config", (), {"model_type": "own_head", "vocab_size": families.VOCAB})()

    def forward(self, input_ids, **kwargs):
        out = self.inner(input_ids=input_ids, use_cache=False)
        out["logits"] = 2.0 * out.logits
        return out


def test_a_model_no_strategy_scores_exactly_is_refused_before_any_work():
    model = _OwnHeadModel(families.build("llama"))
    for long_pass in ("auto", "full", "chunked"):
        with pytest.raises(scoring.ScoringError, match="model type 'own_head'") as err:
            scoring.check_model(model, long_pass)
        assert "docs/support.md" in str(err.value)
    forwards = []
    model.register_forward_pre_hook(lambda *a: forwards.append(1))
    with pytest.raises(scoring.ScoringError, match="cannot score this model exactly"):
        scoring.score_long(model, ids_for(40, seed=1))
    with pytest.raises(scoring.ScoringError):
        scoring.score_continuations(model, ids_for(40, seed=1), [ids_for(5, seed=2)])
    with pytest.raises(scoring.ScoringError):
        scoring.score_truncated(model, [ids_for(40, seed=1)], 16, 8)
    assert forwards == []  # refused from what the first look found, with no forward since


@pytest.mark.parametrize("name", sorted(families.LENGTH_DEPENDENT_ROPE))
def test_length_dependent_rope_scores_each_sequence_as_a_freshly_loaded_model_would(name):
    """dynamic NTK keeps the longest sequence's frequencies in transformers; LongRoPE picks its factors per
    forward. Scoring a long sequence first must not change a later, shorter one; and sequences below and above
    the switch are both exact."""
    model = families.build(name)
    scoring.score_long(model, ids_for(300, seed=9))
    for n in (families.ORIGINAL_POSITIONS + 30, families.ORIGINAL_POSITIONS - 10):
        ids = ids_for(n, seed=n)
        ref_lp, ref_g, margin = brute_force(name, ids)
        got = scoring.score_long(model, ids)
        assert_equal_scores(got.logprob, got.greedy, ref_lp, ref_g, margin, f"{name} n={n} after a longer one")
    # the engine's answer differs from what KV-cache chunks would give: the refusal is not theoretical
    ids = ids_for(N, seed=1)
    ref_lp, _, _ = brute_force(name, ids)
    chunked = families.build(name)
    cache_arg = forward.cache_argument(chunked)
    from transformers import DynamicCache

    cache, lps = DynamicCache(), []
    with torch.no_grad():
        for a in range(0, N, 32):
            out = chunked(input_ids=ids[None, a : a + 32], use_cache=True, **{cache_arg: cache})
            cache = forward.returned_cache(out)
            lps.append(torch.log_softmax(out.logits[0].float(), -1))
    lp = torch.cat(lps)[:-1].gather(1, ids[1:, None]).squeeze(1).numpy()
    assert np.max(np.abs(lp - ref_lp)) > 1e-3


def test_version_limits_refuse_only_older_transformers():
    assert support.version_refusal("xlstm", "4.57.1").startswith(
        "model type 'xlstm' is refused with transformers 4.57.1"
    )
    assert support.version_refusal("xlstm", "5.24.0") == "" and support.version_refusal("llama", "4.48.0") == ""


def test_the_docs_support_table_is_the_declared_one():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "support.md").read_text(encoding="utf-8")
    assert support.TABLE_START in page
    assert support.render_support_table(page) == page, "run: python scripts/settings_tables.py"
