"""One forward, run and read exactly: the pieces the scoring functions (``scoring.py``) are built from.

* ``full``: one forward of the whole sequence with no cache and no mask (so SDPA and flash kernels apply), its
  decoder's output kept, and the model's own output head replayed on it a block of rows at a time: the head's
  code runs as written (soft-capping, logit scales, dtype casts, whatever the model does), only on fewer rows,
  and is checked against the model's own logits on the last rows of every forward.
* ``own logits``: a forward that returns the model's logits for its last ``keep`` positions (the chunks of the
  chunked long pass).
* ``KVCache``: a cache handed to the model the way its forward takes it, trusted only when it advances by the
  tokens fed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import weakref

import torch

from ..errors import ScoringError
from . import attention
from .attention import AttentionKernel, AttentionKernels
from .memory import (
    HEAD_BLOCK_BYTES,
    HEAD_BLOCK_BYTES_ACCELERATOR,
    LOGPROB_BLOCK_BYTES,
    LOGPROB_BLOCK_BYTES_ACCELERATOR,
    compute_dtype,
    config_sizes,
    dtype_bytes,
)
from .support import ModelSupport, describe

# rows of every full forward checked against the model's own logits
CHECKED_ROWS = 1
# tokens of the probe that checks, once per model, that the head replay reproduces a plain forward
PROBE_TOKENS = 8


class NonFiniteLogitsError(ScoringError):
    """The model's own output holds NaN or an infinity where a token is scored: a fact of the model or its dtype,
    not of how the engine reads it. ``names_model``: the message already names the model and the cause."""

    names_model = False


def non_finite_logits_error(model, where: str) -> NonFiniteLogitsError:
    """The error for non-finite logits at ``where``, naming the model, its dtype and the likely cause: float16
    overflow, weights that hold NaN or inf, or the model's own forward on this input."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None) or type(model).__name__
    dtype = str(compute_dtype(model)).replace("torch.", "")
    broken = [name for name, p in model.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
    if broken:
        cause = (
            f"{len(broken)} of its weight tensors hold NaN or inf (first: {broken[0]}): the checkpoint is broken. "
            "Way out: reload or re-download it"
        )
    elif dtype == "float16":
        cause = (
            "float16 activations overflow (its largest value is 65504). Way out: load it in bfloat16 or float32 "
            "(--model_args dtype=bfloat16)"
        )
    else:
        cause = (
            "its weights are finite, so its own forward produces them on this input (a plain forward of the "
            "sequence gives the same). Way out: check the model on this input; a float32 load rules out rounding "
            "(--model_args dtype=float32)"
        )
    err = NonFiniteLogitsError(
        f"model type {model_type!r} ({dtype}): its logits are not finite (NaN or inf) {where}: {cause}"
    )
    err.names_model = True
    return err


# called with (model, token positions, part of them already ticked by layers) after every forward of the decoder
# (recording.py counts them)
_FORWARD_LISTENERS: list = []
# called with (model, work) as each decoder layer ends inside a forward: a long forward's progress moves in steps of
# one layer's share of its token positions, not only when it ends
_LAYER_LISTENERS: list = []


def on_forward(listener) -> None:
    if listener not in _FORWARD_LISTENERS:
        _FORWARD_LISTENERS.append(listener)


def on_layer(listener) -> None:
    if listener not in _LAYER_LISTENERS:
        _LAYER_LISTENERS.append(listener)


def forwarded(model, ids: torch.Tensor, ticked: float = 0.0) -> None:
    for listener in _FORWARD_LISTENERS:
        listener(model, int(ids.numel()), ticked)


_DECODER_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder's blocks: the module list of the config's number of hidden layers (``model.layers``,
    ``transformer.h``, ``decoder.layers``), or [] when the model has none that size."""
    if model not in _DECODER_LAYERS:
        _DECODER_LAYERS[model] = _find_decoder_layers(model)
    return _DECODER_LAYERS[model]


def _find_decoder_layers(model) -> list[torch.nn.Module]:
    config = getattr(model, "config", None)
    get_text_config = getattr(config, "get_text_config", None)
    text_config = get_text_config() if callable(get_text_config) else config
    n_layers = getattr(text_config, "num_hidden_layers", None)
    if not isinstance(n_layers, int) or n_layers < 1:
        return []
    for module in causal_lm(model).modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return list(module)
    return []


class LayerTicks:
    """Inside ``with LayerTicks(model, ids) as ticks``, each decoder layer's end gives the layer listeners its share
    of the forward's token positions; ``ticks.done`` is what they were given (never more than the forward's)."""

    def __init__(self, model, ids: torch.Tensor):
        self.model, self.n, self.done = model, float(ids.numel()), 0.0
        self.layers = decoder_layers(model) if _LAYER_LISTENERS else []
        self.handles: list = []

    def _tick(self, *_args) -> None:
        share = min(self.n / len(self.layers), self.n - self.done)
        if share > 0:
            self.done += share
            for listener in _LAYER_LISTENERS:
                listener(self.model, share)

    def __enter__(self) -> LayerTicks:
        self.handles = [layer.register_forward_hook(self._tick) for layer in self.layers]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()


# ------------------------------------------------------------------ devices


def _hook_execution_device(module) -> torch.device | None:
    """The device accelerate runs ``module`` on, when a dispatch hook says so (None otherwise)."""
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):  # SequentialHook or one hook
        device = getattr(h, "execution_device", None)
        if device is not None:
            return torch.device(device)
    return None


def _module_device(module) -> torch.device | None:
    """Where ``module`` computes: its dispatch hook's execution device, else its first real tensor's device
    (offloaded weights sit on "meta" between forwards)."""
    device = _hook_execution_device(module)
    if device is not None:
        return device
    for t in list(module.parameters(recurse=True)) + list(module.buffers(recurse=True)):
        if t.device.type != "meta":
            return t.device
    return None


def _io_same_device(model) -> bool:
    hook = getattr(model, "_hf_hook", None)
    return any(getattr(h, "io_same_device", False) for h in getattr(hook, "hooks", None) or [hook])


def input_device(model) -> torch.device:
    """The device the engine puts token ids on: the output head's under an accelerate dispatch (the top-level
    hook moves inputs to the first device and outputs back, so logits stay where the head made them), else the
    input embedding's."""
    if getattr(model, "_hf_hook", None) is not None and _io_same_device(model):
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        device = (_module_device(head) if head is not None else None) or _hook_execution_device(model)
        if device is not None:
            return device
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    device = _module_device(embeddings) if embeddings is not None else None
    if device is None:
        device = _module_device(model)
    if device is None:
        raise ScoringError(
            f"cannot tell which device {type(model).__name__} runs on (every weight is on 'meta' "
            "and no accelerate hook names an execution device)"
        )
    return device


# ------------------------------------------------------------------ log-probs from logits


def logprob_and_greedy(
    logits: torch.Tensor, targets: torch.Tensor, first_target: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax(logits)[targets] in float32 and argmax == target, a block of rows at a time.

    logits: [m, vocab] (any float dtype); targets: [m]; first_target: the sequence position of targets[0], for the
    error. Returns float32 [m] and bool [m] on the CPU. Raises NonFiniteLogitsError where a log-prob is not finite
    (the caller, ``plans.run_with_fallback``, names the model).
    """
    lps, hits = [], []
    block_bytes = LOGPROB_BLOCK_BYTES if logits.device.type == "cpu" else LOGPROB_BLOCK_BYTES_ACCELERATOR
    rows = max(1, block_bytes // (4 * logits.shape[-1]))
    targets = targets.to(logits.device)
    for a in range(0, logits.shape[0], rows):
        block = logits[a : a + rows].float()
        tgt = targets[a : a + rows]
        # one max gives both the argmax and the shift of a numerically stable log-sum-exp
        top, argmax = block.max(dim=-1)
        lse = top + (block - top[:, None]).exp_().sum(dim=-1).log()
        lps.append(block.gather(1, tgt[:, None]).squeeze(1) - lse)
        hits.append(argmax == tgt)
        del block
    if not lps:
        return torch.empty(0), torch.empty(0, dtype=torch.bool)
    # one copy to the host per call (each copy waits for the device)
    lp, hit = torch.cat(lps).cpu(), torch.cat(hits).cpu()
    bad = ~torch.isfinite(lp)
    if bad.any():
        at = int(bad.nonzero()[0, 0])
        where = f" (first at token position {first_target + at})" if first_target is not None else ""
        raise NonFiniteLogitsError(f"at {int(bad.sum())} of {lp.numel()} scored tokens{where}")
    return lp, hit


def head_rows_per_block(batch: int, vocab: int, device: torch.device) -> int:
    """Rows of the head replayed at once for ``batch`` sequences: about one head block of float32 logits."""
    block_bytes = HEAD_BLOCK_BYTES if device.type == "cpu" else HEAD_BLOCK_BYTES_ACCELERATOR
    return max(1, block_bytes // (4 * vocab * max(1, batch)))


# ------------------------------------------------------------------ the model's parts


def causal_lm(model):
    """The transformers model under a PEFT wrapper (its adapters are injected in place, so they still run)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and type(model).__module__.startswith("peft"):
        return get_base()
    return model


def decoder_module(model):
    """The submodule whose output's first field is the hidden state the output head reads, or None."""
    candidates = []
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        with contextlib.suppress(Exception):
            candidates.append(get_decoder())
    candidates.append(getattr(model, "base_model", None))
    for module in candidates:
        if isinstance(module, torch.nn.Module) and module is not model:
            return module
    return None


def forward_parameters(model) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def cache_argument(model) -> str | None:
    """The name under which the model's forward takes its KV cache (``cache`` since transformers 5.x deprecated
    ``past_key_values``), or None."""
    params = forward_parameters(model)
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def returned_cache(output):
    """The cache a forward returned, under either name."""
    for name in ("cache", "past_key_values"):
        value = output.get(name) if hasattr(output, "get") else getattr(output, name, None)
        if value is not None:
            return value
    return None


@contextlib.contextmanager
def _captured_output(module):
    """Keep ``module``'s output of the next forward in ``box["output"]``."""
    box: dict = {}
    handle = module.register_forward_hook(lambda _m, _args, output: box.__setitem__("output", output))
    try:
        yield box
    finally:
        handle.remove()


@contextlib.contextmanager
def _forward_returning(module, output):
    """Make ``module`` return ``output`` without computing (its instance ``forward`` swapped for the duration;
    accelerate's own instance ``forward``, when there is one, is restored afterwards)."""
    had = "forward" in module.__dict__
    saved = module.__dict__.get("forward")
    module.forward = lambda *args, **kwargs: output
    try:
        yield
    finally:
        if had:
            module.forward = saved
        else:
            del module.forward


def _hidden_of(output) -> torch.Tensor:
    return output[0]


def _with_hidden(output, hidden: torch.Tensor):
    """``output`` (a ModelOutput or a tuple) with its first field, the last hidden state, replaced."""
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    fields = dict(output)
    fields[next(iter(fields))] = hidden
    return type(output)(**fields)


# ------------------------------------------------------------------ full: one forward, the head in blocks


class FullForward:
    """One forward of ``ids`` [batch, n] with no cache, its decoder's output kept; ``logits(a, b)`` gives the
    model's own logits of rows [a, b) by replaying the output head on them.

    The model runs as a whole, asked for the logits of its last row only, which are checked against the replay.
    A forward that cannot limit its logits (no ``logits_to_keep``, as in older transformers) would build them
    all, so there the decoder runs alone; ``probe_full`` has checked once, on a few tokens, that the decoder and
    the replayed head give the model's own forward."""

    def __init__(self, model, ids: torch.Tensor, support: ModelSupport):
        self.model, self.ids = model, ids
        self.decoder = decoder_module(model)
        if support.stateful_rope:
            reset_rope_state(model, ids)
        n = ids.shape[1]
        if "logits_to_keep" not in forward_parameters(model):
            no_cache = {"use_cache": False} if "use_cache" in forward_parameters(self.decoder) else {}
            with LayerTicks(model, ids) as ticks:
                self.output = self.decoder(input_ids=ids, **no_cache)
            forwarded(model, ids, ticks.done)
            head = model.get_output_embeddings()
            self.vocab = int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)
            self.logits_device = (_module_device(head) if head is not None else None) or input_device(model)
            return
        with _captured_output(self.decoder) as box, LayerTicks(model, ids) as ticks:
            out = model(input_ids=ids, use_cache=False, logits_to_keep=CHECKED_ROWS)
        forwarded(model, ids, ticks.done)
        if "output" not in box:
            raise ScoringError(
                f"{type(model).__name__} did not run its decoder module "
                f"{type(self.decoder).__name__}, so its hidden states cannot be read"
            )
        self.output = box["output"]
        own = out.logits
        del out
        self.vocab, self.logits_device = own.shape[-1], own.device
        if own.shape[1] != min(CHECKED_ROWS, n):
            raise ScoringError(
                f"{type(model).__name__} returned logits for {own.shape[1]} positions when asked for "
                f"{CHECKED_ROWS} (logits_to_keep)"
            )
        check_same_logits(model, self.logits(n - own.shape[1], n), own, "the last row of a full forward")

    def logits(self, a: int, b: int) -> torch.Tensor:
        """[batch, b - a, vocab]: the output head, post-processing included, on rows [a, b)."""
        rows = _with_hidden(self.output, _hidden_of(self.output)[:, a:b])
        with _forward_returning(self.decoder, rows):
            return self.model(input_ids=self.ids[:, a:b], use_cache=False).logits


def check_same_logits(model, replayed: torch.Tensor, own: torch.Tensor, where: str) -> None:
    """The replayed head must give the model's own logits (up to a few float units): else refuse, never guess.
    Non-finite logits of the model's own are its output's fault, not the replay's, and are named as such."""
    if own.numel() and not torch.isfinite(own).all():
        raise non_finite_logits_error(model, f"in {where}")
    if replayed.shape != own.shape:
        diff = float("inf")
    else:
        diff = float((replayed.float() - own.float()).abs().max()) if own.numel() else 0.0
    scale = float(own.float().abs().max()) if own.numel() else 0.0
    if not diff <= 8 * torch.finfo(own.dtype).eps * (1.0 + scale):
        model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise ScoringError(
            f"model type {model_type!r}: the output head replayed on the decoder's hidden states does not give the "
            f"model's own logits ({where}: max difference {diff:.3g}), so the engine cannot score it from one forward "
            'without building a [sequence x vocabulary] tensor. Way out: --metadata \'{"long_pass": "chunked"}\' '
            "for a model whose KV cache is exact (docs/support.md)"
        )


def full_scores(model, ids: torch.Tensor, first: int, stop: int, support: ModelSupport):
    """log p(ids[r, t + 1] | ids[r, :t + 1]) and greedy hits for t in [first, stop), every row r, from one forward.

    ids: [batch, n] on the input device. Returns float32 [batch, stop - first] and bool [batch, stop - first]."""
    batch = ids.shape[0]
    full = FullForward(model, ids, support)
    lps = torch.empty(batch, max(stop - first, 0), dtype=torch.float32)
    hits = torch.zeros(batch, max(stop - first, 0), dtype=torch.bool)
    step = head_rows_per_block(batch, full.vocab, full.logits_device)
    for a in range(first, stop, step):
        b = min(a + step, stop)
        logits = full.logits(a, b)
        targets = ids[:, a + 1 : b + 1]
        for r in range(batch):  # row by row: no [batch, rows, vocab] float32 copy
            lp, hit = logprob_and_greedy(logits[r], targets[r], a + 1)
            lps[r, a - first : b - first] = lp
            hits[r, a - first : b - first] = hit
        del logits
    return lps, hits


def reset_rope_state(model, ids: torch.Tensor) -> None:
    """transformers' dynamic NTK RoPE keeps the frequencies of the longest sequence seen until a forward shorter
    than the original maximum comes; one one-token forward restores the freshly loaded state, so every sequence
    is scored as by the model just loaded, whatever ran before."""
    own_logits(model, ids[:1, :1], 1, use_cache=False)


# ------------------------------------------------------------------ own logits, and the KV cache


def own_logits(model, ids: torch.Tensor, keep: int, **kwargs):
    """(logits of the last ``keep`` positions, output) of one forward, from the model's own head (all of its
    positions' logits where the forward cannot limit them: at most one chunk's)."""
    if "logits_to_keep" in forward_parameters(model):
        kwargs["logits_to_keep"] = keep
    with LayerTicks(model, ids) as ticks:
        out = model(input_ids=ids, **kwargs)
    forwarded(model, ids, ticks.done)
    logits = out.logits
    if logits.shape[1] != keep:  # a model that accepts the argument but ignores it
        logits = logits[:, -keep:]
    return logits, out


def packed_layout(held: int, lengths: list[int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids [1, M] and an additive attention mask [1, 1, M, held + M] (0: attend, the dtype's minimum:
    not) for sequences of ``lengths`` (M in all) fed together onto a cache of ``held`` positions: sequence i's
    token j sits at position held + j and attends to the cache and to tokens 0..j of its own sequence."""
    sizes = torch.tensor(lengths, dtype=torch.long)
    which = torch.repeat_interleave(torch.arange(len(lengths)), sizes)
    starts = torch.cumsum(sizes, 0) - sizes
    local = torch.arange(int(sizes.sum())) - starts[which]
    own = (which[:, None] == which[None, :]) & (local[None, :] <= local[:, None])
    allowed = torch.cat([torch.ones(len(which), held, dtype=torch.bool), own], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return (held + local)[None].to(device), mask[None, None].to(device)


class KVCache:
    """A transformers ``DynamicCache`` fed through the model's own forward, passed under the name the forward
    takes, and trusted only when each forward returns it advanced by exactly the tokens fed (a model that ignores
    its cache argument would score every chunk without its prefix)."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        argument = cache_argument(model)
        if argument is None:
            raise ScoringError(
                f"{type(model).__name__}.forward takes no KV cache (neither `cache` nor "
                "`past_key_values`), so it cannot be fed in chunks"
            )
        self.argument: str = argument
        self.cache = DynamicCache()
        self.length = 0

    def feed(self, ids: torch.Tensor, keep: int, **forward_kwargs) -> torch.Tensor:
        """Feed ``ids`` [batch, m] on top of the cache; returns the logits of the last ``keep`` positions."""
        logits, out = own_logits(self.model, ids, keep, use_cache=True, **{self.argument: self.cache}, **forward_kwargs)
        cache = returned_cache(out)
        del out
        expected = self.length + ids.shape[1]
        if cache is None:
            raise ScoringError(f"{type(self.model).__name__} returned no KV cache, so a prefix cannot be kept")
        if cache.get_seq_length() != expected:
            raise ScoringError(
                f"{type(self.model).__name__} did not extend the KV cache it was given ({cache.get_seq_length()} "
                f"positions after {ids.shape[1]} tokens fed onto {self.length}); it does not read `{self.argument}`, "
                "so chunks would be scored without their prefix"
            )
        self.cache, self.length = cache, expected
        return logits

    def feed_packed(self, segments: list[torch.Tensor]) -> torch.Tensor:
        """Feed several token sequences [m_i] on top of the cache in ONE forward, each attending to the cache and
        causally to itself only, at the positions it would take alone (``packed_layout``); returns the logits of
        every fed position, [sum m_i, vocab]. The cache then holds them all: crop it back before the next read."""
        ids = torch.cat(segments)[None].to(input_device(self.model))
        positions, mask = packed_layout(
            self.length, [int(s.numel()) for s in segments], compute_dtype(self.model), ids.device
        )
        return self.feed(ids, ids.shape[1], position_ids=positions, attention_mask=mask)[0]

    def reset_to(self, length: int) -> None:
        """Back to ``length`` positions after a forward that failed part way (some layers appended, some not)."""
        layers = getattr(self.cache, "layers", None)
        if layers is not None:  # transformers 5.x: each layer cropped by what it holds beyond ``length``
            for layer in layers:
                excess = int(layer.get_seq_length()) - length
                if excess > 0:
                    layer.crop(-excess)
        else:  # transformers 4.x: a positive length is the size every layer is cut to
            self.cache.crop(length)
        if self.cache.get_seq_length() != length:
            raise ScoringError(
                f"the KV cache of {type(self.model).__name__} could not be reset to {length} positions "
                f"({self.cache.get_seq_length()} remain)"
            )
        self.length = length

    def crop(self, length: int) -> None:
        if length < self.length:
            self.cache.crop(-(self.length - length))  # a negative count removes that many (transformers 4.x and 5.x)
        if self.cache.get_seq_length() != length:
            raise ScoringError(
                f"the KV cache of {type(self.model).__name__} could not be cropped back to {length} "
                f"positions ({self.cache.get_seq_length()} remain)"
            )
        self.length = length


# ------------------------------------------------------------------ what a model allows, probed once


class Capabilities:
    """``describe(model)``, whether the full strategy reproduces a plain forward of the model, and the attention
    kernels its forwards run (probed once)."""

    def __init__(self, model):
        self._model = weakref.ref(model)
        self.support = describe(model)
        # a refused model is not run at all
        self.full_problem = self.support.refused or probe_full(model)
        self.attention = (
            probe_attention(model, self.support)
            if not self.support.refused
            else AttentionKernels(attention.NO_ATTENTION, attention.NO_ATTENTION)
        )

    @property
    def full(self) -> bool:
        return self.full_problem is None

    @functools.cached_property
    def packing_problem(self) -> str | None:
        """Why continuations cannot be packed into one forward on a shared cache (``probe_packing``), or None."""
        model = self._model()
        return "the model is no longer loaded" if model is None else probe_packing(model, self.support)


_CAPABILITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def capabilities(model) -> Capabilities:
    caps = _CAPABILITIES.get(model)
    if caps is None:
        caps = _CAPABILITIES[model] = Capabilities(model)
    return caps


@torch.no_grad()
def probe_full(model) -> str | None:
    """Why the full strategy cannot score ``model`` exactly, or None: on a few tokens, the hidden states must be
    readable, logits must be limitable to the last positions, and the replayed head must equal a plain forward."""
    model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    if decoder_module(model) is None:
        return f"model type {model_type!r} has no decoder module whose hidden states the engine can read"
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or PROBE_TOKENS)
    ids = (torch.arange(PROBE_TOKENS) % vocab)[None].to(input_device(model))
    try:
        support = describe(model)
        plain = model(input_ids=ids, use_cache=False).logits
        full = FullForward(model, ids, support)
        check_same_logits(model, full.logits(0, PROBE_TOKENS), plain, f"a {PROBE_TOKENS}-token probe")
    except NonFiniteLogitsError:
        raise  # the model's output, whatever the strategy: not a reason to try another
    except ScoringError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001  (any failure of the model's own code: the strategy is not available)
        return (
            f"model type {model_type!r}: one forward with its output head replayed on the hidden states failed "
            f"({type(err).__name__}: {err})"
        )
    return None


# attention implementations that apply a custom 4-D additive mask as given
MASKED_IMPLEMENTATIONS = ("sdpa", "eager")


def _text_config_of(config):
    return getattr(config, "text_config", None) or config


@torch.no_grad()
def probe_packing(model, support: ModelSupport) -> str | None:
    """Why continuations of one prefix cannot be packed into one forward on its cache (``KVCache.feed_packed``),
    or None: the cache must be exact, the attention implementation one that takes a custom mask, and on a few
    tokens each packed sequence must get the logits it gets fed alone onto the same cache. The tolerance is the
    larger of a few float units and 4x the difference that the mask alone makes (one sequence packed by itself).
    A sliding window is not seen by so short a probe: ``support.attention_window`` bounds the packed reads."""
    if not support.kv_cache_exact:
        return support.no_cache_reason
    config = getattr(model, "config", None)
    implementation = str(getattr(config, "_attn_implementation", "") or "")
    if implementation not in MASKED_IMPLEMENTATIONS:
        return (
            f"model type {support.model_type!r} runs the {implementation!r} attention implementation, which "
            "the engine does not hand a custom mask"
        )
    if not {"attention_mask", "position_ids"} <= forward_parameters(model):
        return f"model type {support.model_type!r}: its forward takes no attention_mask or position_ids"
    vocab = int(getattr(config, "vocab_size", 0) or 64)
    ids = ((torch.arange(6 * PROBE_TOKENS) * 7 + 3) % vocab).to(input_device(model))
    prefix = ids[:PROBE_TOKENS]
    segments = [ids[PROBE_TOKENS : 3 * PROBE_TOKENS], ids[3 * PROBE_TOKENS : 4 * PROBE_TOKENS - 3], ids[-9:]]
    try:
        cache = KVCache(model)
        cache.feed(prefix[None], 1)
        alone = []
        for seg in segments:
            alone.append(cache.feed(seg[None], int(seg.numel()))[0].float())
            cache.crop(PROBE_TOKENS)
        single = cache.feed_packed(segments[:1]).float()
        cache.crop(PROBE_TOKENS)
        packed = cache.feed_packed(segments).float()
    except ScoringError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001  (the model's own code failed on a packed forward: read one by one)
        return (
            f"model type {support.model_type!r}: a forward of several sequences with a custom mask failed "
            f"({type(err).__name__}: {err})"
        )
    reference = torch.cat(alone)
    if not torch.isfinite(reference).all():
        raise non_finite_logits_error(model, f"in a {PROBE_TOKENS}-token probe of a KV cache")
    eps = torch.finfo(compute_dtype(model)).eps
    noise = float((single - alone[0]).abs().max())
    diff = float((packed - reference).abs().max())
    # more rows per forward change the order of the sums: a rounding difference that grows about as the square root
    # of the depth (docs/architecture.md, "Packed continuations"); a wrong mask differs by orders of magnitude more
    layers = max(1, int(getattr(_text_config_of(config), "num_hidden_layers", 1) or 1))
    tolerance = max(4 * noise, 8 * eps * (1.0 + float(reference.abs().max())) * math.sqrt(layers))
    if not diff <= tolerance:
        return (
            f"model type {support.model_type!r}: sequences packed into one forward with a custom mask do not get "
            f"the logits each gets alone (max difference {diff:.3g}, tolerance {tolerance:.3g})"
        )
    return None


@torch.no_grad()
def probe_attention(model, support: ModelSupport) -> AttentionKernels:
    """The attention kernels of a forward with no cache and of a chunk fed onto a KV cache, from the SDPA calls the
    model makes on a few tokens (``attention.py``); where the model's code fails on the probe, the costliest kernel
    is assumed."""
    sizes, elem = config_sizes(model), dtype_bytes(model)
    has_attention = support.state != "recurrent"
    fallback = attention.kernel_without_sdpa(model, elem, sizes["heads"], sizes["head_dim"], has_attention)
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 2 * PROBE_TOKENS)
    ids = (torch.arange(2 * PROBE_TOKENS) % vocab)[None].to(input_device(model))

    def kernel_of(run) -> AttentionKernel:
        try:
            with attention.recording_sdpa_calls() as calls:
                run()
        except Exception:  # noqa: BLE001  (the model's own code failed on the probe: assume the costliest kernel)
            return attention.AttentionKernel(
                "math", heads=sizes["heads"], head_dim=sizes["head_dim"], bytes_per_score=8
            )
        return attention.costliest_kernel(calls.calls, sizes["kv_heads"]) or fallback

    if support.stateful_rope:
        reset_rope_state(model, ids)
    no_cache = kernel_of(lambda: model(input_ids=ids[:, :PROBE_TOKENS], use_cache=False))
    with_cache = no_cache
    if support.kv_cache_exact:
        cache = KVCache(model)

        def fed_on_cache():
            cache.feed(ids[:, :PROBE_TOKENS], 1)
            with attention.recording_sdpa_calls() as calls:
                cache.feed(ids[:, PROBE_TOKENS:], 1)
            return calls

        try:
            calls = fed_on_cache()
            with_cache = attention.costliest_kernel(calls.calls, sizes["kv_heads"]) or fallback
        except Exception:  # noqa: BLE001
            with_cache = attention.AttentionKernel(
                "math", heads=sizes["heads"], head_dim=sizes["head_dim"], bytes_per_score=8
            )
    return AttentionKernels(no_cache, with_cache)
