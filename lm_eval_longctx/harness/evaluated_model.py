"""The model an evaluation scores, and the backends and models the engine cannot serve faithfully, refused before
any work: a backend other than HFLM, an HFLM subclass that overrides HFLM's scoring (``check_backend``), a tokenizer
with more ids than the model's embedding has rows (``check_vocabulary``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import scoring, window
from .request_type import REQUEST_TYPE

SUPPORTED_MODELS = ("hf", "hf-auto", "huggingface")


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
