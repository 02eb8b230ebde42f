"""Greedy generation after long prompts (``engine/generation.py``): batched answers equal one-prompt-at-a-time
answers on every family the support matrix builds, each row stops at its stop token, and an out-of-memory error
halves the batch. Generation counts the tokens it forwards step by step: a progress bar ticks inside one generate
call, the count is what ran, and the plan of the work still to come follows the steps' time."""

from __future__ import annotations

import pytest
import torch

from lm_eval_longctx.engine import forward, generation, recording, scoring
from tests import families
from tests.tiny import tiny_llama


def test_generation_counts_the_prompts_then_one_token_a_row_at_every_step():
    model = tiny_llama(vocab_size=97, seed=3)
    prompts = [torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (20, 13, 7)]
    settings = generation.GenerationSettings(max_new_tokens=9, stop_token_ids=(), pad_token_id=0)
    generation.generate(model, prompts[:1], settings)  # the engine's probes of the model run once, before
    work: list[float] = []
    revisions: list[float] = []
    with recording.recording(model) as record:
        record.listeners.append(work.append)
        record.revisers.append(revisions.append)
        out = generation.generate(model, prompts, settings, batch_size=2)
    # batches of the longest first: [20, 13] padded to 20, then [7]; 9 steps each (no stop token)
    assert [len(o) for o in out] == [9, 9, 9]
    assert record.tokens_forwarded == 2 * (20 + 8) + (7 + 8)  # the prompts, then one token a row a step
    assert len(work) == 18 and work[0] == 2 * 20 and work[9] == 7  # a tick at every step
    assert all(w > 0 for w in work)  # a step after the first: its time in tokens of the prompts' forward
    # the plan (the prompt and one a new token, per prompt), revised at the first step after the prompts (what a
    # step costs) and after each call (what the steps took), adds up to the work that ran
    plan = sum(generation.planned_work(len(p), 9) for p in prompts)
    assert len(revisions) == 3 and abs(plan + sum(revisions) - sum(work)) < 1e-6
    # the answers are the same as without counting (the criterion never stops a row)
    assert [o.tolist() for o in out] == [o.tolist() for o in generation.generate(model, prompts, settings, 2)]


GENERATING = ["llama", "mistral", "gemma2", "gpt2", "bloom", "opt", "mamba", "jamba"]


def prompts(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, families.VOCAB, (int(n),), generator=g) for n in (70, 64, 70, 41, 66, 58)]


def settings(max_new: int = 12, stop=(2,)) -> generation.GenerationSettings:
    return generation.GenerationSettings(max_new_tokens=max_new, stop_token_ids=tuple(stop), pad_token_id=0)


@pytest.mark.parametrize("name", [n for n in GENERATING if n in families.FAMILY_CONFIGS])
def test_batched_generation_gives_the_answers_of_one_prompt_at_a_time(name):
    model = families.build(name)
    ps = prompts(1)
    one = generation.generate(model, ps, settings(), batch_size=1)
    batched = generation.generate(model, ps, settings(), batch_size=4)
    assert [a.tolist() for a in batched] == [a.tolist() for a in one]
    # and what a plain greedy loop over full forwards gives
    for p, got in zip(ps[:2], one):
        ids = p.clone()
        want = []
        with torch.no_grad():
            for _ in range(12):
                nxt = int(model(input_ids=ids[None], use_cache=False).logits[0, -1].argmax())
                if nxt == 2:
                    break
                want.append(nxt)
                ids = torch.cat([ids, torch.tensor([nxt])])
        assert got.tolist() == want


def test_each_row_stops_at_its_own_stop_token():
    model = families.build("llama")
    ps = prompts(2)
    free = generation.generate(model, ps, settings(stop=()), batch_size=3)
    assert all(len(a) == 12 for a in free)
    # the second token each prompt generates, taken as its stop token: each row stops there on its own
    stops = {int(a[1]) for a in free}
    got = generation.generate(model, ps, settings(stop=tuple(stops)), batch_size=3)
    for a, g in zip(free, got):
        cut = next(i for i, t in enumerate(a.tolist()) if t in stops)
        assert g.tolist() == a.tolist()[:cut]


def test_an_oom_halves_the_batch_and_keeps_the_answers(monkeypatch):
    model = families.build("llama")
    ps = prompts(3)
    clean = generation.generate(model, ps, settings(), batch_size=4)
    real = type(model).generate
    raised = []

    def generate(self, *args, **kwargs):
        if not raised and kwargs["input_ids"].shape[0] == 4:
            raised.append(1)
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "generate", generate)
    with scoring.recording(model) as record:
        got = generation.generate(model, ps, settings(), batch_size=4)
    assert raised and record.summary()["retries"][0]["retried_with"]["batch"] == 2
    assert [a.tolist() for a in got] == [a.tolist() for a in clean]


def test_ids_beyond_the_embedding_are_refused_before_generating():
    model = families.build("llama")
    forward.capabilities(model)
    bad = prompts(4)[0].clone()
    bad[3] = families.VOCAB + 1
    with pytest.raises(scoring.ScoringError, match="outside the model's input embedding"):
        generation.generate(model, [bad], settings())
