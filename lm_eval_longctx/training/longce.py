"""LongCE: the key-token-weighted fine-tuning loss of the LongPPL paper (torch + transformers only).

For target position t of a sequence (the prediction of token t from tokens < t; array index t - 1
after the usual causal-LM shift):

* loss_full_t: the cross-entropy of the training forward (full context, with gradient);
* loss_short_t: the cross-entropy of the same model under the LongPPL reference's truncated
  windows (K = ``trunc_len``, d = ``stride``; ``engine.score_truncated``), computed without
  gradient. Positions t < K have no short context (they already see all of it);
* w_t = min(exp(loss_short_t - loss_full_t), gamma) for t >= K, w_t = 1 for t < K, detached;
* loss = sum_t w_t * loss_full_t / (number of scored targets)   (the spec's mean(CE_t * w_t)).

Choices where the spec is silent:

* The short pass runs with the model temporarily in eval mode (``short_eval_mode=True``): dropout
  would add noise to the weights only, and both the paper's models and the reference scoring run
  without dropout. The training flag of every submodule is restored afterwards, even on error.
  The long (training) forward is whatever the caller ran, in train mode, so with dropout > 0 the
  two passes differ slightly; ``short_eval_mode=False`` uses the model's current mode instead.
* loss_full in the weights is the detached value of the training forward's own cross-entropy
  (one forward, not a separate no-grad long pass).
* Padding (``attention_mask`` = 0, right padding only) and ignored labels (-100) are masked: they
  get weight 0 and are not counted in the mean. The short windows are cut from the unpadded
  tokens. ``mask_ignored=False`` reproduces the reference instead: ``CrossEntropyLoss`` with
  reduction "none" (0 at -100 labels) times the weights, averaged over all B * (T - 1) positions,
  padding included, and the short windows run over the padded rows.
* The short pass scores ``input_ids[t]``; a non-ignored label that differs from ``input_ids[t]``
  at a position t >= K is an error (the short and long losses would be of different tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..engine.scoring import score_truncated
from ..settings import BOOLEAN, Declaration, Setting, integer, number

IGNORE_INDEX = -100
# LongCE's settings, declared once: LongCELoss and scripts/finetune_longce.py parse and check them here.
SETTINGS = Declaration(
    "longce",
    [
        Setting("trunc_len", integer(1), 4096, "K: tokens of short context (the paper's and the reference's)"),
        Setting("stride", integer(1), 1024, "d: stride of the truncated windows"),
        Setting("gamma", number(0.0, lo_open=True), 5.0, "weights are min(exp(loss_short - loss_full), gamma)"),
        Setting("short_batch_size", integer(1), 8, "short windows per no-grad forward", affects_numbers=False),
        Setting("mask_ignored", BOOLEAN, True, "mask padding and -100 labels (false: the reference's unmasked mean)"),
        Setting("short_eval_mode", BOOLEAN, True, "run the short pass in eval mode (no dropout)"),
    ],
    metadata_keys=False,
)
DEFAULT_TRUNC_LEN = SETTINGS.by_name["trunc_len"].default
DEFAULT_STRIDE = SETTINGS.by_name["stride"].default
DEFAULT_GAMMA = SETTINGS.by_name["gamma"].default


@dataclass
class LongCEOutput:
    """A LongCE loss with its parts; every tensor is [batch, seq_len - 1] (shifted targets)."""

    loss: torch.Tensor  # scalar, with gradient through token_ce only
    weights: torch.Tensor  # float32, detached; 0 where masked
    token_ce: torch.Tensor  # float32 per-target cross-entropy of the long pass (with gradient)
    mask: torch.Tensor  # bool, targets counted in the mean
    short_ce: torch.Tensor  # float32 short-window cross-entropy, NaN where no short window


def _sequence_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[int]:
    """Real-token count of each row; the mask must be right padding (ones, then zeros)."""
    batch, width = input_ids.shape
    if attention_mask is None:
        return [width] * batch
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}"
        )
    mask = attention_mask.detach().to("cpu", torch.bool)
    lengths = mask.sum(dim=1)
    expected = torch.arange(width)[None, :] < lengths[:, None]
    if not torch.equal(mask, expected):
        raise ValueError(
            "LongCE needs right padding (attention_mask = ones then zeros in every row): "
            "left padding shifts positions, so the short windows would not match"
        )
    return [int(n) for n in lengths]


class _EvalMode:
    """Put a module in eval mode and restore every submodule's own training flag afterwards."""

    def __init__(self, model: nn.Module, enabled: bool):
        self.model, self.enabled = model, enabled
        self.flags: list[tuple[nn.Module, bool]] | None = None

    def __enter__(self):
        if self.enabled:
            self.flags = [(m, m.training) for m in self.model.modules()]
            self.model.eval()
        return self

    def __exit__(self, *exc):
        if self.flags is not None:
            for m, flag in self.flags:
                m.training = flag
        return False


@torch.no_grad()
def short_context_ce(
    model: nn.Module,
    input_ids: torch.Tensor,
    lengths: list[int],
    trunc_len: int = DEFAULT_TRUNC_LEN,
    stride: int = DEFAULT_STRIDE,
    batch_size: int = 8,
    short_eval_mode: bool = True,
) -> torch.Tensor:
    """Cross-entropy of input_ids[b, t] under the reference truncated windows of row b's first lengths[b] tokens.

    Returns float32 [batch, seq_len - 1] on input_ids' device (index t - 1 is target t); NaN
    where a target has no short window (t < K, or beyond the row's length).
    """
    batch, width = input_ids.shape
    rows = [input_ids[b, : lengths[b]].detach().cpu() for b in range(batch)]
    with _EvalMode(model, short_eval_mode):
        scores = score_truncated(model, rows, trunc_len=trunc_len, stride=stride, batch_size=batch_size)
    out = torch.full((batch, max(width - 1, 0)), float("nan"), dtype=torch.float32)
    for b, s in enumerate(scores):
        out[b, : len(s.logprob)] = -torch.from_numpy(s.logprob)
    return out.to(input_ids.device)


def longce_loss(
    model: nn.Module,
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    labels: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    trunc_len: int = DEFAULT_TRUNC_LEN,
    stride: int = DEFAULT_STRIDE,
    gamma: float = DEFAULT_GAMMA,
    short_batch_size: int = 8,
    mask_ignored: bool = True,
    short_eval_mode: bool = True,
) -> LongCEOutput:
    """LongCE of a causal-LM training forward.

    ``logits``: [batch, seq_len, vocab] of ``model(input_ids, attention_mask)`` (with gradient);
    ``labels``: HF convention, same shape as input_ids, shifted here (logits[:, i] predicts
    labels[:, i + 1]), -100 ignored; None means labels = input_ids. ``model`` runs the no-grad
    short pass (the model being trained).
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(input_ids.shape)}")
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(f"logits shape {tuple(logits.shape)} does not match input_ids {tuple(input_ids.shape)}")
    SETTINGS.parse({"trunc_len": trunc_len, "stride": stride, "gamma": gamma, "short_batch_size": short_batch_size})
    if labels is None:
        labels = input_ids
    if labels.shape != input_ids.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} != input_ids shape {tuple(input_ids.shape)}")
    batch, width = input_ids.shape
    device = logits.device

    targets = labels[:, 1:].to(device)
    token_ce = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(batch, width - 1)
    labelled = targets != IGNORE_INDEX

    real_lengths = _sequence_lengths(input_ids, attention_mask)
    if mask_ignored:
        in_row = torch.arange(width - 1, device=device)[None, :] < (
            torch.tensor(real_lengths, device=device)[:, None] - 1
        )
        mask = labelled & in_row
        short_lengths = real_lengths
    else:  # reference: nothing masked, the short windows see the padded rows
        mask = torch.ones_like(labelled)
        short_lengths = [width] * batch

    short_ce = short_context_ce(
        model, input_ids, short_lengths, trunc_len, stride, short_batch_size, short_eval_mode
    ).to(device)
    has_short = ~torch.isnan(short_ce) & labelled
    mismatch = has_short & (targets != input_ids[:, 1:].to(device))
    if bool(mismatch.any()):
        raise ValueError(
            "LongCE: a label differs from input_ids at a position with a short window; the short "
            "pass scores input_ids, so labels must equal input_ids wherever they are not -100"
        )

    with torch.no_grad():
        weights = torch.ones_like(token_ce)
        ratio = torch.exp(short_ce - token_ce.detach()).clamp(max=gamma)
        weights = torch.where(has_short, ratio, weights)
        weights = torch.where(mask, weights, torch.zeros_like(weights))
    weights = weights.detach()

    denominator = mask.sum()
    if int(denominator) == 0:  # nothing to learn from: a zero loss that still has a graph
        loss = (token_ce * 0.0).sum()
    else:
        loss = (weights * token_ce).sum() / denominator
    return LongCEOutput(loss=loss, weights=weights, token_ce=token_ce, mask=mask, short_ce=short_ce)


class LongCELoss(nn.Module):
    """LongCE as a module: ``loss = LongCELoss(trunc_len=..., stride=...)(model, logits, input_ids, labels, mask)``.

    Holds no parameters; ``last_output`` keeps the last call's ``LongCEOutput`` (detached) for logging.
    """

    def __init__(
        self,
        trunc_len: int = DEFAULT_TRUNC_LEN,
        stride: int = DEFAULT_STRIDE,
        gamma: float = DEFAULT_GAMMA,
        short_batch_size: int = 8,
        mask_ignored: bool = True,
        short_eval_mode: bool = True,
    ):
        super().__init__()
        # checked once here; every call passes them to longce_loss
        self.options = dict(
            SETTINGS.parse(
                {
                    "trunc_len": trunc_len,
                    "stride": stride,
                    "gamma": gamma,
                    "short_batch_size": short_batch_size,
                    "mask_ignored": mask_ignored,
                    "short_eval_mode": short_eval_mode,
                }
            )
        )
        self.last_output: LongCEOutput | None = None

    def forward(
        self,
        model: nn.Module,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = longce_loss(model, logits, input_ids, labels, attention_mask, **self.options)
        self.last_output = LongCEOutput(out.loss.detach(), out.weights, out.token_ce.detach(), out.mask, out.short_ce)
        return out.loss

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.options.items())
