"""Greedy generation after long prompts: batched answers equal one-prompt-at-a-time answers on every family the
support matrix builds, each row stops at its stop token, and an out-of-memory error halves the batch."""

from __future__ import annotations

import pytest
import torch

from lm_eval_longctx.engine import forward, generation
from lm_eval_longctx.engine import scoring as engine
from tests import families

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
    with engine.recording(model) as record:
        got = generation.generate(model, ps, settings(), batch_size=4)
    assert raised and record.summary()["retries"][0]["retried_with"]["batch"] == 2
    assert [a.tolist() for a in got] == [a.tolist() for a in clean]


def test_ids_beyond_the_embedding_are_refused_before_generating():
    model = families.build("llama")
    forward.capabilities(model)
    bad = prompts(4)[0].clone()
    bad[3] = families.VOCAB + 1
    with pytest.raises(engine.ScoringError, match="outside the model's input embedding"):
        generation.generate(model, [bad], settings())
