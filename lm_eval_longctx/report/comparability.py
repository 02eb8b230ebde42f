"""Whether two runs' numbers of a task were measured the same way: what the gate, the leaderboard and the report
card compare before they put two numbers side by side.

A task's *signature* is everything recorded that changes what its metrics mean:

* ``configs.<task>.metadata.longctx_settings``, flattened to dotted keys, without what is declared to change no
  number (``export_tokens``, the ``runtime`` group) except the dtype the model was scored in
  (``runtime.scoring.dtype``); a setting whose value is ``"self"`` (the evaluated model is its own key-token
  evaluator) stands for that model, so two models under ``self`` differ;
* the task's generation settings (``configs.<task>.generation_kwargs``: ``--gen_kwargs`` included);
* what the run records for every task: the model's dtype, a chat template, a system instruction (``run.*``; the
  prompt's only where the task applied them: a task that scores raw documents records that it did not);
* the task version and the number of documents scored (``--limit``).

Paths identified by equal content hashes recorded beside them are not differences (:data:`CONTENT_IDENTIFIED`).
"""

from __future__ import annotations

from .results import flatten, longctx_settings, n_samples_effective

VERSION_KEY, DOCS_KEY = "<task version>", "<n-samples effective>"

# Settings that name where something was read from, and the recorded content hashes that identify what was read.
# When one of those hashes is recorded (on both sides) and equal, the path itself changes no number and is not
# compared: the same texts under another path, the same key spans in another folder (its manifest records the
# evaluator, K, d, alpha, beta and the texts' hash), the same token stream from another copy of the tokenizer.
_DATA_HASHES = ("data.texts_sha256", "data.stream_sha256", "data.prompts_sha256")
CONTENT_IDENTIFIED = {
    "data_files": _DATA_HASHES,
    "data.data_files": _DATA_HASHES,
    "testcases": ("data.prompts_sha256",),
    "source.testcases": ("data.prompts_sha256",),
    "key_spans_dir": ("key_spans_manifest",),
    "tokenizer": ("data.stream_sha256",),
    "tokenizer.name_or_path": ("tokenizer.vocab_sha256",),
}
# A span folder whose files were not verified against its manifest's checksums is identified by its path only.
UNVERIFIED = {"key_spans_dir": "key_spans_verified"}
# Settings recorded for the record that change no number: where a per-token export went, and the `runtime` group
# of every task's record (speed, memory, devices, cache folders: declared as not affecting numbers) but for the
# dtype the evaluated model was scored in (the evaluator's is the setting evaluator_dtype).
NOT_NUMERIC_SETTINGS = ("export_tokens", "runtime")
SCORING_DTYPE = "runtime.scoring.dtype"
SELF = "self"
RUN_PREFIX, GENERATION_PREFIX = "run.", "generation_kwargs."
# what lm-eval records once per run that changes every task's prompts
RUN_FIELDS = ("chat_template_sha", "system_instruction_sha", "fewshot_as_multiturn")
# longctx_settings.runtime.prompt_format.applied: False where the run's chat options were left out of raw documents
PROMPT_NOT_APPLIED = "runtime.prompt_format.applied"


def _not_numeric(key: str) -> bool:
    for prefix in NOT_NUMERIC_SETTINGS:
        if key == prefix or key.startswith(prefix + "."):
            return key != SCORING_DTYPE
    return False


def is_model_level(key: str) -> bool:
    """A difference that describes the models rather than one task (tokenizer, dtype, the run's prompt format):
    it makes every task of the two runs incomparable."""
    return key.startswith(RUN_PREFIX) or key == "tokenizer" or key.startswith("tokenizer.") or key == SCORING_DTYPE


def model_dtype(data: dict) -> str | None:
    """The dtype the model was loaded in: lm-eval's ``config.model_dtype``, else ``dtype=`` of the model_args."""
    config = data.get("config")
    if not isinstance(config, dict):
        return None
    recorded = config.get("model_dtype")
    if isinstance(recorded, str) and recorded:
        return recorded.removeprefix("torch.")
    args = config.get("model_args")
    value = None
    if isinstance(args, dict):
        value = args.get("dtype") or args.get("torch_dtype")
    elif isinstance(args, str):
        for part in args.split(","):
            k, _, v = part.partition("=")
            if k.strip() in ("dtype", "torch_dtype") and v.strip():
                value = v.strip()
    if isinstance(value, str) and value and value != "auto":
        return value.removeprefix("torch.")
    return None


def signature(data: dict, task: str, source="", model: str = "") -> dict:
    """The flat signature of ``task`` in a results dict (see the module docstring); a malformed field is
    :class:`~.results.UnusableInput` naming it and ``source``."""
    sig = {}
    flat = flatten(longctx_settings(data, task, source))
    for key, value in flat.items():
        if not _not_numeric(key):
            sig[key] = f"{SELF} ({model})" if value == SELF and model else value
    cfg = (data.get("configs") or {}).get(task)
    generation = cfg.get("generation_kwargs") if isinstance(cfg, dict) else None
    if isinstance(generation, dict):
        sig.update(flatten(generation, GENERATION_PREFIX))
    dtype = model_dtype(data)
    if dtype is not None:
        sig[RUN_PREFIX + "model_dtype"] = dtype
    # a task that scores raw documents records that the run's chat options did not reach them: not its difference
    prompt_left_out = flat.get(PROMPT_NOT_APPLIED) is False
    for key in RUN_FIELDS:
        if data.get(key) not in (None, False, "") and not prompt_left_out:
            sig[RUN_PREFIX + key] = data[key]
    sig[VERSION_KEY] = (data.get("versions") or {}).get(task)
    sig[DOCS_KEY] = n_samples_effective(data, task, source)
    return sig


def _recorded(flat: dict, prefix: str) -> dict:
    return {
        k: v for k, v in flat.items() if (k == prefix or k.startswith(prefix + ".")) and v not in (None, "", {}, [])
    }


def identified_by_content(key: str, a: dict, b: dict | None = None) -> bool:
    """Whether the path-like setting ``key`` is identified by a content hash recorded in flat settings ``a`` (and,
    given ``b``, recorded equal in both)."""
    flag = UNVERIFIED.get(key)
    if flag and (a.get(flag) is False or (b is not None and b.get(flag) is False)):
        return False
    found = False
    for ident in CONTENT_IDENTIFIED.get(key, ()):
        ra = _recorded(a, ident)
        rb = ra if b is None else _recorded(b, ident)
        if ra or rb:
            if ra != rb:
                return False
            found = True
    return found


def differences(a: dict, b: dict, ignore=()) -> list[str]:
    """The keys in which signatures ``a`` and ``b`` differ (``ignore``: dotted keys or their prefixes to skip). What
    a run records about itself (``run.*``, from optional fields of lm-eval's output) is compared where both record
    it."""

    def ignored(key):
        if key.startswith(RUN_PREFIX) and (key not in a or key not in b):
            return True
        return any(key == i or key.startswith(i + ".") for i in ignore)

    return [
        k
        for k in sorted(set(a) | set(b), key=lambda k: (k in (VERSION_KEY, DOCS_KEY), k))
        if not ignored(k) and a.get(k, KeyError) != b.get(k, KeyError) and not identified_by_content(k, a, b)
    ]


def matching_keys(pattern: str, signatures) -> bool:
    """Whether ``pattern`` (an ``ignore_settings`` entry) names a key, or a prefix of keys, of some signature."""
    return any(k == pattern or k.startswith(pattern + ".") for sig in signatures for k in sig)
