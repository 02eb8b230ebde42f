"""The context window a model's config claims (``claimed_window``): how many positions it says the model takes, which
field that number comes from, and what every other window field says.

A config states a window in several places: ``max_position_embeddings`` (``n_positions``, ``max_seq_len``, ... in
other families), RoPE scaling that extends an original window (``rope_scaling`` in transformers 4,
``rope_parameters`` in 5, per layer type where a model has several), and sliding-window layers that attend to
fewer positions than the model takes. A multimodal config holds the language model's in ``text_config``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Fields that give the positions a model takes, by family (GPT-2: n_positions, MPT: max_seq_len, ...), first found wins
POSITION_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
)
ROPE_FIELDS = ("rope_scaling", "rope_parameters")
# RoPE types that keep the trained frequencies: no extension to state
UNSCALED_ROPE_TYPES = (None, "default")
# RoPE types whose frequencies transformers computes from a scaling factor it requires
FACTOR_ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3")


@dataclass(frozen=True)
class ClaimedWindow:
    """The window a config claims: ``tokens``, the ``source`` it was taken from, every window field found
    (``fields``: name -> value, a dotted name for nested ones) and what they say beside it (``notes``)."""

    tokens: int
    source: str
    fields: dict
    notes: tuple[str, ...] = ()

    def record(self) -> dict:
        return {"tokens": self.tokens, "source": self.source, "fields": dict(self.fields), "notes": list(self.notes)}

    def describe(self) -> str:
        notes = "; ".join(self.notes)
        return f"{self.tokens} ({self.source})" + (f"; {notes}" if notes else "")


class WindowError(ValueError):
    """A config that states no window, or a window that is not a positive number of tokens."""


class WindowFieldError(WindowError):
    """A window field of the config that holds a value no model can be built with (named with the field)."""


def _as_dict(config) -> dict:
    if isinstance(config, dict):
        return config
    if hasattr(config, "to_dict"):
        out = config.to_dict()
        # transformers 5 keeps rope_parameters as an attribute that to_dict may not carry in every version
        for name in ROPE_FIELDS:
            if name not in out and getattr(config, name, None) is not None:
                out[name] = getattr(config, name)
        return out
    return dict(vars(config))


def _positive_int(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (_INF, -_INF):
        return None
    return int(value) if value >= 1 and float(value) == int(value) else None


_INF = float("inf")


def _stated_positive_int(cfg: dict, name: str, shown: str) -> int | None:
    """The field ``name`` of ``cfg`` as a positive whole number; None when the config leaves it out (or null);
    any other value is refused, naming the field (``shown``: its dotted name)."""
    value = cfg.get(name)
    if value is None:
        return None
    number = _positive_int(value)
    if number is None:
        raise WindowFieldError(
            f"config field {shown}: {value!r} is not a positive whole number of tokens; the model cannot be built "
            "with it. Fix the checkpoint's config.json"
        )
    return number


def known_rope_types() -> set:
    """The RoPE types transformers can compute, and the unscaled ones."""
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:  # a transformers without the table: every type is taken as stated
        return set()
    return set(ROPE_INIT_FUNCTIONS) | {t for t in UNSCALED_ROPE_TYPES if t}


def check_rope(name: str, params: dict) -> None:
    """Refuse a RoPE setting no model can be built with: an unknown type, a factor that is not a finite positive
    number (or missing where the type needs one), an original window that is not a positive whole number.

    Example:
        >>> from lm_eval_longctx.engine.window import WindowFieldError, check_rope
        >>> check_rope("rope_scaling", {"rope_type": "linear", "factor": 4.0})  # a setting a model is built with
        >>> try:
        ...     check_rope("rope_scaling", {"rope_type": "linear", "factor": float("inf")})
        ... except WindowFieldError as err:
        ...     print(str(err).split(";")[0])
        config field rope_scaling.factor: inf is not a finite positive number
    """
    rope_type = params.get("rope_type", params.get("type"))
    known = known_rope_types()
    if rope_type not in UNSCALED_ROPE_TYPES and known and rope_type not in known:
        raise WindowFieldError(
            f"config field {name}: rope_type {rope_type!r} is not one transformers computes (known: "
            f"{', '.join(sorted(known))}); fix the checkpoint's config.json"
        )
    factor = params.get("factor")
    if factor is None and rope_type in FACTOR_ROPE_TYPES:
        raise WindowFieldError(
            f"config field {name}: {rope_type} RoPE scaling states no factor; transformers needs one to build the "
            "model. Fix the checkpoint's config.json"
        )
    if factor is not None:
        finite = isinstance(factor, (int, float)) and not isinstance(factor, bool) and abs(factor) != _INF
        if not (finite and factor == factor and factor > 0):
            raise WindowFieldError(
                f"config field {name}.factor: {factor!r} is not a finite positive number; fix the checkpoint's "
                "config.json"
            )
    _stated_positive_int(params, "original_max_position_embeddings", f"{name}.original_max_position_embeddings")


def _rope_entries(cfg: dict, prefix: str) -> list[tuple[str, dict]]:
    """(dotted field name, RoPE dict) for each RoPE setting of the config; a dict of dicts is one per layer type."""
    out: list[tuple[str, dict]] = []
    for field in ROPE_FIELDS:
        value = cfg.get(field)
        if not isinstance(value, dict) or not value:
            continue
        if field == "rope_parameters" and value == cfg.get("rope_scaling"):
            continue  # transformers 5 keeps a config's rope_scaling under both names: one setting, stated once
        if all(isinstance(v, dict) for v in value.values()):
            out.extend((f"{prefix}{field}.{layer_type}", params) for layer_type, params in value.items())
        else:
            out.append((f"{prefix}{field}", value))
    return out


def _rope_extension(name: str, params: dict, positions: int | None) -> tuple[int | None, str | None]:
    """The window a RoPE setting extends to (None: it extends nothing) and the note that says so."""
    rope_type = params.get("rope_type", params.get("type"))
    if rope_type in UNSCALED_ROPE_TYPES:
        return None, None
    check_rope(name, params)
    factor = params.get("factor")
    original = _positive_int(params.get("original_max_position_embeddings"))
    base = original or positions
    if factor is not None and base:
        extended = int(round(base * float(factor)))
        source = "original_max_position_embeddings" if original else "its position field"
        return extended, (
            f"{name}: {rope_type} RoPE scaling x{factor:g} of an original window of {base} ({source}) = {extended}"
        )
    if original:
        return None, f"{name}: {rope_type} RoPE scaling of an original window of {original}"
    return None, f"{name}: {rope_type} RoPE scaling (no factor or original window stated)"


def _sliding_note(cfg: dict, prefix: str) -> tuple[dict, str | None]:
    window = _positive_int(cfg.get("sliding_window"))
    if window is None or cfg.get("use_sliding_window") is False:
        return {}, None
    fields = {f"{prefix}sliding_window": window}
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, (list, tuple)) and layer_types:
        sliding = sum("sliding" in str(t) for t in layer_types)
        if sliding == 0:
            return fields, None
        return fields, f"{sliding} of {len(layer_types)} layers attend within a sliding window of {window} tokens"
    return fields, f"its layers attend within a sliding window of {window} tokens"


def claimed_window(config, window: int | None = None) -> ClaimedWindow:
    """The window ``config`` claims (a transformers config or its dict): the largest of its position field and the
    windows its RoPE scaling extends to, with every field and what it says; ``window`` (``--window N``) overrides
    the number and is named as the source.

    Raises:
        WindowFieldError: a window field holds a value no model can be built with (checked with ``window`` too).
        WindowError: ``window`` is not a positive integer, or the config states no window and none is given.
    """
    cfg = _as_dict(config)
    prefix = ""
    text = cfg.get("text_config")
    if text is not None:
        cfg, prefix = _as_dict(text), "text_config."
    fields: dict = {}
    positions, position_field = None, None
    for name in POSITION_FIELDS:
        value = _stated_positive_int(cfg, name, prefix + name)
        if value is not None:
            fields[prefix + name] = value
            if positions is None:
                positions, position_field = value, prefix + name
    notes = []
    tokens, source = positions, position_field
    for name, params in _rope_entries(cfg, prefix):
        extended, note = _rope_extension(name, params, positions)
        if note is None:  # the trained frequencies: nothing to state
            continue
        fields[name] = dict(params)
        if note:
            notes.append(note)
        if extended is not None and (tokens is None or extended > tokens):
            tokens, source = extended, name
    sliding_fields, sliding_note = _sliding_note(cfg, prefix)
    fields.update(sliding_fields)
    if sliding_note:
        notes.append(sliding_note)
    if window is not None:
        given = _positive_int(window)
        if given is None:
            raise WindowError(f"--window must be a positive number of tokens, got {window!r}")
        if tokens is not None and given != tokens:
            notes.insert(0, f"the config claims {tokens} ({source})")
        return ClaimedWindow(given, "--window", fields, tuple(notes))
    if tokens is None:
        raise WindowError(
            f"the model's config states no window (none of {', '.join(POSITION_FIELDS)}, and no RoPE scaling with a "
            "factor); give it with --window N"
        )
    return ClaimedWindow(tokens, source or "", fields, tuple(notes))
