"""Greedy generation after long prompts, batched, on the model's own cache (``model.generate``).

Prompts are ordered by length and go up to ``batch_size`` at a time, left-padded with an attention mask (generate
sets each row's positions from it), so a batch holds prompts of about one size. Each row stops at a stop token (the
tokenizer's end of sequence, as LongChat's evaluation does), at a stop string, or after ``max_new_tokens``. The
batch per generate call is chosen by memory and halved after an out-of-memory error (``plans.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from . import memory, plans, recording
from .forward import ScoringError, capabilities, causal_lm, input_device
from .passes import as_ids, check_positions, check_token_ids


@dataclass(frozen=True)
class GenerationSettings:
    """How to generate: greedy unless ``do_sample`` (then ``temperature``, ``top_p``, ``top_k`` as generate takes
    them), at most ``max_new_tokens``, stopping at any of ``stop_token_ids`` or ``stop_strings``."""

    max_new_tokens: int
    stop_token_ids: tuple[int, ...]
    pad_token_id: int
    stop_strings: tuple[str, ...] = ()
    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    def generate_kwargs(self) -> dict:
        kwargs: dict = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.do_sample,
            "num_beams": 1,
            "eos_token_id": list(self.stop_token_ids) or None,
            "pad_token_id": self.pad_token_id,
            "use_cache": True,
        }
        if self.do_sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        else:  # a model's own generation config may ask for sampling parameters: greedy takes none
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return kwargs


def _generation_plans(model, longest: int, new_tokens: int, batch: int) -> list[plans.Plan]:
    caps = capabilities(model)
    device_type = input_device(model).type
    out = []
    for b in plans._halvings(batch):
        kernel = caps.attention.no_cache if b == 1 else caps.attention.with_cache
        need = memory.fill_bytes(model, longest + new_tokens, b, device_type, kernel)
        out.append(plans.FullPlan(model, longest, b, need, kernel))
    return plans._linked(out)


class CountForwardedTokens(StoppingCriteria):
    """Stops nothing: counts, after each step of ``generate``, the token positions its forward ran (the padded
    prompts at the first step, one per row after), so a progress bar ticks inside a generate call. For progress a
    step after the first counts as the prompt tokens its time would have forwarded at the first step's rate: a step
    of one token a row takes far more time per token than the prompts' forward."""

    def __init__(self, model, width: int, on_step: Callable[[int, float, int], None] | None = None):
        self.model, self.width, self.steps, self.work = model, width, 0, 0.0
        self.last = time.perf_counter()
        self.seconds_per_token = 0.0
        self.on_step = on_step  # called with (step, its work, rows) after each step

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        now = time.perf_counter()
        rows = int(input_ids.shape[0])
        if self.steps == 0:
            n = rows * self.width
            work = float(n)
            self.seconds_per_token = max(now - self.last, 1e-9) / n
        else:
            n, work = rows, (now - self.last) / self.seconds_per_token
        recording.count_tokens(self.model, n, work=work)
        if self.on_step is not None:
            self.on_step(self.steps, work, rows)
        self.last, self.steps, self.work = now, self.steps + 1, self.work + work
        return torch.zeros(rows, dtype=torch.bool, device=input_ids.device)


def planned_work(prompt_tokens: int, max_new_tokens: int) -> int:
    """What a prompt counts for in progress before any of its steps ran: its tokens and one a new token (revised
    after each generate call by what its steps took: ``generate``)."""
    return int(prompt_tokens) + int(max_new_tokens)


def _strip(row: torch.Tensor, settings: GenerationSettings) -> np.ndarray:
    """The generated tokens up to (not including) the first stop token; generate pads finished rows after it."""
    tokens = row.tolist()
    for i, token in enumerate(tokens):
        if token in settings.stop_token_ids:
            tokens = tokens[:i]
            break
    return np.asarray(tokens, dtype=np.int64)


@torch.no_grad()
def generate(
    model,
    prompts: Sequence[Sequence[int] | np.ndarray | torch.Tensor],
    settings: GenerationSettings,
    batch_size: int = 1,
    tokenizer=None,
) -> list[np.ndarray]:
    """The tokens generated after each prompt (stop token excluded), in the order given.

    ``tokenizer`` is needed only for ``settings.stop_strings``."""
    model = causal_lm(model)
    seqs = [as_ids(p) for p in prompts]
    if batch_size < 1 or settings.max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size}, {settings.max_new_tokens}")
    if not seqs:
        return []
    if any(s.numel() == 0 for s in seqs):
        raise ScoringError("cannot generate after an empty prompt")
    check_token_ids(model, seqs)
    check_positions(model, max(int(s.numel()) for s in seqs) + settings.max_new_tokens)
    order = sorted(range(len(seqs)), key=lambda i: -int(seqs[i].numel()))
    longest = int(seqs[order[0]].numel())
    plan = plans.choose(_generation_plans(model, longest, settings.max_new_tokens, min(batch_size, len(seqs))))
    out: list[np.ndarray | None] = [None] * len(seqs)
    extra = {"stop_strings": list(settings.stop_strings), "tokenizer": tokenizer} if settings.stop_strings else {}
    done = 0
    # progress: each prompt's steps are planned at max_new_tokens, then at max_new_tokens steps of what the first
    # step took a row, then at the mean work the steps took a row
    steps_work, rows_done, calibrated = float(settings.max_new_tokens), 0, False

    def on_step(step: int, work: float, rows: int) -> None:
        nonlocal steps_work, calibrated
        if step == 1 and not calibrated:  # the first step after the prompts: what a step costs, in their tokens
            new = settings.max_new_tokens * work / rows
            recording.revise_work(model, (len(seqs) - done) * (new - steps_work))
            steps_work, calibrated = new, True

    def attempt(plan: plans.Plan) -> plans.Plan:
        nonlocal done
        recording.note_plan(model, "generation", plan.key())
        device = plan.device
        while done < len(order):
            group = order[done : done + plan.batch]
            width = max(int(seqs[i].numel()) for i in group)
            ids = torch.full((len(group), width), settings.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, i in enumerate(group):  # left padding: every prompt ends at the last column
                n = int(seqs[i].numel())
                ids[r, width - n :] = seqs[i]
                mask[r, width - n :] = 1
            # counts the prompts, then one position per row for every step generate takes, as it takes them
            counter = CountForwardedTokens(model, width, on_step)
            generated = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                stopping_criteria=StoppingCriteriaList([counter]),
                **settings.generate_kwargs(),
                **extra,
            )
            for r, i in enumerate(group):
                out[i] = _strip(generated[r, width:].cpu(), settings)
            del generated
            done += len(group)
            _revise_plan(group, counter, width)
        return plan

    def _revise_plan(group: list[int], counter: CountForwardedTokens, width: int) -> None:
        # the batch's work against its plan, and the prompts still to come planned at the steps' mean work a row
        nonlocal steps_work, rows_done
        planned = sum(int(seqs[i].numel()) for i in group) + len(group) * steps_work
        mean = (counter.work - len(group) * width) / len(group)
        new = (steps_work * rows_done + mean * len(group)) / (rows_done + len(group)) if rows_done else mean
        recording.revise_work(model, counter.work - planned + (len(seqs) - done) * (new - steps_work))
        steps_work, rows_done = new, rows_done + len(group)

    plans.run_with_fallback(plan, attempt, "generation")
    recording.count(model, "generation", "generate", len(seqs))
    return [o for o in out if o is not None]
