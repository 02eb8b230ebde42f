"""Generation counts the tokens it forwards step by step (``engine/generation.py``): a progress bar ticks inside one
generate call, the count is what ran, and the plan of the work still to come follows the steps' time."""

from __future__ import annotations

import torch

from lm_eval_longctx.engine import generation, recording
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
