"""Key tokens judged by an evaluator model: how it scores a text, what it judges key, and which evaluator it is
(its exact identity, loading and placement). No lm-eval import.

The evaluator scores the text (tokenized with its default special tokens, as the reference does) under the long
context and the reference truncated windows (``evaluator_request``, run by ``text_scoring``); key tokens become
character spans (``spans_to_tokens``). The spans are cached on disk by ``cache.py``, keyed by everything they
depend on, so evaluating a second model reuses them and costs only that model's one long pass.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import errors
from ..data import checkpoints
from ..engine import scoring
from ..metrics import per_token
from . import spans_to_tokens, text_scoring

log = logging.getLogger("lm_eval_longctx")

# The paper's recommended evaluator (gated on the hub).
DEFAULT_EVALUATOR = "meta-llama/Llama-3.1-8B"
# Bump when the way spans are computed changes, so old cache entries are not reused.
SPAN_ALGORITHM_VERSION = 1


@dataclass
class EvaluatorJudgement:
    """What the evaluator says about one text."""

    spans: list[tuple[int, int]]
    offsets: np.ndarray | None = None  # evaluator token offsets [n, 2]
    lsd: np.ndarray | None = None  # long-short difference per target [n - 1], NaN before K
    # The evaluator's own per-target log-probs [n - 1] (long: LCL; short: NaN before K) and token ids [n],
    # kept for the per-token export; None for spans read from files or from older cache entries.
    long_logprob: np.ndarray | None = None
    short_logprob: np.ndarray | None = None
    token_ids: np.ndarray | None = None

    def soft_weights_for(self, eval_offsets: np.ndarray, gamma: float) -> np.ndarray:
        """LongPPL-soft weight of each evaluated-model target (token i -> index i - 1).

        An evaluated token takes the weight min(exp(LSD), gamma) of the evaluator token that holds
        its last character; tokens before the evaluator's first truncated window weigh 1.
        """
        if self.offsets is None or self.lsd is None:
            raise ValueError(
                "LongPPL-soft needs the evaluator's per-token LSD; key spans read from "
                "files do not carry it (use an evaluator model or 'self')"
            )
        w_eval = per_token.soft_weights_from_lsd(self.lsd, gamma)
        j = spans_to_tokens.token_holding_last_character(self.offsets, np.asarray(eval_offsets)[1:])
        # target j - 1 is the prediction of evaluator token j; token 0 (BOS) has none
        return np.where(j >= 1, w_eval[np.clip(j - 1, 0, None)], 1.0)


def judge_from_scores(scores: scoring.SequenceScores, alpha: float, beta: float) -> EvaluatorJudgement:
    """Key spans from an evaluator's long and truncated passes over one text."""
    if scores.short is None or scores.offsets is None:
        raise ValueError("the evaluator pass needs truncated scores and token offsets")
    mask = per_token.key_token_mask(scores.long.logprob, scores.short.logprob, alpha, beta)
    spans = spans_to_tokens.key_spans_from_tokens(mask, scores.offsets)
    lsd = per_token.long_short_difference(scores.long.logprob, scores.short.logprob).astype(np.float32)
    return EvaluatorJudgement(
        spans,
        np.asarray(scores.offsets),
        lsd,
        np.asarray(scores.long.logprob),
        np.asarray(scores.short.logprob),
        np.asarray(scores.token_ids),
    )


def evaluator_request(
    trunc_len: int,
    stride: int,
    chunk_size: int = scoring.DEFAULT_CHUNK_SIZE,
    window_batch_size: int = 4,
    long_pass: str = "auto",
) -> text_scoring.TextRequest:
    """How the evaluator scores a text: with its special tokens (as the reference tokenizes it), offsets, the long
    pass and the truncated windows (K = trunc_len, d = stride); its length is checked by the caller's limit."""
    return text_scoring.TextRequest(
        add_special_tokens=True,
        offsets=True,
        long_pass=long_pass,
        chunk_size=chunk_size,
        trunc_len=trunc_len,
        stride=stride,
        window_batch_size=window_batch_size,
    )


# ---------------------------------------------------------------- evaluator identity and loading
#
# The evaluator's identity is exact: a hub model is its resolved commit (online from the hub, offline
# from the local hub cache's refs), a local folder the SHA-256 of its files' contents. It is the
# span cache's key and the results' record, on cache hits and misses alike, and the model is loaded
# at exactly that commit.

_COMMIT = re.compile(r"[0-9a-f]{40}")
EVALUATOR_WAYS_OUT = (
    "Ways out: log in with an access token that may read it (`hf auth login`; the default evaluator "
    "meta-llama/Llama-3.1-8B is gated: accept its license on the hub first); name a local folder "
    '(--metadata \'{"evaluator": "/path/to/model"}\'); use precomputed spans (--metadata '
    '\'{"key_spans_dir": "DIR"}\', made by lm-eval-longctx precompute-spans); let the evaluated model judge '
    'itself (--metadata \'{"evaluator": "self"}\'); or run the offline demo (lm-eval-longctx demo).'
)


def _unavailable(name: str, why: str, default: bool) -> errors.ResourceUnavailableError:
    which = f"the key-token evaluator {name!r}" + (" (the default evaluator)" if default else "")
    return errors.ResourceUnavailableError(f"{which} cannot be loaded: {why}. {EVALUATOR_WAYS_OUT}")


def resolve_hub_commit(repo_id: str, revision: str | None) -> str:
    """The commit a hub revision names now: from the hub when online, else from the local hub cache."""
    from huggingface_hub import constants, try_to_load_from_cache

    if revision and _COMMIT.fullmatch(revision):
        return revision
    online_error = None
    if not constants.is_offline_mode():
        try:
            from huggingface_hub import HfApi

            return str(HfApi().model_info(repo_id, revision=revision).sha)
        except Exception as err:  # noqa: BLE001  (gated, missing, no network: the local cache may still know)
            online_error = err
    cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    if isinstance(cached, str):
        return Path(cached).parent.name  # .../snapshots/<commit>/config.json
    why = (
        errors.first_line(online_error)
        if online_error is not None
        else "offline (HF_HUB_OFFLINE) and not in the local hub cache"
    )
    raise _unavailable(repo_id, why, repo_id == DEFAULT_EVALUATOR)


def evaluator_identity(name: str, revision: str | None = None, memo_dir: str | Path | None = None) -> dict:
    """``{"name", "source": "local", "path", "files_sha256"}`` or ``{"name", "source": "hub", "revision",
    "commit"}``: what the evaluator is, exactly."""
    path = Path(str(name)).expanduser()
    if path.is_dir():
        return {
            "name": str(name),
            "source": "local",
            "path": str(path.resolve()),
            "files_sha256": checkpoints.folder_fingerprint(path, memo_dir),
        }
    return {"name": str(name), "source": "hub", "revision": revision, "commit": resolve_hub_commit(str(name), revision)}


def _load_target(identity: dict) -> tuple[str, str | None]:
    if identity["source"] == "local":
        return identity["path"], None
    return identity["name"], identity["commit"]


def evaluator_max_length(identity: dict) -> int | None:
    """The evaluator's maximum length from its config (max_position_embeddings and the like), or None."""
    from transformers import PretrainedConfig

    target, revision = _load_target(identity)
    try:
        cfg, _ = PretrainedConfig.get_config_dict(target, revision=revision)
    except Exception as err:  # noqa: BLE001  (any failure to fetch is the same message)
        raise _unavailable(identity["name"], errors.first_line(err), identity["name"] == DEFAULT_EVALUATOR) from None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = cfg.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def parse_max_memory(value) -> dict | None:
    """An accelerate ``max_memory`` map from a dict or its JSON text: {"0": "70GiB", "cpu": "200GiB"}.

    Keys: a GPU index (0, "0" or "cuda:0") or "cpu" (CPU offload, used only when named here).
    Values: bytes (int) or a size string accelerate reads ("70GiB", "500MB"). None stays None."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(
                f'evaluator_max_memory must be a JSON object such as \'{{"0": "70GiB", '
                f'"1": "70GiB"}}\', got {value!r} ({e})'
            ) from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"evaluator_max_memory must be a non-empty map of device -> size, got {value!r}")
    from accelerate.utils import convert_file_size_to_int

    out: dict = {}
    for key, size in value.items():
        k = str(key).strip().lower()
        if k.startswith("cuda:"):
            k = k[len("cuda:") :]
        device: int | str
        if k.isdigit():
            device = int(k)
        elif k == "cpu":
            device = "cpu"
        else:
            raise ValueError(
                f'evaluator_max_memory: unknown device {key!r} (use GPU indices such as "0" '
                'and, for CPU offload, "cpu")'
            )
        try:
            nbytes = int(size) if isinstance(size, int) else convert_file_size_to_int(str(size))
        except (ValueError, TypeError):
            raise ValueError(
                f'evaluator_max_memory[{key!r}]: {size!r} is not a size (bytes, or e.g. "70GiB")'
            ) from None
        if isinstance(size, bool) or nbytes <= 0:
            raise ValueError(f"evaluator_max_memory[{key!r}]: {size!r} is not a positive size")
        out[device] = nbytes
    return out


def auto_device_budget(max_memory: dict | None) -> dict:
    """The ``max_memory`` that device_map="auto" may fill.

    Given (parsed by :func:`parse_max_memory`): that map, once its GPU indices are checked against the
    visible GPUs. Not given: the visible GPUs only (no CPU offload unless asked), this rank's share of
    them when several processes run on one machine (GPU i goes to local rank i % local world size, as
    lm-eval's parallelize does); on a machine without GPUs, the CPU (which is then the device, not an
    offload)."""
    import torch
    from accelerate.utils import get_max_memory

    if max_memory is not None:
        missing = sorted(k for k in max_memory if isinstance(k, int) and k >= torch.cuda.device_count())
        if missing:
            raise ValueError(
                f"evaluator_max_memory names GPU(s) {missing}, but {torch.cuda.device_count()} GPU(s) are visible"
            )
        return max_memory
    available = get_max_memory()
    gpus: dict[int | str, int] = {k: v for k, v in available.items() if isinstance(k, int)}
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if local_world > 1:
        gpus = {k: v for k, v in gpus.items() if k % local_world == local_rank % local_world}
    return gpus or {"cpu": available["cpu"]}


def check_placement(name: str, model, budget: dict) -> None:
    """A model that did not fit is an error, never a silent offload to disk (or to the CPU when the
    budget does not name it)."""
    placed = set(getattr(model, "hf_device_map", {}).values())
    if "disk" in placed or ("cpu" in placed and "cpu" not in budget):
        raise ValueError(
            f"the evaluator {name} does not fit in {budget} (layers were sent to {sorted(map(str, placed))}); "
            'use more GPUs, larger evaluator_max_memory entries, or name "cpu" in evaluator_max_memory '
            "to offload layers to CPU memory"
        )


def load_evaluator(
    identity: dict, *, dtype: str, device: str, max_memory: dict | None = None, trust_remote_code: bool = False
):
    """The evaluator (model, tokenizer) at exactly ``identity``. ``device="auto"`` shards it with
    transformers' device_map="auto" over the visible GPUs (``max_memory`` as accelerate takes it; a
    ``cpu`` entry allows CPU offload); other devices hold the whole model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target, revision = _load_target(identity)
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code}
    # GPUs only unless "cpu" is named; this rank's share of them under several processes
    budget = auto_device_budget(parse_max_memory(max_memory)) if device == "auto" else None
    try:
        tok = AutoTokenizer.from_pretrained(target, **kwargs)
        if device == "auto":
            model = AutoModelForCausalLM.from_pretrained(
                target, dtype=getattr(torch, dtype), device_map="auto", max_memory=budget, **kwargs
            )
        else:
            # the ignore: transformers' PreTrainedModel.to is a functools.wraps of nn.Module.to, which mypy cannot bind
            model = AutoModelForCausalLM.from_pretrained(target, dtype=getattr(torch, dtype), **kwargs).to(device)  # type: ignore[arg-type]
    except (OSError, ValueError, ImportError) as err:
        raise _unavailable(identity["name"], errors.first_line(err), identity["name"] == DEFAULT_EVALUATOR) from None
    if budget is not None:
        check_placement(identity["name"], model, budget)
    return model.eval(), tok
