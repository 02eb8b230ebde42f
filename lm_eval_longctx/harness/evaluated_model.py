"""The model an evaluation scores, and the backends and models the engine cannot serve faithfully, refused before
any work: a backend other than HFLM, an HFLM subclass that overrides HFLM's scoring (``check_backend``), a tokenizer
with more ids than the model's embedding has rows (``check_vocabulary``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..data import documents
from ..engine import scoring, window
from ..settings import BOOLEAN, SettingsError, integer
from .request_type import REQUEST_TYPE

SUPPORTED_MODELS = ("hf", "hf-auto", "huggingface")
# lm-eval's fallback when neither the model_args nor the config give a maximum length (HFLM)
HFLM_DEFAULT_MAX_LENGTH = 2048
TOKENIZER_UNSET_MAX_LENGTH = 1000000000000000019884624838656  # transformers' "no limit" marker


class UnsupportedModelError(NotImplementedError):
    pass


@dataclass(frozen=True)
class EvaluatedModel:
    """The LM that the running ``simple_evaluate`` call evaluates: what a task builds its samples and lengths from,
    exactly as its requests are served (its tokenizer, its max_length)."""

    lm: object
    python_api: bool  # passed as simple_evaluate(model=<LM object>), not built from --model_args

    @property
    def tokenizer(self):
        return getattr(self.lm, "tokenizer", None)

    @property
    def max_length(self) -> int | None:
        value = getattr(self.lm, "max_length", None)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @property
    def position_table(self) -> int | None:
        """Positions of the model's learned position table (GPT-2, OPT, ...), or None: no sequence can pass it."""
        model = getattr(self.lm, "model", None)
        return scoring.learned_position_table(model) if model is not None else None

    def claimed_window(self):
        """The window the model's config claims (``engine/window.py``, the audit's reading), or None: no config, or
        one that states no window."""
        config = getattr(getattr(self.lm, "model", None), "config", None)
        if config is None:
            return None
        try:
            return window.claimed_window(config)
        except window.WindowError:
            return None

    def max_length_words(self) -> str:
        """Where the maximum length comes from and how to raise it, in the words of the API the user called."""
        if self.python_api:
            return (
                f"the max_length of the {type(self.lm).__name__} object passed to simple_evaluate (Python API); "
                f"build it with {type(self.lm).__name__}(..., max_length=N) if the model supports more"
            )
        return "from --model_args max_length or the model's config; raise --model_args max_length=N if it supports more"


def check_model_class(cls, task_name: str, scores_per_token: bool = True, python_api: bool = False) -> None:
    """Refuse a backend class that cannot serve our requests, or (``scores_per_token``) whose scoring the engine
    would bypass; what ``note_evaluated_model`` checks, also asked of ``--model``'s class before it is built."""
    from lm_eval.models.huggingface import HFLM

    if not issubclass(cls, HFLM):
        way_out = (
            "Pass an lm_eval.models.huggingface.HFLM (or a subclass) to simple_evaluate"
            if python_api
            else f"Use --model {' / '.join(SUPPORTED_MODELS)}"
        )
        raise UnsupportedModelError(
            f"{task_name} needs per-token scores ({REQUEST_TYPE} requests), which the {cls.__name__} backend does "
            f"not provide. {way_out} (Hugging Face transformers models; under `accelerate launch` for several GPUs)."
        )
    if scores_per_token:
        check_backend(cls, python_api, task_name)


# ------------------------------------------------------------------ backends and models the engine cannot serve
#
# The engine scores with the transformers model an HFLM holds (``lm.model``), never through HFLM's own scoring
# methods: a subclass that changes scores by overriding one of them would get plain hf's numbers.

SCORING_METHODS = ("_model_call", "_loglikelihood_tokens", "loglikelihood", "loglikelihood_rolling")


class UnfaithfulBackendError(UnsupportedModelError):
    """An HFLM subclass whose scoring the engine would bypass."""


class VocabularyMismatchError(ValueError):
    """A tokenizer with more token ids than the model's input embedding has rows."""


def check_backend(cls, python_api: bool = False, task_name: str = "") -> None:
    """Refuse an HFLM subclass that overrides a scoring method of HFLM (``SCORING_METHODS``): the engine calls none
    of them, so the override would silently change nothing."""
    from lm_eval.models.huggingface import HFLM

    if not (isinstance(cls, type) and issubclass(cls, HFLM)):
        return
    overridden = [name for name in SCORING_METHODS if getattr(cls, name, None) is not getattr(HFLM, name, None)]
    if not overridden:
        return
    owner = next(c for c in cls.__mro__ if overridden[0] in vars(c))
    way_out = "pass a plain HFLM to simple_evaluate" if python_api else "use --model hf"
    raise UnfaithfulBackendError(
        f"{task_name + ': ' if task_name else ''}the {cls.__name__} backend overrides HFLM."
        f"{', HFLM.'.join(overridden)} ({owner.__module__}.{owner.__name__}), which this suite never calls: its "
        f"per-token passes run the transformers model itself, so the scores would be plain hf's, not "
        f"{cls.__name__}'s. Ways out: {way_out}, or make the change in the transformers model (its forward, or "
        "forward hooks) so that every pass sees it."
    )


def check_vocabulary(lm, task_name: str = "") -> None:
    """Refuse a model whose input embedding has fewer rows than its tokenizer has token ids (a token id past the
    last row would stop the run deep inside the model), before any model runs."""
    model = getattr(lm, "model", None)
    tokenizer = getattr(lm, "tokenizer", None)
    get_embeddings = getattr(model, "get_input_embeddings", None)
    if tokenizer is None or not callable(get_embeddings):
        return
    try:
        embedding = get_embeddings()
        n_ids = len(tokenizer)
    except (AttributeError, NotImplementedError, TypeError):
        return
    rows = getattr(embedding, "num_embeddings", None)
    if rows is None and getattr(embedding, "weight", None) is not None:
        rows = int(embedding.weight.shape[0])
    if rows is None or n_ids <= rows:
        return
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    raise VocabularyMismatchError(
        f"{task_name + ': ' if task_name else ''}the tokenizer {name} has {n_ids} token ids, but the model's input "
        f"embedding has {rows} rows: ids {rows}..{n_ids - 1} would index past it. Ways out: the model's own "
        "tokenizer (--model_args tokenizer=PATH), or a model whose embedding matches its tokenizer "
        "(model.resize_token_embeddings(len(tokenizer)), then save it)."
    )


# from_pretrained keywords lm-eval's hf backend passes on to transformers (beside its own arguments)
FROM_PRETRAINED_KEYWORDS = (
    "attn_implementation",
    "device_map",
    "low_cpu_mem_usage",
    "load_in_8bit",
    "load_in_4bit",
    "bnb_4bit_compute_dtype",
    "bnb_4bit_quant_type",
    "bnb_4bit_use_double_quant",
    "use_safetensors",
    "variant",
    "cache_dir",
    "local_files_only",
    "token",
)


def hf_model_args_keys() -> set[str]:
    """The --model_args keys lm-eval's hf backend takes: its own arguments, those of its model builder, and the
    from_pretrained keywords it passes on."""
    import inspect

    from lm_eval.models.huggingface import HFLM

    named = set()
    for fn in (HFLM.__init__, HFLM._create_model):
        named |= {
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
        }
    return named | set(FROM_PRETRAINED_KEYWORDS)


# ------------------------------------------------------------------ the evaluated model's limits


def position_table_words(table: int) -> str:
    return (
        f"the model's learned position table ({table} positions: a position past it has no embedding, whatever "
        "allow_beyond_max_length or --model_args max_length say)"
    )


def model_limit(model: EvaluatedModel | None, allow_beyond: bool) -> tuple[int | None, str]:
    """The evaluated model's maximum length as a limit for ``refuse_too_long`` (None: nothing to check, the model is
    not known or ``allow_beyond_max_length`` is on), and its words. A learned position table is a limit that
    ``allow_beyond_max_length`` does not lift."""
    if model is None:
        return None, ""
    table = model.position_table
    if table is not None and (allow_beyond or model.max_length is None):
        return table, position_table_words(table)
    if allow_beyond or model.max_length is None:
        return None, ""
    return model.max_length, f"the model's maximum length {model.max_length} ({model.max_length_words()})"


def check_position_table(task_name: str, model: EvaluatedModel | None) -> None:
    """A maximum length beyond the model's learned position table is refused when the task is built: the task would
    size its sequences for positions the model has no embedding for."""
    table = model.position_table if model is not None else None
    if table is not None and model is not None and model.max_length is not None and model.max_length > table:
        raise SettingsError(
            f"{task_name}: the maximum length {model.max_length} (from --model_args max_length or the config) is "
            f"beyond {position_table_words(table)}. Way out: --model_args max_length={table} or less, or leave "
            "max_length out"
        )


# ------------------------------------------------------------------ the evaluated model's settings, from the metadata


def add_model_settings(settings: dict, metadata: dict | None) -> dict:
    """The evaluated model's own settings that a task reads from the model_args lm-eval merges into the metadata:
    ``pretrained``, ``revision``, ``trust_remote_code``, ``max_length``."""
    md = dict(metadata or {})
    settings["pretrained"] = md.get("pretrained")
    settings["revision"] = md.get("revision")
    settings["trust_remote_code"] = BOOLEAN.convert(md.get("trust_remote_code", False))
    settings["max_length"] = (
        None if md.get("max_length") in (None, "", "None") else integer(1).convert(md["max_length"])
    )
    return settings


def settings_tokenizer(s: dict, model: EvaluatedModel | None, role: str, missing: str):
    """The tokenizer named by the ``tokenizer`` setting, else the evaluated model's own, else ``pretrained``'s
    (``role`` names it in a loading error; ``missing`` is the error when none is named)."""
    if not s["tokenizer"] and model is not None and model.tokenizer is not None:
        return model.tokenizer
    name = s["tokenizer"] or s["pretrained"]
    if not isinstance(name, str) or not name:
        raise SettingsError(missing)
    return documents.load_tokenizer(name, role, revision=s["revision"], trust_remote_code=s["trust_remote_code"])


def resolve_model_max_length(s: dict, tokenizer, model: EvaluatedModel | None = None) -> int:
    """The evaluated model's ``max_length`` when the model is known; else resolved as lm-eval's HFLM does:
    model_args ``max_length``, else the config's ``n_positions`` / ``max_position_embeddings`` / ``n_ctx`` (of
    its ``text_config`` when it has one), else the tokenizer's ``model_max_length``, else 2048."""
    if model is not None and model.max_length is not None:
        return model.max_length
    if s["max_length"]:
        return int(s["max_length"])
    if isinstance(s["pretrained"], str) and s["pretrained"]:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(
            s["pretrained"], revision=s["revision"], trust_remote_code=s["trust_remote_code"]
        )
        config = getattr(config, "text_config", None) or config
        for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
            if getattr(config, attr, None) is not None:
                return int(getattr(config, attr))
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and int(limit) != TOKENIZER_UNSET_MAX_LENGTH:
        return int(limit)
    return HFLM_DEFAULT_MAX_LENGTH
