"""The embedded demo model: a small Llama that really copies from its context, built on CPU in minutes.

Plain training of a tiny transformer does not find an induction head in a few CPU minutes, so the
copy circuit is set by hand inside an ordinary ``LlamaForCausalLM`` and frozen; everything else is
trained on standard-library text (``train_model``). The checkpoint loads with ``AutoModelForCausalLM``
and ``lm_eval --model hf`` like any other; nothing here is needed at evaluation time.

The circuit, in the residual stream's reserved dimensions (``Layout``):

* every token's embedding holds a random unit "match code" m(x), a unit "output code" o(x), and BOS a flag;
* layer 0, heads 0..n-1: head h attends to position t-1-h at any length (zero query/key weights; a
  query bias on the fast RoPE pairs and a key bias rotated by the offset) and copies that token's
  match code into slice P(h+1);
* layer 1, heads 0..w-1 (induction heads): the n matched tokens are tiled into windows of
  ``match_window`` tokens, one head each. Head v with window (a, k) matches the tokens x_{t-a} ..
  x_{t-a-k+1} (from m(x_t) and P1.. at t) against x_{j-a-1} .. x_{j-a-k} (P(a+1).. at j), so it attends
  to position j when those k tokens agree; its value is o(x_j), written into slice R, which the output
  layer reads (``lm_head`` columns = readout * o(y)). Where a copy has run for n tokens all w
  windows agree and the copied token gets w votes (``readout`` nats in all); a phrase that merely
  repeats a few tokens of the context wins one window's vote at most, so chance matches in ordinary text
  do not derail a copy (``EXACT_COPY_RECIPE`` matches n = 8 tokens in windows of 3, 3, 2; the shipped
  demo one window of 3). The codes sit on the SLOWEST RoPE pairs, so the match survives a distance of about 1 / (slowest frequency used):
  ``rope_theta`` sets the memory distance (the knob the known-answer validation turns). A sink term
  (query bias x key reading the BOS flag, on the slowest pair) sends each head's attention to BOS,
  whose value is zero, when its window matches nowhere.

With ``lookup`` (``LOOKUP_RECIPE``, three layers) the model also looks a LongEval line up by its name
(``_set_lookup``): two heads of layer 1 copy the first two tokens after the most recent "line" marker into
register slices, and a head of layer 2 matches (registers, current token) against (registers, previous token)
wherever the fetched token is part of a number, so after "... in line NAME ... <" it reads NAME's number
piece by piece, and falls silent after the closing ">". Its codes sit on the same slow pairs, so
``rope_theta`` sets its reach as well. LongEval records with the answer "<n>" + EOS are mixed into the
training text, so the trained layers learn to answer in that form and stop.

``LOOKUP_RECIPE`` matches all n = 8 tokens in ONE induction head, on a separate 3-dim "copy code" c(x)
(``copy_code_dim``; 8 x 3 dims fit the slow pairs where 8 x 10 do not): windows that vote apart each split
their attention over every place their few tokens recur, so in text that repeats phrases they outvote the one
place where all eight agree; one head attends there alone. ``code_scale`` makes every code larger in the
residual stream (what the circuit reads is RMS-normed, so its scores do not change), so the trained parts'
share of the norm stays small and the scores stay as constructed; BOS's large flag keeps the sink's score as
set. With ``bos_clean`` a BOS never carries the codes of the tokens before it (layer 0 sends a BOS's
attention to a BOS).

A sink without a BOS (``first_sink``, in ``LOOKUP_RECIPE``): the LongPPL task scores text without special tokens,
as its reference does, so its windows start mid-text, and a copy head with no sink puts its attention on the best
partial match and votes 32 nats for a wrong token. At a sequence's first position every previous-token head can
only attend to the token itself, so its n slots hold the token's own copy code; layer 0's MLP
(``_set_first_sink``) has one neuron per copy-code point (the codes are drawn from ``copy_code_points`` spread
points, so distinct codes stay a known angle apart) that opens where the token and all n slots sit on its point,
and writes a flag at least as large as BOS's there. Every later layer then sees that position as a BOS: after
RMSNorm the flag swamps its codes, so the sink's value is about zero. A run of n + 1 tokens on one point looks
the same to layer 0 (every value it reads is the same) and becomes a sink too: in the pydoc text, lines of "**"
(0.18% of its tokens).

``LOOKUP_RECIPE`` also has a weak n-gram head (``ngram_readout``, built by ``_set_induction_head``) that votes a few nats for
what followed the last three tokens, like the first model's copy head, and trains the other parts with the exact
copy and the lookup silent (``votes_in_training``) and their RMSNorm weights starting at the codes' scale
(``trained_norm_init``), so the trained model's match scores keep their design and the copy's sink can sit just
below a full match. Its language model has two more aids: a bigram head (``bigram_readout``) votes for what
followed the current token earlier in the context, and the input embedding and output layer learn 2.5 times
faster than the rest (``embedding_lr_scale``).

Trained parts never write into the reserved dimensions (their rows are frozen at zero), so the codes
stay clean; ``train_model`` restores every frozen entry after each optimizer step.
"""

from __future__ import annotations

import ast
import json
import math
import sys
import sysconfig
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .. import output_dirs

PACKAGED_MODEL = Path(__file__).resolve().parent / "assets" / "model"


def packaged_model_dir() -> Path:
    """The shipped demo checkpoint (rebuilt by ``scripts/make_demo_model.py``)."""
    return PACKAGED_MODEL


# --------------------------------------------------------------------------- training text


def training_texts(max_chars: int = 6_000_000) -> list[str]:
    """Standard-library text every CPython has (PSF licence): each module's docstrings, then its source.

    Deterministic for one Python version (sorted paths). The evaluation corpus of the demo
    (``pydoc_data.topics``) is not part of it.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "pydoc_data", "lib2to3", "__pycache__"}
    texts, total_chars = [], 0
    for path in sorted(stdlib.rglob("*.py")):
        if skip & set(path.relative_to(stdlib).parts):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        docstrings = [
            ast.get_docstring(node)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        prose = "\n\n".join(docstring for docstring in docstrings if docstring)
        for text in (prose, source):
            if text:
                texts.append(text)
                total_chars += len(text)
        if total_chars >= max_chars:
            break
    return texts


# --------------------------------------------------------------------------- the circuit


@dataclass
class Recipe:
    """Everything that determines the checkpoint (recorded beside it in ``recipe.json``)."""

    rope_theta: float = 1e5
    copy_circuit: bool = True
    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    head_dim: int = 0  # 0: hidden_size // num_heads
    intermediate_size: int = 768
    max_position_embeddings: int = 32768
    match_order: int = 2  # n: tokens that must match before the copied one
    match_window: int = 0  # tokens per induction head (0: all n in one head); the heads' windows tile the n and vote
    match_dim: int = 15  # dims of a match code
    # dims of a separate copy code c(x), the one the induction heads match (0: they match the match code). Small
    # codes let one head match many tokens on the few slow RoPE pairs (8 tokens x 3 dims), where the lookup
    # still wants 10-dim codes to tell 80 line names apart.
    copy_code_dim: int = 0
    output_dim: int = 32  # dims of an output code
    prev_pairs: int = 16  # fast RoPE pairs used by the previous-token heads
    prev_logit_margin: float = 24.0  # nats between t-o and the next best position
    match_gain: float = 16.0  # nats per matching token in the induction head
    sink_level: float = 1.5  # sink score, in matching tokens (between n-1 and n)
    readout: float = 8.0  # nats added to the copied token's logit when every window agrees, during training
    # the same after training (0: unchanged; the untrained construction, steps = 0, is not sharpened): a sharper
    # copy after training raises copy accuracy and leaves the trained parts' predictions as they are
    readout_final: float = 0.0
    freeze_readout: bool = False  # keep the readout columns fixed in training (else they train)
    # Raw size of the circuit's codes in the residual stream (every circuit write scales with it; what the circuit
    # reads is RMS-normed, so its scores do not change). Larger keeps the trained parts' share of the norm small,
    # so the scores stay as constructed after training.
    code_scale: float = 1.0
    bos_flag: float = 1.0  # raw BOS flag: large keeps BOS's normed flag at sqrt(hidden_size) after training
    bos_clean: bool = False  # layer 0 sends a BOS's attention to a BOS, so a BOS carries no earlier token's codes
    # Copy codes drawn from this many well-spread points of the sphere (0: random unit vectors; needs
    # copy_code_dim 3): distinct points stay apart by a known angle, which the first-position sink relies on.
    copy_code_points: int = 0
    # A sink without a BOS (``first_sink``): layer 0's MLP writes bos_flag (or more) into the BOS flag of a
    # sequence's first token, found as the position whose copy code and n previous-token slots all agree (at
    # position 0 every previous-token head can only attend to the token itself). Every later layer then sees
    # that position as a BOS: the flag swamps its codes after RMSNorm, so the sink's value is about zero.
    first_sink: bool = False
    first_sink_sharpness: float = 8.0  # the sink neurons' gate, in nats, at the worst case either side
    # Move every circuit code this many RoPE pairs toward the faster ones (the sink stays on the slowest pair): a
    # shorter reach at the same rope_theta. rope_theta also turns the sink's pair, by rope_theta^(-(d-2)/d) rad per
    # token from the first position, so a short reach set by rope_theta loses the sink on long documents; set by
    # the band, it does not.
    code_band_offset: int = 0
    # A weak n-gram head beside the exact copy (built by ``_set_induction_head``; needs the lookup's slots): layer 1 head w + 2
    # matches the last three tokens (x_t on its match code, x_{t-1} and x_{t-2} on their copy codes) and votes
    # ``ngram_readout`` nats for what followed them, as the first demo model's copy head does. Text repeats short
    # phrases, so such a vote is often right (and a wrong one costs little); without it the model predicts from
    # its context only where eight tokens recur, and its LM accuracy falls below the first model's.
    ngram_readout: float = 0.0  # 0: no n-gram head
    ngram_sink: float = 2.5  # its sink score, in matching tokens (between 2 and 3)
    # An in-context bigram head (needs the n-gram head's slots): layer 1 head w + 3 matches x_t alone, on both its
    # codes (match and copy code, against m(x_{j-1}) and P1 at j), and votes ``bigram_readout`` nats for what
    # followed x_t earlier, spread over every earlier place it occurred (attention splits evenly among equal
    # scores). Natural text continues a token as it did before more often than the trained parts of this small
    # model predict, so the vote raises its held-out next-token accuracy.
    bigram_readout: float = 0.0  # 0: no bigram head
    bigram_sink: float = 1.75  # its sink score, in matching codes (a full match is 2: between 1 and 2)
    # The trained parts' RMSNorm weights start here (the reserved dims' stay 1): with the codes ``code_scale`` times
    # larger, RMSNorm shrinks a trained feature by about as much, and the trained parts start from a scale they do
    # not reach in a few hundred steps at 1.
    trained_norm_init: float = 1.0
    # False: the exact copy head and the lookup write no vote while the other parts train (their writes are put
    # back after), so the trained parts do not learn around their 16-nat votes, right or wrong; with it and
    # trained_norm_init, a true match in the trained model scores as built and the sink can sit just below it.
    votes_in_training: bool = True
    # The line lookup (needs num_layers >= 3; see ``_set_lookup``): layer 1 registers the two tokens after the
    # most recent line marker ("line", " line"), layer 2 matches (register, previous token) against the context
    # where the previous token is part of a number (or its opening "<") and votes for what followed there.
    lookup: bool = False
    lookup_readout: float = 0.0  # nats the lookup's vote adds to its token (0: ``readout``)
    lookup_gain: float = 16.0  # nats per matching part: one per name token, two for the token, two for the flags
    lookup_sink: float = 4.5  # the lookup's sink score, in matching parts (a full match is 6, at most 4 without
    #                           the number flags or without the token)
    register_reach: int = 30  # tokens from a line marker within which its register is read reliably
    register_gap: int = 16  # fewest tokens between two line markers (a LongEval line is >= 17 tokens long)
    register_margin: float = 10.0  # nats by which the most recent marker beats the one before (and the sink)
    longeval_fraction: float = 0.0  # training rows that are a LongEval record, question and answer (" <n>" EOS)
    seed: int = 0
    # training
    steps: int = 250
    batch_size: int = 16
    seq_len: int = 512
    lr: float = 3e-3
    # The input embedding's and the output layer's learning rate, in multiples of ``lr``: a row of either moves
    # only where its token occurs, so in 250 steps the rare tokens' rows barely leave their start at ``lr`` (a
    # higher ``lr`` for everything diverges).
    embedding_lr_scale: float = 1.0
    weight_decay: float = 0.05
    warmup_steps: int = 20
    repeat_fraction: float = 0.5  # sequences X1 S X2 S X3
    repeat_min: int = 8
    repeat_max: int = 255
    train_chars: int = 6_000_000
    extra: dict = field(default_factory=dict)


# The first demo model's recipe: two layers, one induction head matching three tokens, readout 8 nats. It copies
# less than exactly (in ordinary text a three-token phrase often recurs with another continuation) and cannot look
# a LongEval line up.
COPY_ONLY_RECIPE = {"rope_theta": 1e5, "match_order": 3, "match_dim": 10, "sink_level": 2.5}
# Exact copying: eight matched tokens in three voting windows (3, 3, 2), readout frozen at 16 nats in training and
# sharpened to 32 after it.
EXACT_COPY_RECIPE = {
    "rope_theta": 1e5,
    "num_heads": 8,
    "head_dim": 64,
    "match_order": 8,
    "match_window": 3,
    "match_dim": 10,
    "sink_level": 2.5,
    "readout": 16.0,
    "readout_final": 32.0,
    "freeze_readout": True,
}
# Exact copying plus the line lookup (three layers; see ``_set_lookup``), trained with LongEval records among the
# text so that the model answers "<n>" and stops. The copy head matches all eight tokens at once (3-dim copy codes
# on 48 points); codes 8x larger keep the trained parts' share of the norm small; a sequence's first token is a
# sink when no BOS is there (``first_sink``). The copy and the lookup stay silent in training and the trained
# norms start at the codes' scale, so the copy's score keeps its design and its sink can sit just below a full
# match. A weak n-gram head predicts the short phrases text repeats, which the exact copy leaves alone; past its
# reach the lookup abstains (its sink at 5 of 6 parts) rather than vote for a chance line. A bigram head and a
# faster embedding learning rate make its language model. What each value did, measured:
# docs/demo-and-known-answer-validation.md ("The shipped recipe, value by value").
LOOKUP_RECIPE = {
    **EXACT_COPY_RECIPE,
    "match_window": 0,
    "copy_code_dim": 3,
    "sink_level": 7.75,
    "num_layers": 3,
    "intermediate_size": 512,
    "lookup": True,
    "longeval_fraction": 0.35,
    "code_scale": 8.0,
    "bos_flag": 4096.0,
    "bos_clean": True,
    "copy_code_points": 48,
    "first_sink": True,
    "ngram_readout": 8.0,
    "trained_norm_init": 8.0,
    "votes_in_training": False,
    "lookup_sink": 5.0,
    "bigram_readout": 6.0,
    "embedding_lr_scale": 2.5,
}
# The shipped demo model's recipe (scripts/make_demo_model.py); the validation variants (``variants_for``) change one
# knob: for this recipe the code band (``CODE_BAND_VARIANTS``), since its sink sits on the slowest RoPE pair, which
# turns with the distance from the sequence's first position.
DEMO_RECIPE = LOOKUP_RECIPE


@dataclass
class Layout:
    """Where the circuit's codes live in the residual stream."""

    match: slice
    output: slice
    bos: int
    prev: list  # P1..Pn: the copy codes of x_{t-1} .. x_{t-n}
    read: slice  # induction output (output code of the copied token)
    copy: slice | None = None  # the copy code (the match code's slice when the recipe has none of its own)
    # the line lookup only (None / empty without it): a token's flags "may precede a number's piece" ("<",
    # digits), "may be a number's piece" (digits, ">") and "line marker", the marker flags of the tokens 1 and 2
    # back, the two registers
    number_query: int | None = None
    number_value: int | None = None
    marker: int | None = None
    prev_marker: list = field(default_factory=list)
    register: list = field(default_factory=list)
    prev_match: slice | None = None  # the match code of x_{t-1} (the lookup's key; P1 when the copy code is m)
    # the first-position sink only: a constant 1 in every ordinary token's embedding (the sink neurons' threshold
    # scales with it, so it holds however RMSNorm scales the residual), and a filler that gives every ordinary
    # token's codes the same norm (so the previous-token slots carry a code at the same scale from any token)
    unit: int | None = None
    filler: int | None = None

    @property
    def reserved(self) -> int:
        if self.filler is not None:
            return self.filler + 1
        return self.register[-1].stop if self.register else self.read.stop

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> Layout:
        match_code = slice(0, recipe.match_dim)
        copy_code = (
            slice(match_code.stop, match_code.stop + recipe.copy_code_dim) if recipe.copy_code_dim else match_code
        )
        output_code = slice(copy_code.stop, copy_code.stop + recipe.output_dim)
        bos = output_code.stop
        slot_dim = recipe.copy_code_dim or recipe.match_dim
        prev, start = [], bos + 1
        for _ in range(recipe.match_order):
            prev.append(slice(start, start + slot_dim))
            start += slot_dim
        prev_match = prev[0]
        if recipe.lookup and recipe.copy_code_dim:
            prev_match = slice(start, start + recipe.match_dim)
            start += recipe.match_dim
        read = slice(start, start + recipe.output_dim)
        layout = cls(match_code, output_code, bos, prev, read, copy=copy_code, prev_match=prev_match)
        start = read.stop
        if recipe.lookup:
            layout.number_query, layout.number_value, layout.marker = start, start + 1, start + 2
            layout.prev_marker = [start + 3, start + 4]
            start += 5
            layout.register = [
                slice(start, start + recipe.match_dim),
                slice(start + recipe.match_dim, start + 2 * recipe.match_dim),
            ]
            start += 2 * recipe.match_dim
        if recipe.first_sink:
            layout.unit, layout.filler = start, start + 1
            start += 2
        return layout


def _unit_rows(generator: torch.Generator, n_rows: int, dim: int) -> torch.Tensor:
    rows = torch.randn(n_rows, dim, generator=generator, dtype=torch.float64)
    return (rows / rows.norm(dim=1, keepdim=True)).float()


def sphere_points(n: int) -> torch.Tensor:
    """n well-spread unit vectors in 3 dims (the Fibonacci lattice), float32."""
    index = np.arange(n, dtype=np.float64) + 0.5
    height = 1.0 - 2.0 * index / n
    azimuth = index * math.pi * (3.0 - math.sqrt(5.0))
    radius = np.sqrt(1.0 - height * height)
    return torch.as_tensor(np.stack([radius * np.cos(azimuth), radius * np.sin(azimuth), height], axis=1)).float()


def nearest_point_cosine(points: torch.Tensor) -> float:
    """The largest cosine between two distinct points."""
    cos = points.double() @ points.double().T
    cos.fill_diagonal_(-1.0)
    return float(cos.max())


# The first-position sink's design margin: a previous-token slot may carry its code at this share of the scale the
# token's own code has (the trained embedding columns take a little of the norm). Below it the sink may not fire.
FIRST_SINK_MIN_SCALE = 0.95


def first_sink_threshold(match_order: int, nearest_cosine: float) -> tuple[float, float]:
    """(threshold, margin) of a sink neuron's agreement score, in unit codes: the score is n * (point . c(x_t)) +
    sum_h point . P_h (n = ``match_order``). At the first position every P_h is c(x_0) (at >= FIRST_SINK_MIN_SCALE
    of its scale): at least n + n * FIRST_SINK_MIN_SCALE. At the second (no BOS) the slots mostly hold c(x_0), so
    where x_1's code is another point the score is at most n + 1 + (n - 1) * rho (rho = ``nearest_cosine``, the
    nearest points' cosine)."""
    true_min = match_order + match_order * FIRST_SINK_MIN_SCALE
    false_max = match_order + 1 + (match_order - 1) * nearest_cosine
    return (true_min + false_max) / 2, (true_min - false_max) / 2


def inverse_frequencies(theta: float, head_dim: int) -> np.ndarray:
    """Llama's default RoPE frequencies: pair i rotates by position * theta^(-2i/head_dim)."""
    return theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def _prev_token_amplitude(freqs: np.ndarray, offset: int, max_len: int, margin: float, head_dim: int) -> float:
    """Query/key bias amplitude per pair so that position t - offset beats every other by ``margin`` nats."""
    delta = np.arange(offset - max_len, offset + 1, dtype=np.float64)  # j - t + offset, j <= t
    profile = np.cos(np.outer(delta, freqs)).sum(axis=1)  # score / amplitude^2 at each delta
    best_other = profile[delta != 0].max()
    gap = len(freqs) - best_other
    if gap <= 1e-6:
        raise ValueError("the previous-token pairs do not separate offsets; use more or faster pairs")
    return math.sqrt(margin * math.sqrt(head_dim) / gap)


def match_windows(recipe: Recipe) -> list[tuple[int, int]]:
    """The induction heads' windows over the n matched tokens: (first offset, size), ``match_window`` each."""
    window_size = recipe.match_window or recipe.match_order
    return [
        (first, min(window_size, recipe.match_order - first)) for first in range(0, recipe.match_order, window_size)
    ]


def slow_dims(pairs_per_head: int, n_dims: int, offset: int = 0) -> list[int]:
    """Head dims of the slowest RoPE pairs but the very slowest (the sink's): n_dims of them, first dims then second;
    ``offset`` pairs faster (``code_band_offset``)."""
    pairs = list(range(pairs_per_head - 1 - n_dims // 2 - offset, pairs_per_head - 1 - offset))
    return pairs + [pair + pairs_per_head for pair in pairs]


def _share_lookup_codes(codes: torch.Tensor, token_texts: list[str], special_ids: set) -> None:
    """In place: "line" / " line" and "<" / " <" share the first such token's code, ">" gets none (see the
    comment where the match codes are drawn). ``token_texts``: each token id's decoded text, stripped."""
    first_with_text: dict[str, int] = {}
    for token_id, text in enumerate(token_texts):
        if text in ("line", "<") and token_id not in special_ids:
            codes[token_id] = codes[first_with_text.setdefault(text, token_id)]
        elif text == ">":
            codes[token_id] = 0


def _claim_head(set_and_freeze, layer: int, rows: slice) -> None:
    """Zero and freeze one head's query, key and value rows (weights and biases): the circuit sets them."""
    for proj in ("q_proj", "k_proj", "v_proj"):
        set_and_freeze(f"model.layers.{layer}.self_attn.{proj}.weight", (rows, slice(None)), 0.0)
        set_and_freeze(f"model.layers.{layer}.self_attn.{proj}.bias", rows, 0.0)


def _frozen(model) -> dict:
    """name -> bool mask of the entries that belong to the circuit (kept fixed in training)."""
    return {name: torch.zeros_like(param, dtype=torch.bool) for name, param in model.named_parameters()}


def build_model(tokenizer, recipe: Recipe):
    """A LlamaForCausalLM (float32) with the copy circuit set and the masks of its frozen entries.

    With ``recipe.copy_circuit`` False: the same architecture, all random and all trainable (the
    no-memory control of the validation).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(recipe.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        head_dim=recipe.head_dim or recipe.hidden_size // recipe.num_heads,
        max_position_embeddings=recipe.max_position_embeddings,
        attention_bias=True,
        tie_word_embeddings=False,
        # transformers 4.x reads rope_theta (the project supports >= 4.48); 5.x's typed signature lacks it
        rope_theta=recipe.rope_theta,  # type: ignore[call-arg]
        rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).float()
    frozen = _frozen(model)
    if recipe.copy_circuit:
        _set_circuit(model, tokenizer, recipe, frozen)
    model.eval()
    return model, frozen


@dataclass(frozen=True)
class _CircuitSizes:
    """What the steps of ``_set_circuit`` share: the layout and the sizes derived from the recipe."""

    layout: Layout
    hidden_size: int
    head_dim: int
    pairs_per_head: int  # RoPE pairs per head
    match_order: int  # n: the matched tokens
    windows: list  # (first offset, size) per induction head
    n_induction_heads: int  # w
    widest_window: int
    code_dim: int  # dims per matched token in the induction heads: the copy code's (the match code's without one)
    bigram_dims: int


def _check_circuit(model, recipe: Recipe) -> _CircuitSizes:
    """Refuse a recipe whose circuit does not fit the model, before anything is set; the sizes the steps share."""
    layout = Layout.for_recipe(recipe)
    head_dim = model.config.head_dim
    pairs_per_head = head_dim // 2
    match_order = recipe.match_order
    if recipe.match_window < 0 or (recipe.readout_final and recipe.readout <= 0):
        raise ValueError(
            f"match_window must be >= 0 (got {recipe.match_window}) and readout > 0 when readout_final "
            f"is set (got {recipe.readout})"
        )
    windows = match_windows(recipe)  # (first offset, size) per induction head
    n_induction_heads = len(windows)
    if match_order > recipe.num_heads:
        raise ValueError("layer 0 needs one head per matched token")
    if recipe.lookup and (recipe.num_layers < 3 or match_order < 2 or n_induction_heads + 2 > recipe.num_heads):
        raise ValueError(
            f"the line lookup needs num_layers >= 3 (got {recipe.num_layers}), match_order >= 2 (got {match_order}) "
            f"and two heads beside the {n_induction_heads} induction heads in layer 1 (num_heads {recipe.num_heads})"
        )
    widest_window = max(size for _, size in windows)
    code_dim = recipe.copy_code_dim or recipe.match_dim
    if recipe.copy_code_dim < 0:
        raise ValueError(f"copy_code_dim must be >= 0 (got {recipe.copy_code_dim}; 0: the match code)")
    if not (recipe.code_scale > 0 and recipe.bos_flag > 0):  # 0 would erase the codes or the sink; < 0 invert them
        raise ValueError(f"code_scale and bos_flag must be > 0 (got {recipe.code_scale}, {recipe.bos_flag})")
    if recipe.copy_code_points and (recipe.copy_code_dim != 3 or recipe.copy_code_points < 2):
        raise ValueError(
            f"copy_code_points draws copy codes from points of the sphere in 3 dims: it needs "
            f"copy_code_dim 3 (got {recipe.copy_code_dim}) and >= 2 points (got {recipe.copy_code_points})"
        )
    if recipe.first_sink:
        if not recipe.copy_code_points:
            raise ValueError("first_sink tells the first position by its copy codes: set copy_code_points")
        if first_sink_threshold(match_order, nearest_point_cosine(sphere_points(recipe.copy_code_points)))[1] <= 0:
            raise ValueError(
                f"first_sink: {recipe.copy_code_points} copy-code points lie too close together to tell "
                f"the first position from the second with match_order {match_order}; use fewer points"
            )
        if not (math.isfinite(recipe.first_sink_sharpness) and recipe.first_sink_sharpness > 0):
            raise ValueError(f"first_sink_sharpness must be a positive number (got {recipe.first_sink_sharpness})")
        if recipe.intermediate_size < recipe.copy_code_points:
            raise ValueError(
                f"first_sink needs one layer-0 MLP neuron per copy-code point: intermediate_size "
                f"{recipe.intermediate_size} < copy_code_points {recipe.copy_code_points}"
            )
    if recipe.lookup and (3 * recipe.match_dim) // 2 + 1 > pairs_per_head:
        raise ValueError(
            f"the line lookup matches three match codes on slow RoPE pairs: 3 * match_dim / 2 + 1 must "
            f"fit in head_dim / 2 pairs (match_dim {recipe.match_dim}, head_dim {head_dim})"
        )
    if recipe.ngram_readout and not (
        recipe.lookup and recipe.copy_code_dim and recipe.match_order >= 3 and n_induction_heads + 3 <= recipe.num_heads
    ):
        raise ValueError(
            f"the n-gram head reads the lookup's match-code slot and three copy-code slots and takes "
            f"layer-1 head w + 2: it needs lookup, copy_code_dim > 0, match_order >= 3 and num_heads >= "
            f"{n_induction_heads + 3} (ngram_readout {recipe.ngram_readout})"
        )
    if recipe.bigram_readout and not (recipe.ngram_readout and n_induction_heads + 4 <= recipe.num_heads):
        raise ValueError(
            f"the bigram head reads the n-gram head's slots and takes layer-1 head w + 3: it needs "
            f"ngram_readout > 0 and num_heads >= {n_induction_heads + 4} (bigram_readout {recipe.bigram_readout})"
        )
    if not (math.isfinite(recipe.bigram_readout) and recipe.bigram_readout >= 0 and 1.0 < recipe.bigram_sink < 2.0):
        raise ValueError(
            f"bigram_readout must be >= 0 nats (got {recipe.bigram_readout}) and bigram_sink between 1 and "
            f"2 matching codes (got {recipe.bigram_sink})"
        )
    if not (math.isfinite(recipe.ngram_readout) and recipe.ngram_readout >= 0 and 2.0 < recipe.ngram_sink < 3.0):
        raise ValueError(
            f"ngram_readout must be >= 0 nats (got {recipe.ngram_readout}) and ngram_sink between 2 and 3 "
            f"matching tokens (got {recipe.ngram_sink})"
        )
    if not (math.isfinite(recipe.trained_norm_init) and recipe.trained_norm_init > 0):
        raise ValueError(f"trained_norm_init must be a positive number (got {recipe.trained_norm_init})")
    if recipe.lookup and not (
        4.0 < recipe.lookup_sink < 6.0 and recipe.register_gap >= 1 and recipe.register_reach >= 0
    ):
        raise ValueError(
            f"lookup_sink must lie between 4 and 6 parts (got {recipe.lookup_sink}), register_gap >= 1 (got "
            f"{recipe.register_gap}) and register_reach >= 0 (got {recipe.register_reach})"
        )
    if (widest_window * code_dim) % 2 or widest_window * code_dim // 2 + 1 > pairs_per_head - recipe.prev_pairs:
        raise ValueError("the induction codes and sink do not fit in the slow RoPE pairs")
    bigram_dims = 2 * ((recipe.match_dim + code_dim + 1) // 2)  # m(x_t) and c(x_t), on whole RoPE pairs
    widest_codes = max(
        [widest_window * code_dim]
        + ([3 * recipe.match_dim] if recipe.lookup else [])
        + ([recipe.match_dim + 2 * code_dim] if recipe.ngram_readout else [])
        + ([bigram_dims] if recipe.bigram_readout else [])
    )
    largest_offset = pairs_per_head - 1 - widest_codes // 2
    if not (isinstance(recipe.code_band_offset, int) and 0 <= recipe.code_band_offset <= largest_offset):
        raise ValueError(
            f"code_band_offset must be a whole number of RoPE pairs from 0 to {largest_offset} "
            f"(the codes need {widest_codes // 2} pairs below the sink's; got {recipe.code_band_offset!r})"
        )
    return _CircuitSizes(
        layout,
        recipe.hidden_size,
        head_dim,
        pairs_per_head,
        match_order,
        windows,
        n_induction_heads,
        widest_window,
        code_dim,
        bigram_dims,
    )


class _Circuit(NamedTuple):
    """What the attention steps of the circuit write with: the model's parameters, the setter that also freezes
    what it sets, the recipe, the sizes and the RoPE inverse frequencies."""

    params: dict
    set_and_freeze: Callable
    recipe: Recipe
    sizes: _CircuitSizes
    freqs: np.ndarray


@torch.no_grad()
def _set_circuit(model, tokenizer, recipe: Recipe, frozen: dict) -> None:
    """Set the copy circuit (and the lookup, the n-gram and bigram heads the recipe asks for) into ``model`` and mark
    its entries in ``frozen``, step by step."""
    sizes = _check_circuit(model, recipe)
    generator = torch.Generator().manual_seed(recipe.seed + 1)
    params = dict(model.named_parameters())

    def set_and_freeze(name, index, value):
        params[name][index] = value
        frozen[name][index] = True

    output_codes, embedding_units = _set_embedding(params, set_and_freeze, tokenizer, recipe, sizes, generator)
    _keep_reserved_dimensions(params, set_and_freeze, recipe, sizes)
    unit_scales = _normed_scales(recipe, sizes, embedding_units)
    circuit = _Circuit(params, set_and_freeze, recipe, sizes, inverse_frequencies(recipe.rope_theta, sizes.head_dim))
    _set_previous_token_heads(circuit, unit_scales.layer0)
    if recipe.first_sink:
        _set_first_sink(params, set_and_freeze, recipe, sizes.layout, unit_scales.layer1)
    _set_layer1_heads(circuit, unit_scales.layer1, unit_scales.layer2)
    _set_readout(params, frozen, recipe, sizes, output_codes, unit_scales.final_norm)


def _set_embedding(
    params, set_and_freeze, tokenizer, recipe: Recipe, sizes: _CircuitSizes, generator: torch.Generator
) -> tuple[torch.Tensor, float]:
    """Every token's codes in the reserved columns of the input embedding, BOS's flag, nothing else there; returns
    the output codes and how many unit codes an ordinary token's reserved columns hold."""
    layout = sizes.layout
    vocab_size = params["model.embed_tokens.weight"].shape[0]
    special = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    special.discard(None)
    match_codes = _unit_rows(generator, vocab_size, recipe.match_dim)
    if recipe.lookup:
        # The line marker and the brackets share their match code with their spaced forms ("line" / " line",
        # "<" / " <"): the record writes "line" at a line start and the question " line", and a prompt that ends
        # with a space is answered with "<" where the record has " <". (Only these: sharing every spaced form
        # would add chance matches to the copy windows.) ">" gets no match code at all: no copy window matches
        # through it, so after an answer's closing ">" nothing votes for the record's next line and the trained
        # layers end the answer (the lookup never needs ">" in a match, only as the piece it fetches).
        token_texts = [tokenizer.decode([token_id]).strip() for token_id in range(vocab_size)]
        _share_lookup_codes(match_codes, token_texts, special)
        digits = [token_id for token_id, text in enumerate(token_texts) if text.isdigit() and text.isascii()]
        query_ids = digits + [token_id for token_id, text in enumerate(token_texts) if text == "<"]
        value_ids = digits + [token_id for token_id, text in enumerate(token_texts) if text == ">"]
        marker_ids = [token_id for token_id, text in enumerate(token_texts) if text == "line"]
    output_codes = _unit_rows(generator, vocab_size, recipe.output_dim)
    copy_codes = match_codes
    if recipe.copy_code_dim:  # drawn after the others, so a recipe without it keeps its codes
        copy_codes = _unit_rows(generator, vocab_size, recipe.copy_code_dim)
        if recipe.copy_code_points:  # each token gets one of the points (a random one)
            point_of_token = torch.randint(0, recipe.copy_code_points, (vocab_size,), generator=generator)
            copy_codes = sphere_points(recipe.copy_code_points)[point_of_token]
        if recipe.lookup:  # the same sharing as the match code's, for the same reasons
            _share_lookup_codes(copy_codes, token_texts, special)
    for token_id in special:
        match_codes[token_id] = 0
        output_codes[token_id] = 0
        copy_codes[token_id] = 0
    embedding = "model.embed_tokens.weight"
    set_and_freeze(embedding, (slice(None), slice(0, layout.reserved)), 0.0)
    code_scale = recipe.code_scale
    set_and_freeze(embedding, (slice(None), layout.match), code_scale * match_codes)
    set_and_freeze(embedding, (slice(None), layout.copy), code_scale * copy_codes)
    set_and_freeze(embedding, (slice(None), layout.output), code_scale * output_codes)
    set_and_freeze(embedding, (tokenizer.bos_token_id, layout.bos), recipe.bos_flag)
    if recipe.lookup:
        set_and_freeze(embedding, (query_ids, layout.number_query), code_scale)
        set_and_freeze(embedding, (value_ids, layout.number_value), code_scale)
        set_and_freeze(embedding, (marker_ids, layout.marker), code_scale)
    embedding_units = 2.0 + (1 if recipe.copy_code_dim else 0)  # unit codes in an ordinary token's reserved columns
    if recipe.first_sink:
        ordinary = [token_id for token_id in range(vocab_size) if token_id not in special]
        set_and_freeze(embedding, (ordinary, layout.unit), code_scale)
        units = params[embedding][ordinary, : layout.reserved].double().pow(2).sum(1) / (code_scale * code_scale)
        embedding_units = float(math.ceil(float(units.max()) - 1e-6))
        filler = (code_scale * (embedding_units - units).clamp(min=0.0).sqrt()).float()
        set_and_freeze(embedding, (ordinary, layout.filler), filler)
    # BOS is the sink: a fixed row keeps its normed flag (and so the sink's score) where it was set
    set_and_freeze(embedding, (tokenizer.bos_token_id, slice(None)), 0.0)
    params[embedding][tokenizer.bos_token_id, layout.bos] = recipe.bos_flag

    return output_codes, embedding_units


def _keep_reserved_dimensions(params, set_and_freeze, recipe: Recipe, sizes: _CircuitSizes) -> None:
    """The trained parts never write into the reserved dimensions; their norms start at ``trained_norm_init``."""
    reserved = sizes.layout.reserved
    for layer in range(recipe.num_layers):
        for name in (f"model.layers.{layer}.self_attn.o_proj.weight", f"model.layers.{layer}.mlp.down_proj.weight"):
            set_and_freeze(name, (slice(0, reserved), slice(None)), 0.0)
        set_and_freeze(f"model.layers.{layer}.self_attn.o_proj.bias", slice(0, reserved), 0.0)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            set_and_freeze(f"model.layers.{layer}.{norm}.weight", slice(0, reserved), 1.0)
    set_and_freeze("model.norm.weight", slice(0, reserved), 1.0)
    if recipe.trained_norm_init != 1.0:
        for name, param in params.items():
            if name.endswith("norm.weight"):
                param[reserved:] = recipe.trained_norm_init


@dataclass(frozen=True)
class _UnitScales:
    """Typical size of a unit code after the RMSNorm at each place the circuit reads the residual stream."""

    layer0: float  # layer 0's input
    layer1: float  # layer 1's input
    final_norm: float  # the final norm's output, which the readout reads
    layer2: float | None  # layer 2's input (the lookup's); None without the lookup


def _normed_scales(recipe: Recipe, sizes: _CircuitSizes, embedding_units: float) -> _UnitScales:
    """Typical size of a unit code after each RMSNorm the circuit reads through."""
    layout, match_order, n_heads = sizes.layout, sizes.match_order, sizes.n_induction_heads

    # Typical scale of a unit code after RMSNorm: the reserved part dominates the residual's norm.
    def normed_scale(n_unit_codes: float) -> float:
        return math.sqrt(sizes.hidden_size / n_unit_codes)

    own_slot = 1 if layout.prev_match is not layout.prev[0] else 0  # m(x_{t-1}) in a slot of its own
    layer0 = normed_scale(embedding_units)  # layer 0 input: m, o (and c; and the unit and filler)
    layer1 = normed_scale(embedding_units + match_order + own_slot)  # layer 1 input: plus P1..Pn (and m(x_{t-1}))
    # final norm: plus R, the sum of w agreeing output codes
    final_norm = normed_scale(embedding_units + match_order + own_slot + n_heads * n_heads)
    layer2 = None
    if recipe.lookup:
        # layer 2 input: plus the two registers (R is 0 outside a copy)
        layer2 = normed_scale(embedding_units + match_order + own_slot + 2)
        final_norm = normed_scale(embedding_units + match_order + own_slot + n_heads * n_heads + 2)
    return _UnitScales(layer0, layer1, final_norm, layer2)


def _set_previous_token_heads(circuit: _Circuit, unit_scale: float) -> None:
    """Layer 0: head h attends to t - (h + 1) and copies its copy code (the match code without one) into slot
    P(h+1); ``unit_scale``: a unit code's size at layer 0's input."""
    params, set_and_freeze, recipe, sizes, freqs = circuit
    layout, head_dim, pairs_per_head = sizes.layout, sizes.head_dim, sizes.pairs_per_head
    assert layout.copy is not None and layout.prev_match is not None  # Layout.for_recipe sets both
    fast_pairs = np.arange(recipe.prev_pairs)
    for head in range(sizes.match_order):
        offset = head + 1
        amplitude = _prev_token_amplitude(
            freqs[fast_pairs], offset, recipe.max_position_embeddings, recipe.prev_logit_margin, head_dim
        )
        rows = slice(head * head_dim, (head + 1) * head_dim)
        _claim_head(set_and_freeze, 0, rows)
        query_bias = torch.zeros(head_dim)
        key_bias = torch.zeros(head_dim)
        for pair in fast_pairs:
            angle = freqs[pair] * offset
            query_bias[pair] = amplitude
            # (amplitude, 0) rotated by offset * frequency
            key_bias[pair], key_bias[pair + pairs_per_head] = amplitude * math.cos(angle), amplitude * math.sin(angle)
        set_and_freeze("model.layers.0.self_attn.q_proj.bias", rows, query_bias)
        set_and_freeze("model.layers.0.self_attn.k_proj.bias", rows, key_bias)
        # At a BOS (the forgetting curve's middle one, say) the head attends to a BOS instead (match code 0), so
        # a BOS never carries the codes of the tokens before it: with them, its key would add a chance match
        # to the sink score and out-score a true match. BOS's normed flag is sqrt(hidden_size) at layer 0 (its row
        # holds the flag alone); the slowest pair barely turns, and the BOS itself (distance 0) always gets the bonus.
        if recipe.bos_clean:
            bos_bonus = amplitude * amplitude * len(fast_pairs) / math.sqrt(head_dim) + 2 * recipe.prev_logit_margin
            bos_weight = math.sqrt(bos_bonus * math.sqrt(head_dim)) / math.sqrt(sizes.hidden_size)
            params["model.layers.0.self_attn.q_proj.weight"][rows.start + pairs_per_head - 1, layout.bos] = bos_weight
            params["model.layers.0.self_attn.k_proj.weight"][rows.start + pairs_per_head - 1, layout.bos] = bos_weight
        value_weight = params["model.layers.0.self_attn.v_proj.weight"]
        out_proj = "model.layers.0.self_attn.o_proj.weight"
        set_and_freeze(out_proj, (slice(None), rows), 0.0)
        # value dims: the copy code, then (head 0, with a copy code of its own) the match code, then the marker flag
        moves = [(layout.copy.start + c, layout.prev[head].start + c) for c in range(sizes.code_dim)]
        if head == 0 and layout.prev_match is not layout.prev[0]:
            moves += [(layout.match.start + c, layout.prev_match.start + c) for c in range(recipe.match_dim)]
        if recipe.lookup and head < 2:  # the line marker flags of x_{t-1} and x_{t-2}
            moves.append((layout.marker, layout.prev_marker[head]))
        for value_dim, (source, target) in enumerate(moves):
            value_weight[head * head_dim + value_dim, source] = 1.0
            set_and_freeze(out_proj, (target, head * head_dim + value_dim), recipe.code_scale / unit_scale)


def _set_layer1_heads(circuit: _Circuit, unit_scale: float, lookup_unit_scale: float | None) -> None:
    """Layer 1: the induction heads, and the lookup's registers, the n-gram and the bigram heads where the recipe
    has them. ``unit_scale``: a unit code's size at layer 1's input; ``lookup_unit_scale``: at layer 2's."""
    params, set_and_freeze, recipe, sizes, _ = circuit
    layout, head_dim, pairs_per_head = sizes.layout, sizes.head_dim, sizes.pairs_per_head
    n_heads, code_dim = sizes.n_induction_heads, sizes.code_dim
    # ---- layer 1, heads 0..w-1: induction heads on the slowest pairs, sink on the very slowest.
    # Head v matches the tokens x_{t-a} .. x_{t-a-k+1} of its window (a, k) (a = 0 starts at x_t itself)
    # against x_{j-a-1} .. x_{j-a-k} and writes o(x_j) into R: where all windows agree (a copy that has run
    # for n tokens) the copied token gets w votes, a chance match of one window's k tokens one vote.
    sink_pair = pairs_per_head - 1
    code_dims = slow_dims(pairs_per_head, sizes.widest_window * code_dim, recipe.code_band_offset)
    # score units: q.k / sqrt(head_dim) = match_gain per matching token
    match_weight = math.sqrt(recipe.match_gain * math.sqrt(head_dim)) / unit_scale
    # sink: q bias b, key reads the BOS flag (normed BOS: flag * sqrt(hidden_size), as BOS has no other code)
    sink_key_weight = 1.0

    def sink_bias(level: float) -> float:  # the sink's score, in matching tokens
        return level * recipe.match_gain * math.sqrt(head_dim) / (sink_key_weight * math.sqrt(sizes.hidden_size))

    for head, (first, window_size) in enumerate(sizes.windows):
        query_slots = [
            layout.copy if back == 0 else layout.prev[back - 1] for back in range(first, first + window_size)
        ]
        key_slots = layout.prev[first : first + window_size]
        # a shorter (last) window sinks as many matching tokens lower as it is shorter
        _set_induction_head(
            params,
            set_and_freeze,
            recipe,
            layout,
            slice(head * head_dim, (head + 1) * head_dim),
            [(query_slot, key_slot, code_dim) for query_slot, key_slot in zip(query_slots, key_slots)],
            code_dims,
            match_weight,
            sink_bias(recipe.sink_level - (sizes.widest_window - window_size)),
            sink_key_weight,
            recipe.code_scale / unit_scale,
        )
    if recipe.lookup:
        assert lookup_unit_scale is not None  # _normed_scales gives layer 2's with the lookup
        _set_lookup(
            circuit,
            unit_scale,
            lookup_unit_scale,
            slow_dims(pairs_per_head, 3 * recipe.match_dim, recipe.code_band_offset),
            sink_pair,
            sink_key_weight,
        )
    if recipe.ngram_readout:  # the n-gram head: (m(x_t), c(x_{t-1}), c(x_{t-2})) against the three tokens before j
        matches = [
            (layout.match, layout.prev_match, recipe.match_dim),
            (layout.prev[0], layout.prev[1], code_dim),
            (layout.prev[1], layout.prev[2], code_dim),
        ]
        share = recipe.ngram_readout / (recipe.readout_final or recipe.readout)  # of the copy's vote, sharpened
        _set_induction_head(
            params,
            set_and_freeze,
            recipe,
            layout,
            slice((n_heads + 2) * head_dim, (n_heads + 3) * head_dim),
            matches,
            slow_dims(pairs_per_head, recipe.match_dim + 2 * code_dim, recipe.code_band_offset),
            match_weight,
            sink_bias(recipe.ngram_sink),
            sink_key_weight,
            recipe.code_scale / unit_scale * share,
        )
    if recipe.bigram_readout:  # the bigram head: x_t on its match and copy codes against x_{j-1}'s (m(x_{j-1}), P1)
        matches = [(layout.match, layout.prev_match, recipe.match_dim), (layout.copy, layout.prev[0], code_dim)]
        share = recipe.bigram_readout / (recipe.readout_final or recipe.readout)
        _set_induction_head(
            params,
            set_and_freeze,
            recipe,
            layout,
            slice((n_heads + 3) * head_dim, (n_heads + 4) * head_dim),
            matches,
            slow_dims(pairs_per_head, sizes.bigram_dims, recipe.code_band_offset),
            match_weight,
            sink_bias(recipe.bigram_sink),
            sink_key_weight,
            recipe.code_scale / unit_scale * share,
        )


def _set_readout(
    params, frozen: dict, recipe: Recipe, sizes: _CircuitSizes, output_codes: torch.Tensor, unit_scale: float
) -> None:
    """The output layer scores o(y) against R (trainable from here on, unless frozen); ``unit_scale``: a unit
    code's size after the final norm."""
    layout = sizes.layout
    lm_head = params["lm_head.weight"]
    lm_head[:, : layout.reserved] = 0.0
    # R after the final norm is about unit_scale * w * o(x_j): a copy on which all w windows agree adds ``readout``
    # nats to o(x_j)'s logit
    lm_head[:, layout.read] = output_codes * (recipe.readout / (sizes.n_induction_heads * unit_scale))
    if recipe.freeze_readout:  # training on text where chance matches mislead would otherwise shrink it, and the copy
        frozen["lm_head.weight"][:, layout.read] = True


def _set_induction_head(
    params,
    set_and_freeze,
    recipe: Recipe,
    layout: Layout,
    rows: slice,
    matches,
    dims,
    match_weight: float,
    sink_query_bias: float,
    sink_key_weight: float,
    vote_weight: float,
) -> None:
    """Layer 1, the head at ``rows``: for each (query slice, key slice, size) in ``matches`` the query reads the
    slice at t and the key the slice at j, ``match_weight`` each, on the next ``size`` of ``dims`` (RoPE dims), so
    a matching token adds ``match_gain`` nats; the sink pair's query bias ``sink_query_bias`` meets the BOS flag
    (read with ``sink_key_weight``); the value o(x_j) is written into R with ``vote_weight``. The exact copy's
    windows and the n-gram head (``ngram_readout``: (m(x_t), c(x_{t-1}), c(x_{t-2})) against (m(x_{j-1}),
    c(x_{j-2}), c(x_{j-3})), the lookup's match-code slot and the copy-code slots P2, P3) and the bigram head
    (``bigram_readout``: (m(x_t), c(x_t)) against (m(x_{j-1}), c(x_{j-1}))) are built by it."""
    head_dim = rows.stop - rows.start
    _claim_head(set_and_freeze, 1, rows)
    query_weight = params["model.layers.1.self_attn.q_proj.weight"]
    key_weight = params["model.layers.1.self_attn.k_proj.weight"]
    value_weight = params["model.layers.1.self_attn.v_proj.weight"]
    free_dims = iter(dims)
    for query_slot, key_slot, n_dims in matches:
        for c in range(n_dims):
            dim = rows.start + next(free_dims)
            query_weight[dim, query_slot.start + c] = match_weight
            key_weight[dim, key_slot.start + c] = match_weight
    sink_pair = head_dim // 2 - 1
    params["model.layers.1.self_attn.q_proj.bias"][rows.start + sink_pair] = sink_query_bias
    key_weight[rows.start + sink_pair, layout.bos] = sink_key_weight
    for c in range(recipe.output_dim):
        value_weight[rows.start + c, layout.output.start + c] = 1.0
    out_proj = "model.layers.1.self_attn.o_proj.weight"
    set_and_freeze(out_proj, (slice(None), rows), 0.0)
    for c in range(recipe.output_dim):
        set_and_freeze(out_proj, (layout.read.start + c, rows.start + c), vote_weight)


def _set_first_sink(params, set_and_freeze, recipe: Recipe, layout: Layout, unit_scale: float) -> None:
    """Layer 0's MLP, neurons 0..K-1 (one per copy-code point p_k): neuron k scores the agreement
    n * (p_k . c(x_t)) + sum_h p_k . P_h, in unit codes, against ``first_sink_threshold`` times the unit; its
    gate opens only where the token's own code and all n previous-token slots sit on p_k, i.e. at a sequence's
    first position (or in a run of n + 1 tokens on one point), and it writes at least ``bos_flag`` into the BOS
    flag there. Its input is the layer-0 MLP's (the embedding and P1..Pn, RMS-normed to ``unit_scale`` per unit)."""
    points = sphere_points(recipe.copy_code_points)
    match_order = recipe.match_order
    threshold, margin = first_sink_threshold(match_order, nearest_point_cosine(points))
    gate_per_unit = recipe.first_sink_sharpness / margin / unit_scale  # gate nats per normed unit of the score
    # the worst case opens the gate to ``first_sink_sharpness``: SwiGLU passes silu(gate) x up (up = 1)
    flag_per_neuron = recipe.bos_flag / torch.nn.functional.silu(torch.tensor(recipe.first_sink_sharpness)).item()
    gate, up, down = (f"model.layers.0.mlp.{proj}.weight" for proj in ("gate_proj", "up_proj", "down_proj"))
    neurons = slice(0, len(points))
    set_and_freeze(gate, (neurons, slice(None)), 0.0)
    set_and_freeze(up, (neurons, slice(None)), 0.0)
    set_and_freeze(down, (slice(None), neurons), 0.0)
    for neuron, point in enumerate(points):
        params[gate][neuron, layout.copy] = gate_per_unit * match_order * point
        for prev in layout.prev:
            params[gate][neuron, prev] = gate_per_unit * point
        params[gate][neuron, layout.unit] = -gate_per_unit * threshold
        params[up][neuron, layout.unit] = 1.0 / unit_scale
        params[down][layout.bos, neuron] = flag_per_neuron


def register_recency(freqs: np.ndarray, reach: int, gap: int, max_len: int) -> tuple[np.ndarray, float]:
    """Weights w_i >= 0 (sum 1) over RoPE pairs whose profile P(d) = sum_i w_i cos(f_i d) falls by the most
    (``mu``) from any distance d <= ``reach`` to every distance >= d + ``gap`` (up to ``max_len``): a query
    bias and a key term on those pairs make the most recent of several markers win by A * mu nats.

    A linear program (scipy's HiGHS) over the worst pairs of distances, added until none is violated."""
    from scipy.optimize import linprog

    n_pairs = len(freqs)
    cos_at = np.cos(np.outer(np.arange(max_len + 1), freqs))  # [distance, pair]
    near = np.arange(reach + 1)
    # (near distance, far distance) pairs whose drop is constrained: a coarse grid first, then the worst ones
    distance_pairs = {(d, far) for d in near for far in range(d + gap, max_len + 1, 97)} | {(d, d + gap) for d in near}
    for _ in range(50):
        constraints = sorted(distance_pairs)
        a_ub = np.hstack(
            [np.array([cos_at[far] - cos_at[d] for d, far in constraints]), np.ones((len(constraints), 1))]
        )
        solution = linprog(
            np.r_[np.zeros(n_pairs), -1.0],
            A_ub=a_ub,
            b_ub=np.zeros(len(constraints)),
            A_eq=np.r_[np.ones(n_pairs), 0.0][None],
            b_eq=[1.0],
            bounds=[(0, None)] * n_pairs + [(None, None)],
            method="highs",
        )
        if not solution.success:
            raise RuntimeError(f"register recency: the linear program failed ({solution.message})")
        weights, mu = solution.x[:n_pairs], float(solution.x[n_pairs])
        profile = cos_at @ weights
        worst = [(d, d + gap + int(np.argmax(profile[d + gap :]))) for d in near]
        violated = {(d, far) for d, far in worst if profile[d] - profile[far] < mu - 1e-9}
        if not violated:
            return np.clip(weights, 0.0, None), mu
        distance_pairs |= violated
    raise RuntimeError("register recency: the linear program did not converge")


def _set_lookup(
    circuit: _Circuit,
    unit_scale: float,
    lookup_unit_scale: float,
    code_dims: list[int],
    sink_pair: int,
    sink_key_weight: float,
) -> None:
    """The line lookup: two register heads in layer 1 (heads w, w+1) and the lookup head in layer 2 (head 0).

    Register head k (k = 1, 2) attends to the most recent position j whose token k back is a line marker, so
    its value, the match code of x_j, is the k-th token of the most recent line's name; it writes that into
    register k. Recency: a query bias and a key term (the marker flag of x_{j-k}) on the RoPE pairs that
    ``register_recency`` weights, so the marker score falls with distance; markers older than
    ``register_reach`` + ``register_gap`` tokens, and every non-marker, lose to the BOS sink.

    The lookup head matches (register 1, register 2, x_t) at t against (register 1, register 2, x_{j-1}) at j
    (the token counting two parts) and adds two parts when x_t may precede a number's piece ("<", digits) and
    x_j is one (digits, ">"): in a LongEval record, after "... in line NAME is <" or "... I need the number. <"
    it attends to the first digits after "<" in the line named NAME, then to each next piece of the number and
    to the closing ">", and stays silent after ">" (so an answer can end there). (A "<" that opens a tag after
    NAME was named, as in the reference response's "<REGISTER_CONTENT>", looks the same: there it predicts
    the number's first piece.) It
    writes o(x_j) into R like an induction head, worth ``lookup_readout`` nats. Its codes use the same slow
    pairs as the induction heads, so ``rope_theta`` sets its reach too. ``unit_scale`` and ``lookup_unit_scale``:
    a unit code's size at layer 1's and layer 2's input."""
    params, set_and_freeze, recipe, sizes, freqs = circuit
    layout, head_dim, hidden_size = sizes.layout, sizes.head_dim, sizes.hidden_size
    pairs_per_head = head_dim // 2
    query_bias1 = params["model.layers.1.self_attn.q_proj.bias"]
    key_weight1 = params["model.layers.1.self_attn.k_proj.weight"]
    value_weight1 = params["model.layers.1.self_attn.v_proj.weight"]
    out_proj1 = "model.layers.1.self_attn.o_proj.weight"
    recency_pairs = [pair for pair in range(pairs_per_head) if pair != sink_pair]
    weights, mu = register_recency(
        freqs[recency_pairs], recipe.register_reach, recipe.register_gap, recipe.max_position_embeddings
    )
    profile = np.cos(np.outer(np.arange(recipe.register_reach + 1), freqs[recency_pairs])) @ weights
    amplitude = 2.0 * recipe.register_margin / mu  # nats per unit of the profile
    sink_score = math.log(recipe.max_position_embeddings) + recipe.register_margin  # beats every non-marker (0)
    marker_score = sink_score + recipe.register_margin - amplitude * float(profile.min())  # within reach: beats it
    sink_query_bias = sink_score * math.sqrt(head_dim) / (sink_key_weight * math.sqrt(hidden_size))
    for register in range(2):
        head = sizes.n_induction_heads + register
        rows = slice(head * head_dim, (head + 1) * head_dim)
        _claim_head(set_and_freeze, 1, rows)
        for pair, pair_weight in zip(recency_pairs, weights):
            bias = math.sqrt(amplitude * pair_weight * math.sqrt(head_dim))
            query_bias1[rows.start + pair] = bias
            key_weight1[rows.start + pair, layout.prev_marker[register]] = bias / unit_scale
        query_bias1[rows.start + sink_pair] = sink_query_bias
        key_weight1[rows.start + sink_pair, layout.bos] = sink_key_weight
        key_weight1[rows.start + sink_pair, layout.prev_marker[register]] = (
            marker_score * math.sqrt(head_dim) / (sink_query_bias * unit_scale)
        )
        for c in range(recipe.match_dim):
            value_weight1[rows.start + c, layout.match.start + c] = 1.0
        set_and_freeze(out_proj1, (slice(None), rows), 0.0)
        for c in range(recipe.match_dim):
            set_and_freeze(
                out_proj1, (layout.register[register].start + c, rows.start + c), recipe.code_scale / unit_scale
            )

    # layer 2, head 0: the lookup
    rows = slice(0, head_dim)
    _claim_head(set_and_freeze, 2, rows)
    query_weight2 = params["model.layers.2.self_attn.q_proj.weight"]
    key_weight2 = params["model.layers.2.self_attn.k_proj.weight"]
    value_weight2 = params["model.layers.2.self_attn.v_proj.weight"]
    match_weight = math.sqrt(recipe.lookup_gain * math.sqrt(head_dim)) / lookup_unit_scale
    blocks = [
        (layout.register[0], layout.register[0]),
        (layout.register[1], layout.register[1]),
        (layout.match, layout.prev_match),
    ]
    # the token counts two parts: the piece after the asked one and the line's other pieces (or its ">") then
    # differ by two parts, which no drift of the codes' scale between positions undoes
    for block, (query_slot, key_slot) in enumerate(blocks):
        for c in range(recipe.match_dim):
            dim = code_dims[block * recipe.match_dim + c]
            query_weight2[dim, query_slot.start + c] = match_weight * (2.0 if block == 2 else 1.0)
            key_weight2[dim, key_slot.start + c] = match_weight
    lookup_sink_bias = (
        recipe.lookup_sink * recipe.lookup_gain * math.sqrt(head_dim) / (sink_key_weight * math.sqrt(hidden_size))
    )
    params["model.layers.2.self_attn.q_proj.bias"][sink_pair] = lookup_sink_bias
    key_weight2[sink_pair, layout.bos] = sink_key_weight
    # the number flags on the sink pair's other dimension (the slowest pair: no rotation within the reach)
    # (worth two parts: a match without them stays well below the sink however the codes' scale drifts)
    query_weight2[sink_pair + pairs_per_head, layout.number_query] = 2.0 * match_weight
    key_weight2[sink_pair + pairs_per_head, layout.number_value] = match_weight
    for c in range(recipe.output_dim):
        value_weight2[c, layout.output.start + c] = 1.0
    out_proj2 = "model.layers.2.self_attn.o_proj.weight"
    set_and_freeze(out_proj2, (slice(None), rows), 0.0)
    votes = (recipe.lookup_readout or recipe.readout) * sizes.n_induction_heads / recipe.readout  # in window votes
    for c in range(recipe.output_dim):
        set_and_freeze(out_proj2, (layout.read.start + c, c), recipe.code_scale * votes / lookup_unit_scale)


# --------------------------------------------------------------------------- training


def token_stream(tokenizer, texts: list[str]) -> np.ndarray:
    """The texts' token ids, without special tokens, one after another (int64)."""
    ids_per_text = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    return np.concatenate([np.asarray(ids, dtype=np.int64) for ids in ids_per_text])


# LongEval records in training use their own seed: the evaluation's cases (seed 0 by default) are never seen.
LONGEVAL_TRAINING_SEED = 1_000_003


def longeval_training_row(tokenizer, rng: np.random.Generator, max_tokens: int) -> np.ndarray:
    """A LongEval record of 2..16 lines (fewer where ``max_tokens`` is short), its question and the answer
    the demo model learns to give: "<n>" after a prompt that ends with a space, else " <n>", then EOS."""
    from ..data import longeval_cases

    num_lines = int(rng.integers(2, 17))
    index, trailing = int(rng.integers(0, 2**31 - 1)), bool(rng.random() < 0.5)
    while num_lines >= 1:
        case = longeval_cases.generate_case(num_lines, index, seed=LONGEVAL_TRAINING_SEED, trailing_space=trailing)
        answer = ("<" if case.prompt.endswith(" ") else " <") + f"{case.expected_number}>"
        # prompt and answer tokenized apart, as a harness encodes the prompt and generates after it (joined,
        # a prompt's final space would merge into " <")
        ids = (
            tokenizer(case.prompt, add_special_tokens=False)["input_ids"]
            + tokenizer(answer, add_special_tokens=False)["input_ids"]
            + [tokenizer.eos_token_id]
        )
        if len(ids) <= max_tokens:
            return np.asarray(ids, dtype=np.int64)
        num_lines -= 1
    raise ValueError(
        f"a LongEval training row needs more than {max_tokens} tokens even with one line: "
        "raise seq_len or set longeval_fraction to 0"
    )


def training_batch(
    stream: np.ndarray, rng: np.random.Generator, recipe: Recipe, bos_id: int, longeval_row=None
) -> torch.Tensor:
    """[BOS] + seq_len - 1 tokens; a ``repeat_fraction`` of rows are X1 S X2 S X3 (S repeated), a
    ``longeval_fraction`` (with ``longeval_row(rng, max_tokens)``) a LongEval record and answer, then text."""
    row_len = recipe.seq_len - 1  # tokens after the BOS
    rows = []
    for _ in range(recipe.batch_size):
        if longeval_row is not None and rng.random() < recipe.longeval_fraction:
            record = longeval_row(rng, row_len)
            start = int(rng.integers(0, len(stream) - row_len))
            row = np.concatenate([record, stream[start : start + row_len - len(record)]])
        elif rng.random() < recipe.repeat_fraction:
            span_len = int(rng.integers(recipe.repeat_min, min(recipe.repeat_max, row_len // 2 - 2) + 1))
            span_start = int(rng.integers(0, len(stream) - span_len))
            span = stream[span_start : span_start + span_len]
            fill_len = row_len - 2 * span_len
            cuts = np.sort(rng.integers(0, fill_len + 1, size=2))
            fill_start = int(rng.integers(0, len(stream) - fill_len))
            fill = stream[fill_start : fill_start + fill_len]
            row = np.concatenate([fill[: cuts[0]], span, fill[cuts[0] : cuts[1]], span, fill[cuts[1] :]])
        else:
            start = int(rng.integers(0, len(stream) - row_len))
            row = stream[start : start + row_len]
        rows.append(np.concatenate([[bos_id], row]))
    return torch.as_tensor(np.stack(rows), dtype=torch.long)


def train_model(
    model, frozen: dict, stream: np.ndarray, recipe: Recipe, bos_id: int, log_every: int = 25, log=print, tokenizer=None
) -> dict:
    """AdamW with warm-up and cosine decay; frozen entries restored after every step."""
    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng(recipe.seed)
    params = dict(model.named_parameters())
    frozen_values = {name: (mask, params[name].detach().clone()) for name, mask in frozen.items() if mask.any()}
    if not (math.isfinite(recipe.embedding_lr_scale) and recipe.embedding_lr_scale > 0):
        raise ValueError(f"embedding_lr_scale must be a positive number (got {recipe.embedding_lr_scale})")
    embedding_and_head = {"model.embed_tokens.weight", "lm_head.weight"}
    decay = [param for name, param in params.items() if param.dim() >= 2 and name not in embedding_and_head]
    no_decay = [param for param in params.values() if param.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": recipe.weight_decay},
            {
                "params": [params[name] for name in sorted(embedding_and_head)],
                "weight_decay": recipe.weight_decay,
                "lr": recipe.lr * recipe.embedding_lr_scale,
            },
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=recipe.lr,
        betas=(0.9, 0.95),
    )

    def lr_at(step):
        if step < recipe.warmup_steps:
            return (step + 1) / recipe.warmup_steps
        progress = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    longeval_row = None
    if not 0.0 <= recipe.longeval_fraction <= 1.0:
        raise ValueError(
            f"longeval_fraction is a fraction of the training rows: 0 .. 1 (got {recipe.longeval_fraction})"
        )
    if recipe.longeval_fraction:
        if tokenizer is None:
            raise ValueError("longeval_fraction > 0 needs the tokenizer")
        longeval_row = lambda row_rng, max_tokens: longeval_training_row(tokenizer, row_rng, max_tokens)  # noqa: E731
    model.train()
    started = time.time()
    losses = []
    for step in range(recipe.steps):
        batch = training_batch(stream, rng, recipe, bos_id, longeval_row)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        with torch.no_grad():
            for name, (mask, values) in frozen_values.items():
                params[name][mask] = values[mask]
        losses.append(loss.item())
        if log and (step % log_every == 0 or step == recipe.steps - 1):
            log(f"step {step:4d} loss {loss.item():.3f} ({time.time() - started:.0f}s)")
    model.eval()
    return {
        "train_seconds": round(time.time() - started, 1),
        "final_loss": float(np.mean(losses[-10:])),
        "tokens": recipe.steps * recipe.batch_size * recipe.seq_len,
    }


# --------------------------------------------------------------------------- one call


def make_model(out_dir, recipe: Recipe | None = None, tokenizer=None, texts=None, dtype="float16", log=print) -> dict:
    """Train the tokenizer (unless given) and the model; save both and ``recipe.json`` in ``out_dir``."""
    from .offline import train_tokenizer

    recipe = recipe or Recipe()
    out = Path(out_dir)
    if texts is None:
        texts = training_texts(recipe.train_chars)
    if tokenizer is None:
        tokenizer = train_tokenizer(texts, vocab_size=recipe.vocab_size)
    model, frozen = build_model(tokenizer, recipe)
    training_record, n_stream_tokens = {}, 0
    if recipe.steps:
        stream = token_stream(tokenizer, texts)
        n_stream_tokens = int(len(stream))
        with _votes_silenced(model, recipe, silent=not recipe.votes_in_training):
            training_record = train_model(
                model, frozen, stream, recipe, tokenizer.bos_token_id, log=log, tokenizer=tokenizer
            )
    if recipe.copy_circuit and recipe.readout_final and recipe.steps:  # the untrained construction keeps its readout
        sharpen_readout(model, recipe)
    out.mkdir(parents=True, exist_ok=True)
    model.to(getattr(torch, dtype)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    _make_portable(out, recipe.rope_theta)
    n_params = sum(param.numel() for param in model.parameters())
    record = {
        "recipe": asdict(recipe),
        "n_parameters": n_params,
        "training_tokens_available": n_stream_tokens,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "saved_dtype": dtype,
        **training_record,
    }
    output_dirs.write_atomically(out / "recipe.json", json.dumps(record, indent=2) + "\n")
    return record


def vote_writes(model, recipe: Recipe) -> list:
    """The (o_proj weight, rows, columns) blocks through which the exact copy heads (layer 1, heads 0..w-1) and
    the lookup (layer 2, head 0) write their votes into R; the n-gram head's are not among them."""
    if not recipe.copy_circuit:
        return []
    read, head_dim = Layout.for_recipe(recipe).read, model.config.head_dim
    induction_columns = slice(0, len(match_windows(recipe)) * head_dim)
    blocks = [(model.model.layers[1].self_attn.o_proj.weight, read, induction_columns)]
    if recipe.lookup:
        blocks.append((model.model.layers[2].self_attn.o_proj.weight, read, slice(0, head_dim)))
    return blocks


@contextmanager
def _votes_silenced(model, recipe: Recipe, silent: bool):
    """With ``silent``, zero the exact copy's and the lookup's vote writes for the block's duration (they are
    frozen, so training keeps them at zero), then put them back as built."""
    blocks = vote_writes(model, recipe) if silent else []
    saved = [weight[rows, cols].detach().clone() for weight, rows, cols in blocks]
    with torch.no_grad():
        for weight, rows, cols in blocks:
            weight[rows, cols] = 0.0
    try:
        yield
    finally:
        with torch.no_grad():
            for (weight, rows, cols), built in zip(blocks, saved):
                weight[rows, cols] = built


@torch.no_grad()
def sharpen_readout(model, recipe: Recipe) -> None:
    """Scale the frozen readout columns from ``readout`` to ``readout_final`` nats (the copy's strength)."""
    read = Layout.for_recipe(recipe).read
    model.lm_head.weight[:, read] *= recipe.readout_final / recipe.readout


def _make_portable(out: Path, rope_theta: float) -> None:
    """Keep the checkpoint readable by transformers 4.x too (the project supports >= 4.48): 4.x reads a
    top-level ``rope_theta`` (else silently 10000, which would shorten the memory) and knows the
    tokenizer as PreTrainedTokenizerFast."""
    config_path = out / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["rope_theta"] = float(rope_theta)
    output_dirs.write_atomically(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer_config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(tokenizer_config_path.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_config.pop("is_local", None)
    output_dirs.write_atomically(tokenizer_config_path, json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- known-answer variants
#
# Models whose long-context ability is known by construction: the same recipe, tokenizer and seed,
# differing only in the reach knob, plus the same architecture trained without the circuit (no memory beyond
# what plain training finds in minutes). The knob depends on the recipe: for the first model rope_theta (the
# induction head's reach); for a recipe with a first-position sink (``first_sink``, as the lookup recipe has) the
# code band at rope_theta 1e6, since rope_theta also turns that sink and at 1e4 loses it past about 8k tokens (see
# ``code_band_offset``). Trained short-by-band at 6 pairs: copy 0.98 / 0.90 / 0.79 at 64 / 256 / 1024 tokens,
# LongPPL 17.7 between long's 1.59 and none's 228 (built at rope_theta 1e5) on the validation's documents (a quick
# harness run, no CIs).
ROPE_THETA_VARIANTS = {
    "long": {"rope_theta": 1e6},
    "short": {"rope_theta": 1e4},
    "none": {"copy_circuit": False},
}
CODE_BAND_VARIANTS = {
    "long": {"rope_theta": 1e6},
    "short": {"rope_theta": 1e6, "code_band_offset": 6},
    "none": {"rope_theta": 1e6, "copy_circuit": False},
}


def variants_for(recipe: dict) -> dict:
    """The known-answer variants (name -> overrides) of a recipe: by code band where it has a first-position sink
    (rope_theta turns that sink too), else by rope_theta."""
    return CODE_BAND_VARIANTS if recipe.get("first_sink") else ROPE_THETA_VARIANTS


VARIANTS = variants_for(DEMO_RECIPE)
# the order of long-context ability the metrics should find (best first)
VARIANT_ORDER = ("long", "short", "none")


def variant_recipe(name: str, **overrides) -> Recipe:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose from {sorted(VARIANTS)}")
    return Recipe(**{**DEMO_RECIPE, **VARIANTS[name], **overrides})


def build_variant(name: str, out_dir, steps: int | None = None, tokenizer_dir=None, log=print) -> dict:
    """Build one known-answer model into ``out_dir`` with the shipped demo tokenizer (so every
    variant, and an evaluator among them, reads the same token ids). ``steps=0``: the untrained
    construction (the circuit alone, random elsewhere), cheap enough for CI."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir or packaged_model_dir()))
    overrides = {} if steps is None else {"steps": int(steps)}
    recipe = variant_recipe(name, **overrides)
    texts = training_texts(recipe.train_chars) if recipe.steps else []
    return make_model(out_dir, recipe, tokenizer=tokenizer, texts=texts, log=log)
