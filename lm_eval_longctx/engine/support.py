"""Which model families the engine scores, and how: the one declaration that the engine, its tests
(``tests/integration/test_support_matrix.py``) and the support table of ``docs/support.md`` read.

Every family is scored exactly by the ``full`` strategy: one forward of each sequence, the decoder's output
turned into log-probs by the model's own output head in row blocks (``engine/forward.py``). That is the
brute-force definition itself, so a model outside this table is scored exactly too, only never from a cache.

A KV cache computes the same numbers only for attention-only decoders whose positions do not depend on the
length seen: there the long pass may run in chunks (``chunked``) and continuations share their prefix's cache.
Length-dependent RoPE (``dynamic`` NTK, ``longrope``) rotates every key by frequencies chosen from the whole
sequence's length, and recurrent or hybrid models keep a state that transformers cannot carry exactly across
a multi-token chunk or crop back; for them each sequence (each continuation with its prefix) is one forward.
"""

from __future__ import annotations

from dataclasses import dataclass

# rope types whose frequencies are fixed by the config; any other (dynamic, longrope, or a type this table does
# not know) is treated as length-dependent, which only costs the cache
STATIC_ROPE_TYPES = frozenset({"default", "linear", "yarn", "llama3", "proportional"})

ATTENTION, RECURRENT, HYBRID = "attention", "recurrent", "hybrid"


@dataclass(frozen=True)
class Family:
    """Model types that the engine scores alike, with why."""

    label: str
    model_types: tuple[str, ...]
    state: str  # ATTENTION (a KV cache per layer), RECURRENT or HYBRID (a recurrent state in some layers)
    why: str

    @property
    def kv_cache_exact(self) -> bool:
        return self.state == ATTENTION


FAMILIES: tuple[Family, ...] = (
    Family(
        "Llama-style decoders with RoPE (sliding windows, soft-capping and logit scales included)",
        (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "qwen2_moe",
            "qwen3_moe",
            "mixtral",
            "phi3",
            "phimoe",
            "gemma",
            "gemma2",
            "gemma3_text",
            "cohere",
            "cohere2",
            "granite",
            "olmo",
            "olmo2",
            "starcoder2",
            "stablelm",
            "smollm3",
            "exaone4",
            "deepseek_v3",
        ),
        ATTENTION,
        "attention caches only; with a static RoPE type a cached forward equals a full one",
    ),
    Family(
        "Decoders with learned, rotary or ALiBi positions",
        ("gpt2", "gpt_bigcode", "gptj", "gpt_neox", "falcon", "bloom", "mpt", "opt"),
        ATTENTION,
        "attention caches only; positions do not depend on the length seen",
    ),
    Family(
        "State-space and recurrent models",
        ("mamba", "falcon_mamba", "mamba2", "rwkv", "xlstm"),
        RECURRENT,
        "a recurrent state: transformers starts a multi-token chunk from a zero state (Mamba) or takes the "
        "state under another name (RWKV), and a state cannot be cropped back to a prefix",
    ),
    Family(
        "Hybrids of attention and state-space or convolution layers",
        (
            "jamba",
            "zamba2",
            "falcon_h1",
            "bamba",
            "granitemoehybrid",
            "nemotron_h",
            "lfm2",
            "qwen3_next",
            "recurrent_gemma",
        ),
        HYBRID,
        "their recurrent layers keep a state that cannot be carried exactly across chunks or cropped",
    ),
)

_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}

# Families whose own forward, in transformers releases before the given one, cannot serve a scorer: refused there.
VERSION_LIMITS: dict[str, tuple[str, str]] = {
    "recurrent_gemma": (
        "5.0",
        "transformers 4.x keeps RecurrentGemma's recurrent state inside the model across "
        "forwards, sized by the first batch, so a forward depends on what ran before it",
    ),
    "xlstm": (
        "5.0",
        "transformers 4.x's xLSTM forward fails on sequences whose length is not a multiple of its chunk size",
    ),
}


def _version_tuple(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def version_refusal(model_type: str, transformers_version: str | None = None) -> str:
    """Why ``model_type`` is refused with this transformers, or ""."""
    if model_type not in VERSION_LIMITS:
        return ""
    if transformers_version is None:
        import transformers

        transformers_version = transformers.__version__
    minimum, why = VERSION_LIMITS[model_type]
    if _version_tuple(transformers_version) >= _version_tuple(minimum):
        return ""
    return (
        f"model type {model_type!r} is refused with transformers {transformers_version}: {why}. Way out: "
        f"transformers >= {minimum}"
    )


def family_of(model_type: str) -> Family | None:
    return _BY_TYPE.get(model_type)


def _text_config(config):
    text = getattr(config, "get_text_config", None)
    return text() if callable(text) else getattr(config, "text_config", None) or config


def _rope_types_in(params) -> set[str]:
    """rope types named by a ``rope_parameters`` / ``rope_scaling`` value: one dict, or one per layer type."""
    if not isinstance(params, dict):
        return set()
    if "rope_type" in params or "type" in params:
        return {str(params.get("rope_type", params.get("type")))}
    return {t for v in params.values() for t in _rope_types_in(v)}


def rope_types(model) -> set[str]:
    """The RoPE types a model runs: from its rotary modules (what executes), else from its config."""
    found: set[str] = set()
    for module in model.modules():
        value = getattr(module, "rope_type", None)
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            found.update(str(v) for v in value.values() if isinstance(v, str))
    if not found:
        config = _text_config(getattr(model, "config", None))
        for attr in ("rope_parameters", "rope_scaling"):
            found |= _rope_types_in(getattr(config, attr, None))
    return found


WINDOW_ATTRIBUTES = ("sliding_window", "attention_chunk_size", "window_size", "local_window_size")


def attention_window(model) -> int | None:
    """The fewest past positions some layer of ``model`` may attend to (a sliding window or an attention chunk, by
    its config), or None when every layer sees the whole past. A mask the engine builds itself (packed
    continuations) is exact only for sequences that end within it."""
    config = _text_config(getattr(model, "config", None))
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, (list, tuple)) and layer_types and all(t == "full_attention" for t in layer_types):
        return None
    windows = [getattr(config, name, None) for name in WINDOW_ATTRIBUTES]
    sizes = [int(w) for w in windows if isinstance(w, int) and not isinstance(w, bool) and w > 0]
    return min(sizes) if sizes else None


# Names of learned absolute position tables in transformers' decoders (GPT-2 and BigCode ``wpe``, OPT and BioGPT
# ``embed_positions``, ...); rotary, ALiBi and sinusoidal positions have no such table.
POSITION_TABLE_NAMES = ("wpe", "embed_positions", "position_embeddings")


def learned_position_table(model) -> int | None:
    """Positions of ``model``'s learned absolute position-embedding table, or None when it has none: a position past
    the table has no embedding (the model's own code fails on it), whatever a maximum length says. OPT-style tables
    hold ``offset`` extra rows before position 0."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in POSITION_TABLE_NAMES:
            return int(module.num_embeddings) - int(getattr(module, "offset", 0) or 0)
    return None


@dataclass(frozen=True)
class ModelSupport:
    """What the engine may do with one model (``support_for``): the facts the strategy choice rests on."""

    model_type: str
    family: str  # the family's label, or "not in the support table"
    state: str  # ATTENTION, RECURRENT, HYBRID, or "unknown"
    rope_types: tuple[str, ...]
    kv_cache_exact: bool  # a cached forward equals a full one: chunks and shared prefixes are allowed
    no_cache_reason: str  # why not, when not
    stateful_rope: bool  # transformers keeps the last long sequence's frequencies (dynamic NTK): reset before a pass
    refused: str = ""  # why no strategy may score it with this transformers (VERSION_LIMITS), or ""

    def summary(self) -> dict:
        return {
            "model_type": self.model_type,
            "family": self.family,
            "state": self.state,
            "rope_types": list(self.rope_types),
            "kv_cache_exact": self.kv_cache_exact,
        }


def describe(model) -> ModelSupport:
    """Classify ``model`` by the declaration above and its RoPE types (no forward runs)."""
    config = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", None) or type(model).__name__)
    text_type = str(getattr(_text_config(config), "model_type", None) or model_type)
    family = family_of(model_type) or family_of(text_type)
    ropes = tuple(sorted(rope_types(model)))
    length_dependent = sorted(set(ropes) - STATIC_ROPE_TYPES)
    if family is None:
        exact, why = (
            False,
            (
                f"model type {model_type!r} is not among the families whose KV-cache forward is proven "
                "equal to a full forward (docs/support.md)"
            ),
        )
    elif not family.kv_cache_exact:
        exact, why = False, f"model type {model_type!r} ({family.label.lower()}): {family.why}"
    elif length_dependent:
        exact, why = (
            False,
            (
                f"model type {model_type!r} uses length-dependent RoPE ({', '.join(length_dependent)}): "
                "its frequencies are chosen from the length of each forward, so keys cached by a "
                "shorter forward are rotated differently from one forward of the whole sequence"
            ),
        )
    else:
        exact, why = True, ""
    return ModelSupport(
        model_type,
        family.label if family else "not in the support table",
        family.state if family else "unknown",
        ropes,
        exact,
        why,
        any("dynamic" in r for r in ropes),
        version_refusal(model_type),
    )


# ------------------------------------------------------------------ the docs' support table
# Markdown between "<!-- support-table -->" and "<!-- /support-table -->" in docs/support.md is generated here
# (``python scripts/settings_tables.py`` writes it; a test fails when it differs).

TABLE_START, TABLE_END = "<!-- support-table -->", "<!-- /support-table -->"


def support_table_markdown() -> str:
    rows = ["| family | model types | long pass | continuations and the prefix ladder | why |", "|---|---|---|---|---|"]
    for f in FAMILIES:
        types = ", ".join(f"`{t}`" for t in f.model_types)
        if f.kv_cache_exact:
            long_pass, conts = "`full`; `chunked` allowed", "the prefix's KV cache, shared"
        else:
            long_pass, conts = "`full` only (`chunked` refused)", "one forward per continuation with its prefix"
        rows.append(f"| {f.label} | {types} | {long_pass} | {conts} | {f.why} |")
    rows.append(
        "| any family above with a length-dependent RoPE type (`dynamic`, `longrope`, or a type not in "
        f"{', '.join(f'`{t}`' for t in sorted(STATIC_ROPE_TYPES))}) | e.g. Phi-3-mini-128k, Phi-3.5-MoE, "
        "Llama with `rope_scaling` `dynamic` | `full` only (`chunked` refused) | one forward per continuation "
        "with its prefix | frequencies chosen from each forward's length |"
    )
    rows.append(
        "| any other model type | | `full` only | one forward per continuation with its prefix | not proven "
        "cache-exact, so no cache is used |"
    )
    for model_type, (minimum, why) in VERSION_LIMITS.items():
        rows.append(f"| `{model_type}` with transformers < {minimum} | `{model_type}` | refused | refused | {why} |")
    rows.append(
        "| a model whose output head, replayed on its decoder's hidden states, does not give its own logits "
        "(checked on a probe when first seen), and whose KV cache is not proven exact | | refused before any "
        "work | refused | no exact way to score it without a [sequence x vocabulary] tensor |"
    )
    return "\n".join(rows)


def render_support_table(markdown: str) -> str:
    import re

    block = f"{TABLE_START}\n{support_table_markdown()}\n{TABLE_END}"
    return re.sub(re.escape(TABLE_START) + r"\n.*?" + re.escape(TABLE_END), lambda _: block, markdown, flags=re.S)
