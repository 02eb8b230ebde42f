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
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

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
    lib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "pydoc_data", "lib2to3", "__pycache__"}
    texts, total = [], 0
    for path in sorted(lib.rglob("*.py")):
        if skip & set(path.relative_to(lib).parts):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        docs = [
            ast.get_docstring(n)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        prose = "\n\n".join(d for d in docs if d)
        for t in (prose, source):
            if t:
                texts.append(t)
                total += len(t)
        if total >= max_chars:
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
    def for_recipe(cls, r: Recipe) -> Layout:
        m = slice(0, r.match_dim)
        c = slice(m.stop, m.stop + r.copy_code_dim) if r.copy_code_dim else m
        o = slice(c.stop, c.stop + r.output_dim)
        bos = o.stop
        dim = r.copy_code_dim or r.match_dim
        prev, start = [], bos + 1
        for _ in range(r.match_order):
            prev.append(slice(start, start + dim))
            start += dim
        prev_match = prev[0]
        if r.lookup and r.copy_code_dim:
            prev_match = slice(start, start + r.match_dim)
            start += r.match_dim
        read = slice(start, start + r.output_dim)
        lay = cls(m, o, bos, prev, read, copy=c, prev_match=prev_match)
        start = read.stop
        if r.lookup:
            lay.number_query, lay.number_value, lay.marker = start, start + 1, start + 2
            lay.prev_marker = [start + 3, start + 4]
            start += 5
            lay.register = [slice(start, start + r.match_dim), slice(start + r.match_dim, start + 2 * r.match_dim)]
            start += 2 * r.match_dim
        if r.first_sink:
            lay.unit, lay.filler = start, start + 1
            start += 2
        return lay


def _unit_rows(gen: torch.Generator, n: int, d: int) -> torch.Tensor:
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return (x / x.norm(dim=1, keepdim=True)).float()


def sphere_points(n: int) -> torch.Tensor:
    """n well-spread unit vectors in 3 dims (the Fibonacci lattice), float32."""
    i = np.arange(n, dtype=np.float64) + 0.5
    z = 1.0 - 2.0 * i / n
    phi = i * math.pi * (3.0 - math.sqrt(5.0))
    radius = np.sqrt(1.0 - z * z)
    return torch.as_tensor(np.stack([radius * np.cos(phi), radius * np.sin(phi), z], axis=1)).float()


def nearest_point_cosine(points: torch.Tensor) -> float:
    """The largest cosine between two distinct points."""
    cos = points.double() @ points.double().T
    cos.fill_diagonal_(-1.0)
    return float(cos.max())


# The first-position sink's design margin: a previous-token slot may carry its code at this share of the scale the
# token's own code has (the trained embedding columns take a little of the norm). Below it the sink may not fire.
FIRST_SINK_MIN_SCALE = 0.95


def first_sink_threshold(n: int, rho: float) -> tuple[float, float]:
    """(threshold, margin) of a sink neuron's agreement score, in unit codes: the score is n * (point . c(x_t)) +
    sum_h point . P_h. At the first position every P_h is c(x_0) (at >= FIRST_SINK_MIN_SCALE of its scale): at
    least n + n * FIRST_SINK_MIN_SCALE. At the second (no BOS) the slots mostly hold c(x_0), so where x_1's
    code is another point the score is at most n + 1 + (n - 1) * rho (rho: the nearest points' cosine)."""
    true_min = n + n * FIRST_SINK_MIN_SCALE
    false_max = n + 1 + (n - 1) * rho
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


def match_windows(r: Recipe) -> list[tuple[int, int]]:
    """The induction heads' windows over the n matched tokens: (first offset, size), ``match_window`` each."""
    size = r.match_window or r.match_order
    return [(a, min(size, r.match_order - a)) for a in range(0, r.match_order, size)]


def slow_dims(half: int, n_dims: int, offset: int = 0) -> list[int]:
    """Head dims of the slowest RoPE pairs but the very slowest (the sink's): n_dims of them, first dims then second;
    ``offset`` pairs faster (``code_band_offset``)."""
    pairs = list(range(half - 1 - n_dims // 2 - offset, half - 1 - offset))
    return pairs + [p + half for p in pairs]


def _share_lookup_codes(codes: torch.Tensor, stripped: list[str], special: set) -> None:
    """In place: "line" / " line" and "<" / " <" share the first such token's code, ">" gets none (see the
    comment where the match codes are drawn)."""
    first = {}
    for i, t in enumerate(stripped):
        if t in ("line", "<") and i not in special:
            codes[i] = codes[first.setdefault(t, i)]
        elif t == ">":
            codes[i] = 0


def _claim_head(fix, layer: int, rows: slice) -> None:
    """Zero and freeze one head's query, key and value rows (weights and biases): the circuit sets them."""
    for proj in ("q_proj", "k_proj", "v_proj"):
        fix(f"model.layers.{layer}.self_attn.{proj}.weight", (rows, slice(None)), 0.0)
        fix(f"model.layers.{layer}.self_attn.{proj}.bias", rows, 0.0)


def _frozen(model) -> dict:
    """name -> bool mask of the entries that belong to the circuit (kept fixed in training)."""
    return {n: torch.zeros_like(p, dtype=torch.bool) for n, p in model.named_parameters()}


def build_model(tokenizer, recipe: Recipe):
    """A LlamaForCausalLM (float32) with the copy circuit set and the masks of its frozen entries.

    With ``recipe.copy_circuit`` False: the same architecture, all random and all trainable (the
    no-memory control of the validation).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    r = recipe
    torch.manual_seed(r.seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=r.hidden_size,
        intermediate_size=r.intermediate_size,
        num_hidden_layers=r.num_layers,
        num_attention_heads=r.num_heads,
        num_key_value_heads=r.num_heads,
        head_dim=r.head_dim or r.hidden_size // r.num_heads,
        max_position_embeddings=r.max_position_embeddings,
        attention_bias=True,
        tie_word_embeddings=False,
        rope_theta=r.rope_theta,
        rope_parameters={"rope_type": "default", "rope_theta": r.rope_theta},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(cfg).float()
    frozen = _frozen(model)
    if r.copy_circuit:
        _set_circuit(model, tokenizer, r, frozen)
    model.eval()
    return model, frozen


@dataclass(frozen=True)
class _CircuitSizes:
    """What the steps of ``_set_circuit`` share: the layout and the sizes derived from the recipe."""

    lay: Layout
    H: int  # hidden size
    hd: int  # head size
    half: int  # RoPE pairs per head
    n: int  # matched tokens
    windows: list  # (first offset, size) per induction head
    w: int  # induction heads
    size: int  # the widest window
    cd: int  # dims per matched token in the induction heads
    bigram_dims: int


def _check_circuit(model, r: Recipe) -> _CircuitSizes:
    """Refuse a recipe whose circuit does not fit the model, before anything is set; the sizes the steps share."""
    lay = Layout.for_recipe(r)
    H, hd = r.hidden_size, model.config.head_dim
    half = hd // 2
    n = r.match_order
    if r.match_window < 0 or (r.readout_final and r.readout <= 0):
        raise ValueError(
            f"match_window must be >= 0 (got {r.match_window}) and readout > 0 when readout_final "
            f"is set (got {r.readout})"
        )
    windows = match_windows(r)  # (first offset, size) per induction head
    w = len(windows)
    if n > r.num_heads:
        raise ValueError("layer 0 needs one head per matched token")
    if r.lookup and (r.num_layers < 3 or n < 2 or w + 2 > r.num_heads):
        raise ValueError(
            f"the line lookup needs num_layers >= 3 (got {r.num_layers}), match_order >= 2 (got {n}) "
            f"and two heads beside the {w} induction heads in layer 1 (num_heads {r.num_heads})"
        )
    size = max(k for _, k in windows)
    cd = r.copy_code_dim or r.match_dim  # dims per matched token in the induction heads
    if r.copy_code_dim < 0:
        raise ValueError(f"copy_code_dim must be >= 0 (got {r.copy_code_dim}; 0: the match code)")
    if not (r.code_scale > 0 and r.bos_flag > 0):  # 0 would erase the codes or the sink; < 0 would invert them
        raise ValueError(f"code_scale and bos_flag must be > 0 (got {r.code_scale}, {r.bos_flag})")
    if r.copy_code_points and (r.copy_code_dim != 3 or r.copy_code_points < 2):
        raise ValueError(
            f"copy_code_points draws copy codes from points of the sphere in 3 dims: it needs "
            f"copy_code_dim 3 (got {r.copy_code_dim}) and >= 2 points (got {r.copy_code_points})"
        )
    if r.first_sink:
        if not r.copy_code_points:
            raise ValueError("first_sink tells the first position by its copy codes: set copy_code_points")
        if first_sink_threshold(n, nearest_point_cosine(sphere_points(r.copy_code_points)))[1] <= 0:
            raise ValueError(
                f"first_sink: {r.copy_code_points} copy-code points lie too close together to tell "
                f"the first position from the second with match_order {n}; use fewer points"
            )
        if not (math.isfinite(r.first_sink_sharpness) and r.first_sink_sharpness > 0):
            raise ValueError(f"first_sink_sharpness must be a positive number (got {r.first_sink_sharpness})")
        if r.intermediate_size < r.copy_code_points:
            raise ValueError(
                f"first_sink needs one layer-0 MLP neuron per copy-code point: intermediate_size "
                f"{r.intermediate_size} < copy_code_points {r.copy_code_points}"
            )
    if r.lookup and (3 * r.match_dim) // 2 + 1 > half:
        raise ValueError(
            f"the line lookup matches three match codes on slow RoPE pairs: 3 * match_dim / 2 + 1 must "
            f"fit in head_dim / 2 pairs (match_dim {r.match_dim}, head_dim {hd})"
        )
    if r.ngram_readout and not (r.lookup and r.copy_code_dim and r.match_order >= 3 and w + 3 <= r.num_heads):
        raise ValueError(
            f"the n-gram head reads the lookup's match-code slot and three copy-code slots and takes "
            f"layer-1 head w + 2: it needs lookup, copy_code_dim > 0, match_order >= 3 and num_heads >= "
            f"{w + 3} (ngram_readout {r.ngram_readout})"
        )
    if r.bigram_readout and not (r.ngram_readout and w + 4 <= r.num_heads):
        raise ValueError(
            f"the bigram head reads the n-gram head's slots and takes layer-1 head w + 3: it needs "
            f"ngram_readout > 0 and num_heads >= {w + 4} (bigram_readout {r.bigram_readout})"
        )
    if not (math.isfinite(r.bigram_readout) and r.bigram_readout >= 0 and 1.0 < r.bigram_sink < 2.0):
        raise ValueError(
            f"bigram_readout must be >= 0 nats (got {r.bigram_readout}) and bigram_sink between 1 and "
            f"2 matching codes (got {r.bigram_sink})"
        )
    if not (math.isfinite(r.ngram_readout) and r.ngram_readout >= 0 and 2.0 < r.ngram_sink < 3.0):
        raise ValueError(
            f"ngram_readout must be >= 0 nats (got {r.ngram_readout}) and ngram_sink between 2 and 3 "
            f"matching tokens (got {r.ngram_sink})"
        )
    if not (math.isfinite(r.trained_norm_init) and r.trained_norm_init > 0):
        raise ValueError(f"trained_norm_init must be a positive number (got {r.trained_norm_init})")
    if r.lookup and not (4.0 < r.lookup_sink < 6.0 and r.register_gap >= 1 and r.register_reach >= 0):
        raise ValueError(
            f"lookup_sink must lie between 4 and 6 parts (got {r.lookup_sink}), register_gap >= 1 (got "
            f"{r.register_gap}) and register_reach >= 0 (got {r.register_reach})"
        )
    if (size * cd) % 2 or size * cd // 2 + 1 > half - r.prev_pairs:
        raise ValueError("the induction codes and sink do not fit in the slow RoPE pairs")
    bigram_dims = 2 * ((r.match_dim + cd + 1) // 2)  # m(x_t) and c(x_t), on whole RoPE pairs
    widest = max(
        [size * cd]
        + ([3 * r.match_dim] if r.lookup else [])
        + ([r.match_dim + 2 * cd] if r.ngram_readout else [])
        + ([bigram_dims] if r.bigram_readout else [])
    )
    if not (isinstance(r.code_band_offset, int) and 0 <= r.code_band_offset <= half - 1 - widest // 2):
        raise ValueError(
            f"code_band_offset must be a whole number of RoPE pairs from 0 to {half - 1 - widest // 2} "
            f"(the codes need {widest // 2} pairs below the sink's; got {r.code_band_offset!r})"
        )
    return _CircuitSizes(lay, H, hd, half, n, windows, w, size, cd, bigram_dims)


@torch.no_grad()
def _set_circuit(model, tokenizer, r: Recipe, frozen: dict) -> None:
    """Set the copy circuit (and the lookup, the n-gram and bigram heads the recipe asks for) into ``model`` and mark
    its entries in ``frozen``, step by step."""
    z = _check_circuit(model, r)
    gen = torch.Generator().manual_seed(r.seed + 1)
    params = dict(model.named_parameters())

    def fix(name, index, value):
        p = params[name]
        p[index] = value
        frozen[name][index] = True

    o_codes, emb_units = _set_embedding(params, fix, tokenizer, r, z, gen)
    _keep_reserved_dimensions(params, fix, r, z)
    s0, s1, s2, s_lookup = _normed_scales(r, z, emb_units)
    freqs = inverse_frequencies(r.rope_theta, z.hd)
    _set_previous_token_heads(params, fix, r, z, freqs, r.code_scale, s0)
    if r.first_sink:
        _set_first_sink(params, fix, r, z.lay, s1)
    _set_layer1_heads(params, fix, r, z, freqs, r.code_scale, s1, s_lookup)
    _set_readout(params, frozen, r, z, o_codes, s2)


def _set_embedding(
    params, fix, tokenizer, r: Recipe, z: _CircuitSizes, gen: torch.Generator
) -> tuple[torch.Tensor, float]:
    """Every token's codes in the reserved columns of the input embedding, BOS's flag, nothing else there; returns
    the output codes and how many unit codes an ordinary token's reserved columns hold."""
    lay = z.lay
    V = params["model.embed_tokens.weight"].shape[0]
    special = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    special.discard(None)
    m_codes = _unit_rows(gen, V, r.match_dim)
    if r.lookup:
        # The line marker and the brackets share their match code with their spaced forms ("line" / " line",
        # "<" / " <"): the record writes "line" at a line start and the question " line", and a prompt that ends
        # with a space is answered with "<" where the record has " <". (Only these: sharing every spaced form
        # would add chance matches to the copy windows.) ">" gets no match code at all: no copy window matches
        # through it, so after an answer's closing ">" nothing votes for the record's next line and the trained
        # layers end the answer (the lookup never needs ">" in a match, only as the piece it fetches).
        stripped = [tokenizer.decode([i]).strip() for i in range(V)]
        _share_lookup_codes(m_codes, stripped, special)
        digits = [i for i, t in enumerate(stripped) if t.isdigit() and t.isascii()]
        query_ids = digits + [i for i, t in enumerate(stripped) if t == "<"]
        value_ids = digits + [i for i, t in enumerate(stripped) if t == ">"]
        marker_ids = [i for i, t in enumerate(stripped) if t == "line"]
    o_codes = _unit_rows(gen, V, r.output_dim)
    c_codes = m_codes
    if r.copy_code_dim:  # drawn after the others, so a recipe without it keeps its codes
        c_codes = _unit_rows(gen, V, r.copy_code_dim)
        if r.copy_code_points:  # each token gets one of the points (a random one)
            c_codes = sphere_points(r.copy_code_points)[torch.randint(0, r.copy_code_points, (V,), generator=gen)]
        if r.lookup:  # the same sharing as the match code's, for the same reasons
            _share_lookup_codes(c_codes, stripped, special)
    for s in special:
        m_codes[s] = 0
        o_codes[s] = 0
        c_codes[s] = 0
    emb = "model.embed_tokens.weight"
    fix(emb, (slice(None), slice(0, lay.reserved)), 0.0)
    S = r.code_scale
    fix(emb, (slice(None), lay.match), S * m_codes)
    fix(emb, (slice(None), lay.copy), S * c_codes)
    fix(emb, (slice(None), lay.output), S * o_codes)
    fix(emb, (tokenizer.bos_token_id, lay.bos), r.bos_flag)
    if r.lookup:
        fix(emb, (query_ids, lay.number_query), S)
        fix(emb, (value_ids, lay.number_value), S)
        fix(emb, (marker_ids, lay.marker), S)
    emb_units = 2.0 + (1 if r.copy_code_dim else 0)  # unit codes in an ordinary token's reserved columns
    if r.first_sink:
        ordinary = [i for i in range(V) if i not in special]
        fix(emb, (ordinary, lay.unit), S)
        units = params[emb][ordinary, : lay.reserved].double().pow(2).sum(1) / (S * S)
        emb_units = float(math.ceil(float(units.max()) - 1e-6))
        fix(emb, (ordinary, lay.filler), (S * (emb_units - units).clamp(min=0.0).sqrt()).float())
    # BOS is the sink: a fixed row keeps its normed flag (and so the sink's score) where it was set
    fix(emb, (tokenizer.bos_token_id, slice(None)), 0.0)
    params[emb][tokenizer.bos_token_id, lay.bos] = r.bos_flag

    return o_codes, emb_units


def _keep_reserved_dimensions(params, fix, r: Recipe, z: _CircuitSizes) -> None:
    """The trained parts never write into the reserved dimensions; their norms start at ``trained_norm_init``."""
    lay = z.lay
    # ---- trained parts never write into the reserved dimensions
    for i in range(r.num_layers):
        for name in (f"model.layers.{i}.self_attn.o_proj.weight", f"model.layers.{i}.mlp.down_proj.weight"):
            fix(name, (slice(0, lay.reserved), slice(None)), 0.0)
        fix(f"model.layers.{i}.self_attn.o_proj.bias", slice(0, lay.reserved), 0.0)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            fix(f"model.layers.{i}.{norm}.weight", slice(0, lay.reserved), 1.0)
    fix("model.norm.weight", slice(0, lay.reserved), 1.0)
    if r.trained_norm_init != 1.0:
        for name, p in params.items():
            if name.endswith("norm.weight"):
                p[lay.reserved :] = r.trained_norm_init


def _normed_scales(r: Recipe, z: _CircuitSizes, emb_units: float) -> tuple[float, float, float, float | None]:
    """Typical size of a unit code after each RMSNorm (s0: layer 0's input, s1: layer 1's, s2: the final norm's, s_lookup: layer 2's)."""
    lay, H, n, w = z.lay, z.H, z.n, z.w

    # Typical scale of a unit code after RMSNorm: the reserved part dominates the residual's norm.
    def normed_scale(n_unit_codes: float) -> float:
        return math.sqrt(H / n_unit_codes)

    own = 1 if lay.prev_match is not lay.prev[0] else 0  # m(x_{t-1}) in a slot of its own
    s0 = normed_scale(emb_units)  # layer 0 input: m, o (and c; and the unit and filler)
    s1 = normed_scale(emb_units + n + own)  # layer 1 input: plus P1..Pn (and m(x_{t-1}))
    s2 = normed_scale(emb_units + n + own + w * w)  # final norm: plus R, the sum of w agreeing output codes
    if r.lookup:
        s_lookup = normed_scale(
            emb_units + n + own + 2
        )  # layer 2 input: plus the two registers (R is 0 outside a copy)
        s2 = normed_scale(emb_units + n + own + w * w + 2)

    return s0, s1, s2, (s_lookup if r.lookup else None)


def _set_previous_token_heads(params, fix, r: Recipe, z: _CircuitSizes, freqs: np.ndarray, S: float, s0: float) -> None:
    """Layer 0: head h attends to t - (h + 1) and copies its codes into slot P(h+1)."""
    lay, H, hd, half, n, cd = z.lay, z.H, z.hd, z.half, z.n, z.cd
    # ---- layer 0: head h attends to t - (h + 1) and copies its copy code (the match code without one) into P(h+1)
    fast = np.arange(r.prev_pairs)
    for h in range(n):
        offset = h + 1
        amp = _prev_token_amplitude(freqs[fast], offset, r.max_position_embeddings, r.prev_logit_margin, hd)
        rows = slice(h * hd, (h + 1) * hd)
        _claim_head(fix, 0, rows)
        qb = torch.zeros(hd)
        kb = torch.zeros(hd)
        for i in fast:
            a = freqs[i] * offset
            qb[i] = amp
            kb[i], kb[i + half] = amp * math.cos(a), amp * math.sin(a)  # R(offset * w) (amp, 0)
        fix("model.layers.0.self_attn.q_proj.bias", rows, qb)
        fix("model.layers.0.self_attn.k_proj.bias", rows, kb)
        # At a BOS (the forgetting curve's middle one, say) the head attends to a BOS instead (match code 0), so
        # a BOS never carries the codes of the tokens before it: with them, its key would add a chance match
        # to the sink score and out-score a true match. BOS's normed flag is sqrt(H) at layer 0 (its row holds
        # the flag alone); the slowest pair barely turns, and the BOS itself (distance 0) always gets the bonus.
        if r.bos_clean:
            bos_bonus = amp * amp * len(fast) / math.sqrt(hd) + 2 * r.prev_logit_margin
            a_bos = math.sqrt(bos_bonus * math.sqrt(hd)) / math.sqrt(H)
            params["model.layers.0.self_attn.q_proj.weight"][rows.start + half - 1, lay.bos] = a_bos
            params["model.layers.0.self_attn.k_proj.weight"][rows.start + half - 1, lay.bos] = a_bos
        v = params["model.layers.0.self_attn.v_proj.weight"]
        o = "model.layers.0.self_attn.o_proj.weight"
        fix(o, (slice(None), rows), 0.0)
        # value dims: the copy code, then (head 0, with a copy code of its own) the match code, then the marker flag
        moves = [(lay.copy.start + c, lay.prev[h].start + c) for c in range(cd)]
        if h == 0 and lay.prev_match is not lay.prev[0]:
            moves += [(lay.match.start + c, lay.prev_match.start + c) for c in range(r.match_dim)]
        if r.lookup and h < 2:  # the line marker flags of x_{t-1} and x_{t-2}
            moves.append((lay.marker, lay.prev_marker[h]))
        for d, (src, dst) in enumerate(moves):
            v[h * hd + d, src] = 1.0
            fix(o, (dst, h * hd + d), S / s0)


def _set_layer1_heads(
    params, fix, r: Recipe, z: _CircuitSizes, freqs: np.ndarray, S: float, s1: float, s_lookup: float | None
) -> None:
    """Layer 1: the induction heads, and the lookup's registers, the n-gram and the bigram heads where the recipe
    has them."""
    lay, H, hd, half, windows, w, size, cd, bigram_dims = (
        z.lay,
        z.H,
        z.hd,
        z.half,
        z.windows,
        z.w,
        z.size,
        z.cd,
        z.bigram_dims,
    )
    # ---- layer 1, heads 0..w-1: induction heads on the slowest pairs, sink on the very slowest.
    # Head v matches the tokens x_{t-a} .. x_{t-a-k+1} of its window (a, k) (a = 0 starts at x_t itself)
    # against x_{j-a-1} .. x_{j-a-k} and writes o(x_j) into R: where all windows agree (a copy that has run
    # for n tokens) the copied token gets w votes, a chance match of one window's k tokens one vote.
    sink_pair = half - 1
    code_dims = slow_dims(half, size * cd, r.code_band_offset)
    # score units: q.k / sqrt(hd) = match_gain per matching token
    g = math.sqrt(r.match_gain * math.sqrt(hd)) / s1
    # sink: q bias b, key reads the BOS flag (normed BOS: flag * sqrt(H), as BOS has no other code)
    k_flag = 1.0

    def sink_bias(level: float) -> float:  # the sink's score, in matching tokens
        return level * r.match_gain * math.sqrt(hd) / (k_flag * math.sqrt(H))

    for v in range(w):
        first, k = windows[v]
        q_src = [lay.copy if a == 0 else lay.prev[a - 1] for a in range(first, first + k)]
        k_src = lay.prev[first : first + k]
        # a shorter (last) window sinks as many matching tokens lower as it is shorter
        _set_induction_head(
            params,
            fix,
            r,
            lay,
            slice(v * hd, (v + 1) * hd),
            [(qs, ks, cd) for qs, ks in zip(q_src, k_src)],
            code_dims,
            g,
            sink_bias(r.sink_level - (size - k)),
            k_flag,
            S / s1,
        )
    if r.lookup:
        _set_lookup(
            params,
            fix,
            r,
            lay,
            freqs,
            hd,
            H,
            w,
            s1,
            s_lookup,
            slow_dims(half, 3 * r.match_dim, r.code_band_offset),
            sink_pair,
            k_flag,
        )
    if r.ngram_readout:  # the n-gram head: (m(x_t), c(x_{t-1}), c(x_{t-2})) against the three tokens before j
        matches = [
            (lay.match, lay.prev_match, r.match_dim),
            (lay.prev[0], lay.prev[1], cd),
            (lay.prev[1], lay.prev[2], cd),
        ]
        share = r.ngram_readout / (r.readout_final or r.readout)  # of the copy's vote, after sharpening
        _set_induction_head(
            params,
            fix,
            r,
            lay,
            slice((w + 2) * hd, (w + 3) * hd),
            matches,
            slow_dims(half, r.match_dim + 2 * cd, r.code_band_offset),
            g,
            sink_bias(r.ngram_sink),
            k_flag,
            S / s1 * share,
        )
    if r.bigram_readout:  # the bigram head: x_t on its match and copy codes against x_{j-1}'s (m(x_{j-1}), P1)
        matches = [(lay.match, lay.prev_match, r.match_dim), (lay.copy, lay.prev[0], cd)]
        share = r.bigram_readout / (r.readout_final or r.readout)
        _set_induction_head(
            params,
            fix,
            r,
            lay,
            slice((w + 3) * hd, (w + 4) * hd),
            matches,
            slow_dims(half, bigram_dims, r.code_band_offset),
            g,
            sink_bias(r.bigram_sink),
            k_flag,
            S / s1 * share,
        )


def _set_readout(params, frozen: dict, r: Recipe, z: _CircuitSizes, o_codes: torch.Tensor, s2: float) -> None:
    """The output layer scores o(y) against R (trainable from here on, unless frozen)."""
    lay = z.lay
    w = z.w
    # ---- readout: the output layer scores o(y) against R (trainable from here on)
    head = params["lm_head.weight"]
    head[:, : lay.reserved] = 0.0
    # R after the final norm is about s2 * w * o(x_j): a copy on which all w windows agree adds ``readout`` nats
    # to o(x_j)'s logit
    head[:, lay.read] = o_codes * (r.readout / (w * s2))
    if r.freeze_readout:  # training on text where chance matches mislead would otherwise shrink it, and the copy
        frozen["lm_head.weight"][:, lay.read] = True


def _set_induction_head(
    params,
    fix,
    r: Recipe,
    lay: Layout,
    rows: slice,
    matches,
    dims,
    g: float,
    sink_q: float,
    k_flag: float,
    write: float,
) -> None:
    """Layer 1, the head at ``rows``: for each (query slice, key slice, size) in ``matches`` the query reads the
    slice at t and the key the slice at j, ``g`` each, on the next ``size`` of ``dims`` (RoPE dims), so a matching
    token adds ``match_gain`` nats; the sink pair's query bias ``sink_q`` meets the BOS flag (``k_flag``); the value
    o(x_j) is written into R at ``write``. The exact copy's windows and the n-gram head
    (``ngram_readout``: (m(x_t), c(x_{t-1}), c(x_{t-2})) against (m(x_{j-1}), c(x_{j-2}), c(x_{j-3})), the lookup's
    match-code slot and the copy-code slots P2, P3) and the bigram head (``bigram_readout``: (m(x_t), c(x_t)) against
    (m(x_{j-1}), c(x_{j-1}))) are built by it."""
    hd = rows.stop - rows.start
    _claim_head(fix, 1, rows)
    qw = params["model.layers.1.self_attn.q_proj.weight"]
    kw = params["model.layers.1.self_attn.k_proj.weight"]
    vw = params["model.layers.1.self_attn.v_proj.weight"]
    dims = iter(dims)
    for q_src, k_src, size in matches:
        for c in range(size):
            d = rows.start + next(dims)
            qw[d, q_src.start + c] = g
            kw[d, k_src.start + c] = g
    sink_pair = hd // 2 - 1
    params["model.layers.1.self_attn.q_proj.bias"][rows.start + sink_pair] = sink_q
    kw[rows.start + sink_pair, lay.bos] = k_flag
    for c in range(r.output_dim):
        vw[rows.start + c, lay.output.start + c] = 1.0
    o = "model.layers.1.self_attn.o_proj.weight"
    fix(o, (slice(None), rows), 0.0)
    for c in range(r.output_dim):
        fix(o, (lay.read.start + c, rows.start + c), write)


def _set_first_sink(params, fix, r: Recipe, lay: Layout, s_mlp: float) -> None:
    """Layer 0's MLP, neurons 0..K-1 (one per copy-code point p_k): neuron k scores the agreement
    n * (p_k . c(x_t)) + sum_h p_k . P_h, in unit codes, against ``first_sink_threshold`` times the unit; its
    gate opens only where the token's own code and all n previous-token slots sit on p_k, i.e. at a sequence's
    first position (or in a run of n + 1 tokens on one point), and it writes at least ``bos_flag`` into the BOS
    flag there. Its input is the layer-0 MLP's (the embedding and P1..Pn, RMS-normed to ``s_mlp`` per unit)."""
    points = sphere_points(r.copy_code_points)
    n = r.match_order
    threshold, margin = first_sink_threshold(n, nearest_point_cosine(points))
    beta = r.first_sink_sharpness / margin / s_mlp  # gate nats per normed unit of the score
    # the worst case opens the gate to ``first_sink_sharpness``: SwiGLU passes silu(gate) x up (up = 1)
    per_neuron = r.bos_flag / torch.nn.functional.silu(torch.tensor(r.first_sink_sharpness)).item()
    gate, up, down = (f"model.layers.0.mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj"))
    neurons = slice(0, len(points))
    fix(gate, (neurons, slice(None)), 0.0)
    fix(up, (neurons, slice(None)), 0.0)
    fix(down, (slice(None), neurons), 0.0)
    for k in range(len(points)):
        params[gate][k, lay.copy] = beta * n * points[k]
        for prev in lay.prev:
            params[gate][k, prev] = beta * points[k]
        params[gate][k, lay.unit] = -beta * threshold
        params[up][k, lay.unit] = 1.0 / s_mlp
        params[down][lay.bos, k] = per_neuron


def register_recency(freqs: np.ndarray, reach: int, gap: int, max_len: int) -> tuple[np.ndarray, float]:
    """Weights w_i >= 0 (sum 1) over RoPE pairs whose profile P(d) = sum_i w_i cos(f_i d) falls by the most
    (``mu``) from any distance d <= ``reach`` to every distance >= d + ``gap`` (up to ``max_len``): a query
    bias and a key term on those pairs make the most recent of several markers win by A * mu nats.

    A linear program (scipy's HiGHS) over the worst pairs of distances, added until none is violated."""
    from scipy.optimize import linprog

    k = len(freqs)
    cos = np.cos(np.outer(np.arange(max_len + 1), freqs))
    near = np.arange(reach + 1)
    pairs = {(a, b) for a in near for b in range(a + gap, max_len + 1, 97)} | {(a, a + gap) for a in near}
    for _ in range(50):
        rows = sorted(pairs)
        a_ub = np.hstack([np.array([cos[b] - cos[a] for a, b in rows]), np.ones((len(rows), 1))])
        res = linprog(
            np.r_[np.zeros(k), -1.0],
            A_ub=a_ub,
            b_ub=np.zeros(len(rows)),
            A_eq=np.r_[np.ones(k), 0.0][None],
            b_eq=[1.0],
            bounds=[(0, None)] * k + [(None, None)],
            method="highs",
        )
        if not res.success:
            raise RuntimeError(f"register recency: the linear program failed ({res.message})")
        weights, mu = res.x[:k], float(res.x[k])
        profile = cos @ weights
        worst = [(a, a + gap + int(np.argmax(profile[a + gap :]))) for a in near]
        new = {(a, b) for a, b in worst if profile[a] - profile[b] < mu - 1e-9}
        if not new:
            return np.clip(weights, 0.0, None), mu
        pairs |= new
    raise RuntimeError("register recency: the linear program did not converge")


def _set_lookup(
    params, fix, r: Recipe, lay: Layout, freqs, hd, H, w, s1, s_lookup, code_dims, sink_pair, k_flag
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
    pairs as the induction heads, so ``rope_theta`` sets its reach too."""
    half = hd // 2
    qb1 = params["model.layers.1.self_attn.q_proj.bias"]
    kw1 = params["model.layers.1.self_attn.k_proj.weight"]
    vw1 = params["model.layers.1.self_attn.v_proj.weight"]
    o1 = "model.layers.1.self_attn.o_proj.weight"
    rec_pairs = [i for i in range(half) if i != sink_pair]
    weights, mu = register_recency(freqs[rec_pairs], r.register_reach, r.register_gap, r.max_position_embeddings)
    profile = np.cos(np.outer(np.arange(r.register_reach + 1), freqs[rec_pairs])) @ weights
    amp = 2.0 * r.register_margin / mu  # nats per unit of the profile
    sink = math.log(r.max_position_embeddings) + r.register_margin  # beats every non-marker (score 0)
    base = sink + r.register_margin - amp * float(profile.min())  # a marker within reach beats the sink
    b_sink = sink * math.sqrt(hd) / (k_flag * math.sqrt(H))
    for idx in range(2):
        head = w + idx
        rows = slice(head * hd, (head + 1) * hd)
        _claim_head(fix, 1, rows)
        for p, wt in zip(rec_pairs, weights):
            a = math.sqrt(amp * wt * math.sqrt(hd))
            qb1[rows.start + p] = a
            kw1[rows.start + p, lay.prev_marker[idx]] = a / s1
        qb1[rows.start + sink_pair] = b_sink
        kw1[rows.start + sink_pair, lay.bos] = k_flag
        kw1[rows.start + sink_pair, lay.prev_marker[idx]] = base * math.sqrt(hd) / (b_sink * s1)
        for c in range(r.match_dim):
            vw1[rows.start + c, lay.match.start + c] = 1.0
        fix(o1, (slice(None), rows), 0.0)
        for c in range(r.match_dim):
            fix(o1, (lay.register[idx].start + c, rows.start + c), r.code_scale / s1)

    # layer 2, head 0: the lookup
    rows = slice(0, hd)
    _claim_head(fix, 2, rows)
    qw2 = params["model.layers.2.self_attn.q_proj.weight"]
    kw2 = params["model.layers.2.self_attn.k_proj.weight"]
    vw2 = params["model.layers.2.self_attn.v_proj.weight"]
    g = math.sqrt(r.lookup_gain * math.sqrt(hd)) / s_lookup
    blocks = [(lay.register[0], lay.register[0]), (lay.register[1], lay.register[1]), (lay.match, lay.prev_match)]
    # the token counts two parts: the piece after the asked one and the line's other pieces (or its ">") then
    # differ by two parts, which no drift of the codes' scale between positions undoes
    for block, (qs, ks) in enumerate(blocks):
        for c in range(r.match_dim):
            d = code_dims[block * r.match_dim + c]
            qw2[d, qs.start + c] = g * (2.0 if block == 2 else 1.0)
            kw2[d, ks.start + c] = g
    b = r.lookup_sink * r.lookup_gain * math.sqrt(hd) / (k_flag * math.sqrt(H))
    params["model.layers.2.self_attn.q_proj.bias"][sink_pair] = b
    kw2[sink_pair, lay.bos] = k_flag
    # the number flags on the sink pair's other dimension (the slowest pair: no rotation within the reach)
    # (worth two parts: a match without them stays well below the sink however the codes' scale drifts)
    qw2[sink_pair + half, lay.number_query] = 2.0 * g
    kw2[sink_pair + half, lay.number_value] = g
    for c in range(r.output_dim):
        vw2[c, lay.output.start + c] = 1.0
    o2 = "model.layers.2.self_attn.o_proj.weight"
    fix(o2, (slice(None), rows), 0.0)
    weight = (r.lookup_readout or r.readout) * w / r.readout  # in window votes
    for c in range(r.output_dim):
        fix(o2, (lay.read.start + c, c), r.code_scale * weight / s_lookup)


# --------------------------------------------------------------------------- training


def token_stream(tokenizer, texts: list[str]) -> np.ndarray:
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    return np.concatenate([np.asarray(x, dtype=np.int64) for x in ids])


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
    stream: np.ndarray, rng: np.random.Generator, r: Recipe, bos_id: int, longeval_row=None
) -> torch.Tensor:
    """[BOS] + seq_len - 1 tokens; a ``repeat_fraction`` of rows are X1 S X2 S X3 (S repeated), a
    ``longeval_fraction`` (with ``longeval_row(rng, max_tokens)``) a LongEval record and answer, then text."""
    n = r.seq_len - 1
    rows = []
    for _ in range(r.batch_size):
        if longeval_row is not None and rng.random() < r.longeval_fraction:
            head = longeval_row(rng, n)
            a = int(rng.integers(0, len(stream) - n))
            row = np.concatenate([head, stream[a : a + n - len(head)]])
        elif rng.random() < r.repeat_fraction:
            span = int(rng.integers(r.repeat_min, min(r.repeat_max, n // 2 - 2) + 1))
            s0 = int(rng.integers(0, len(stream) - span))
            s = stream[s0 : s0 + span]
            rest = n - 2 * span
            cut = np.sort(rng.integers(0, rest + 1, size=2))
            fill0 = int(rng.integers(0, len(stream) - rest))
            fill = stream[fill0 : fill0 + rest]
            row = np.concatenate([fill[: cut[0]], s, fill[cut[0] : cut[1]], s, fill[cut[1] :]])
        else:
            a = int(rng.integers(0, len(stream) - n))
            row = stream[a : a + n]
        rows.append(np.concatenate([[bos_id], row]))
    return torch.as_tensor(np.stack(rows), dtype=torch.long)


def train_model(
    model, frozen: dict, stream: np.ndarray, recipe: Recipe, bos_id: int, log_every: int = 25, log=print, tokenizer=None
) -> dict:
    """AdamW with warm-up and cosine decay; frozen entries restored after every step."""
    r = recipe
    torch.manual_seed(r.seed)
    rng = np.random.default_rng(r.seed)
    params = dict(model.named_parameters())
    keep = {n: (m, params[n].detach().clone()) for n, m in frozen.items() if m.any()}
    if not (math.isfinite(r.embedding_lr_scale) and r.embedding_lr_scale > 0):
        raise ValueError(f"embedding_lr_scale must be a positive number (got {r.embedding_lr_scale})")
    embedding = {"model.embed_tokens.weight", "lm_head.weight"}
    decay = [p for n, p in params.items() if p.dim() >= 2 and n not in embedding]
    no_decay = [p for n, p in params.items() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": r.weight_decay},
            {
                "params": [params[n] for n in sorted(embedding)],
                "weight_decay": r.weight_decay,
                "lr": r.lr * r.embedding_lr_scale,
            },
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=r.lr,
        betas=(0.9, 0.95),
    )

    def lr_at(step):
        if step < r.warmup_steps:
            return (step + 1) / r.warmup_steps
        progress = (step - r.warmup_steps) / max(1, r.steps - r.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    longeval_row = None
    if not 0.0 <= r.longeval_fraction <= 1.0:
        raise ValueError(f"longeval_fraction is a fraction of the training rows: 0 .. 1 (got {r.longeval_fraction})")
    if r.longeval_fraction:
        if tokenizer is None:
            raise ValueError("longeval_fraction > 0 needs the tokenizer")
        longeval_row = lambda g, m: longeval_training_row(tokenizer, g, m)  # noqa: E731
    model.train()
    t0 = time.time()
    losses = []
    for step in range(r.steps):
        batch = training_batch(stream, rng, r, bos_id, longeval_row)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for n, (m, v) in keep.items():
                params[n][m] = v[m]
        losses.append(loss.item())
        if log and (step % log_every == 0 or step == r.steps - 1):
            log(f"step {step:4d} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    return {
        "train_seconds": round(time.time() - t0, 1),
        "final_loss": float(np.mean(losses[-10:])),
        "tokens": r.steps * r.batch_size * r.seq_len,
    }


# --------------------------------------------------------------------------- one call


def make_model(out_dir, recipe: Recipe | None = None, tokenizer=None, texts=None, dtype="float16", log=print) -> dict:
    """Train the tokenizer (unless given) and the model; save both and ``recipe.json`` in ``out_dir``."""
    from .offline import train_tokenizer

    r = recipe or Recipe()
    out = Path(out_dir)
    if texts is None:
        texts = training_texts(r.train_chars)
    if tokenizer is None:
        tokenizer = train_tokenizer(texts, vocab_size=r.vocab_size)
    model, frozen = build_model(tokenizer, r)
    info, n_stream = {}, 0
    if r.steps:
        stream = token_stream(tokenizer, texts)
        n_stream = int(len(stream))
        with _votes_silenced(model, r, silent=not r.votes_in_training):
            info = train_model(model, frozen, stream, r, tokenizer.bos_token_id, log=log, tokenizer=tokenizer)
    if r.copy_circuit and r.readout_final and r.steps:  # the untrained construction keeps its training readout
        sharpen_readout(model, r)
    out.mkdir(parents=True, exist_ok=True)
    model.to(getattr(torch, dtype)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    _make_portable(out, r.rope_theta)
    n_params = sum(p.numel() for p in model.parameters())
    record = {
        "recipe": asdict(r),
        "n_parameters": n_params,
        "training_tokens_available": n_stream,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "saved_dtype": dtype,
        **info,
    }
    (out / "recipe.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def vote_writes(model, r: Recipe) -> list:
    """The (o_proj weight, rows, columns) blocks through which the exact copy heads (layer 1, heads 0..w-1) and
    the lookup (layer 2, head 0) write their votes into R; the n-gram head's are not among them."""
    if not r.copy_circuit:
        return []
    read, hd = Layout.for_recipe(r).read, model.config.head_dim
    blocks = [(model.model.layers[1].self_attn.o_proj.weight, read, slice(0, len(match_windows(r)) * hd))]
    if r.lookup:
        blocks.append((model.model.layers[2].self_attn.o_proj.weight, read, slice(0, hd)))
    return blocks


@contextmanager
def _votes_silenced(model, r: Recipe, silent: bool):
    """With ``silent``, zero the exact copy's and the lookup's vote writes for the block's duration (they are
    frozen, so training keeps them at zero), then put them back as built."""
    blocks = vote_writes(model, r) if silent else []
    saved = [w[rows, cols].detach().clone() for w, rows, cols in blocks]
    with torch.no_grad():
        for w, rows, cols in blocks:
            w[rows, cols] = 0.0
    try:
        yield
    finally:
        with torch.no_grad():
            for (w, rows, cols), v in zip(blocks, saved):
                w[rows, cols] = v


@torch.no_grad()
def sharpen_readout(model, r: Recipe) -> None:
    """Scale the frozen readout columns from ``readout`` to ``readout_final`` nats (the copy's strength)."""
    read = Layout.for_recipe(r).read
    model.lm_head.weight[:, read] *= r.readout_final / r.readout


def _make_portable(out: Path, rope_theta: float) -> None:
    """Keep the checkpoint readable by transformers 4.x too (the project supports >= 4.48): 4.x reads a
    top-level ``rope_theta`` (else silently 10000, which would shorten the memory) and knows the
    tokenizer as PreTrainedTokenizerFast."""
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["rope_theta"] = float(rope_theta)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tok_path = out / "tokenizer_config.json"
    tok = json.loads(tok_path.read_text(encoding="utf-8"))
    tok["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok.pop("is_local", None)
    tok_path.write_text(json.dumps(tok, indent=2, sort_keys=True) + "\n", encoding="utf-8")


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
