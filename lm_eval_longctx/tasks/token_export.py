"""Per-token export: what a task saw, token by token, one ``.npz`` file per document (opt-in). This module builds
each task's arrays; the files themselves (manifest, writing, reading) are ``data/export_files.py``.

``--metadata '{"export_tokens": "DIR"}'`` makes ``longppl_govreport``, ``retrieval_gain`` and
``longeval_lines_ppl`` write ``DIR/<task>/doc_<doc_id>.npz`` as each document's results are processed,
beside ``DIR/<task>/manifest.json`` (format tag, task, the task's settings record with the data's
hashes, and a description of every array). Nothing is accumulated across documents: memory is one
document's arrays, which the task already holds. The files are plain numpy archives (no pickles):
``numpy.load(path)`` reads them without this package (see docs/tools/token-export-and-viewer.md).

The export never changes a number: the task records only its folder (``export_tokens`` in the
settings record). It never writes into a folder it did not create: a task folder that exists and is
not empty is refused (under data parallelism the ranks of one launch share the folder they created).

longppl_govreport arrays (two tokenizations of one text):

* per EVALUATED-MODEL token i (length n; the text tokenized without special tokens, as scored):
  ``token_id``, ``char_start``, ``char_end``, ``logprob`` (log p(token i | tokens < i) by the evaluated
  model, long context; NaN for token 0, which has no prediction), ``nll`` (= -logprob), ``greedy``
  (argmax of the evaluated model's prediction == token i), ``key`` (counted in LongPPL), ``lsd`` and
  ``lcl`` (the evaluator's LSD and long-context log-prob of the evaluator token that holds token i's
  last character, the mapping LongPPL-soft uses; NaN where that evaluator token has no truncated
  context), and with ``soft_gamma`` ``soft_weight``;
* per EVALUATOR token j (length m; the evaluator's tokenization, with its special tokens):
  ``evaluator_char_start``, ``evaluator_char_end``, ``evaluator_lsd``, ``evaluator_key`` (LSD > alpha and
  LCL > beta), and where the judgement carries them (evaluator models, ``self``; not key-span files
  or span-cache entries written before this export existed) ``evaluator_token_id``,
  ``evaluator_logprob_long`` (LCL) and ``evaluator_logprob_short`` (truncated context; NaN before K);
* scalars: ``doc_id``, ``text``, ``text_sha256``, ``nll_sum``, ``n_targets``, ``key_nll_sum``, ``n_key``
  (the task's own per-document LongPPL / PPL pairs).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..data import export_files
from ..data.export_files import SETTING


def for_task(task) -> export_files.TokenExport | None:
    """The export of a task whose settings name an ``export_tokens`` folder, else None."""
    if not enabled(task):
        return None
    return export_files.TokenExport(task.settings[SETTING], task.config.task)


def enabled(task) -> bool:
    """Whether the task has a per-token export and its settings name a folder for it."""
    return bool(task.settings.get(SETTING)) and task.config.task in EXPORTING_TASKS


def _text_fields(text: str) -> dict:
    return {"text": np.asarray(text), "text_sha256": np.asarray(hashlib.sha256(text.encode("utf-8")).hexdigest())}


def evaluator_token_of(evaluator_offsets: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Index of the evaluator token holding each token's last character (as LongPPL-soft maps weights)."""
    starts = np.asarray(evaluator_offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    last_char = np.maximum(offsets[:, 1] - 1, offsets[:, 0])
    return np.clip(np.searchsorted(starts, last_char, side="right") - 1, 0, max(len(starts) - 1, 0))


def _targets_to_tokens(target_values: np.ndarray, fill) -> np.ndarray:
    """Per-target values [n - 1] (index t - 1 is token t) as per-token values [n], token 0 = ``fill``."""
    v = np.asarray(target_values)
    return np.concatenate([np.full(1, fill, dtype=v.dtype), v])


def longppl_arrays(
    doc: dict, scored, judgement, key_idx: np.ndarray, alpha: float, beta: float, soft_gamma: float | None = None
) -> dict:
    """The longppl_govreport file of one document (see the module docstring)."""
    from ..metrics import per_token

    lp = np.asarray(scored.long.logprob, dtype=np.float32)
    n = len(scored.token_ids)
    offsets = np.asarray(scored.offsets, dtype=np.int64).reshape(-1, 2)
    key = np.zeros(n, dtype=bool)
    key[np.asarray(key_idx, dtype=np.int64) + 1] = True
    logprob = _targets_to_tokens(lp, np.float32(np.nan))
    lp64 = lp.astype(np.float64)
    out = {
        "doc_id": np.asarray(int(doc["doc_id"])),
        **_text_fields(doc["text"]),
        "token_id": np.asarray(scored.token_ids, dtype=np.int64),
        "char_start": offsets[:, 0],
        "char_end": offsets[:, 1],
        "logprob": logprob,
        "nll": -logprob,
        "greedy": _targets_to_tokens(np.asarray(scored.long.greedy, dtype=bool), False),
        "key": key,
        # the task's own per-document pairs: (nll_sum, count) of ppl and of longppl
        "nll_sum": np.asarray(per_token.nll_sum(lp64)),
        "n_targets": np.asarray(len(lp64)),
        "key_nll_sum": np.asarray(per_token.nll_sum(lp64[key_idx])),
        "n_key": np.asarray(len(key_idx)),
    }
    nan = np.float32(np.nan)
    lsd = lcl = np.full(n, nan, dtype=np.float32)
    if judgement.offsets is not None and judgement.lsd is not None:
        ev_off = np.asarray(judgement.offsets, dtype=np.int64).reshape(-1, 2)
        ev_lsd = _targets_to_tokens(np.asarray(judgement.lsd, dtype=np.float32), nan)
        out.update(evaluator_char_start=ev_off[:, 0], evaluator_char_end=ev_off[:, 1], evaluator_lsd=ev_lsd)
        j = evaluator_token_of(ev_off, offsets)
        lsd = ev_lsd[j]
        if judgement.long_logprob is not None and judgement.short_logprob is not None:
            ev_long = _targets_to_tokens(np.asarray(judgement.long_logprob, dtype=np.float32), nan)
            ev_short = _targets_to_tokens(np.asarray(judgement.short_logprob, dtype=np.float32), nan)
            out.update(
                evaluator_logprob_long=ev_long,
                evaluator_logprob_short=ev_short,
                evaluator_key=_targets_to_tokens(
                    per_token.key_token_mask(judgement.long_logprob, judgement.short_logprob, alpha, beta), False
                ),
            )
            # LCL only where the token has an LSD (the same evaluator token; NaN before K like LSD)
            lcl = np.where(np.isnan(lsd), nan, ev_long[j]).astype(np.float32)
        else:
            # without LCL the spans decide: an evaluator token is key when a key span holds it
            from ..keytokens import spans_to_tokens

            ev_key = np.zeros(len(ev_off), dtype=bool)
            ev_key[spans_to_tokens.tokens_inside_spans(ev_off, judgement.spans)] = True
            ev_key[0] = False
            out["evaluator_key"] = ev_key
        if judgement.token_ids is not None:
            out["evaluator_token_id"] = np.asarray(judgement.token_ids, dtype=np.int64)
    out["lsd"], out["lcl"] = lsd, lcl
    if soft_gamma is not None:
        out["soft_weight"] = _targets_to_tokens(judgement.soft_weights_for(offsets, soft_gamma), 1.0)
    return out


def retrieval_gain_arrays(doc: dict, scores) -> dict:
    from ..metrics import per_token

    gain, nll_with, nll_without = per_token.retrieval_gain_per_pair(scores.with_logprob, scores.without_logprob)
    return {
        "doc_id": np.asarray(int(doc["doc_id"])),
        **_text_fields(doc["text"]),
        "anchors": np.asarray(scores.anchors, dtype=np.int64),
        "n_doc_tokens": np.asarray(scores.n_doc_tokens),
        "n_source_tokens": np.asarray(scores.n_source_tokens),
        "with_logprob": np.asarray(scores.with_logprob, dtype=np.float32),
        "without_logprob": np.asarray(scores.without_logprob, dtype=np.float32),
        "gain": gain,
        "nll_with": nll_with,
        "nll_without": nll_without,
    }


def longeval_arrays(doc: dict, scores) -> dict:
    from ..metrics import per_token

    offsets = np.asarray(scores.offsets, dtype=np.int64).reshape(-1, 2)
    lp = np.asarray(scores.logprob, dtype=np.float32)
    answer = (
        per_token.overlapping_token_mask(offsets, (doc["answer_start"], doc["answer_end"]))
        if len(offsets)
        else np.zeros(0, dtype=bool)
    )
    return {
        "doc_id": np.asarray(int(doc["doc_id"])),
        "num_lines": np.asarray(int(doc["num_lines"])),
        "response": np.asarray(doc["response"]),
        "answer_start": np.asarray(int(doc["answer_start"])),
        "answer_end": np.asarray(int(doc["answer_end"])),
        "prompt_tokens": np.asarray(scores.prompt_tokens),
        "n_tokens": np.asarray(scores.n_tokens),
        "skipped": np.asarray(bool(scores.skipped)),
        "char_start": offsets[:, 0],
        "char_end": offsets[:, 1],
        "logprob": lp,
        "nll": -lp,
        "answer": np.asarray(answer, dtype=bool),
    }


# the tasks with a per-token export (write_document knows their arrays)
EXPORTING_TASKS = ("longppl_govreport", "retrieval_gain", "longeval_lines_ppl")


def write_document(task, doc: dict, results, judgement=None, key_idx=None) -> None:
    """Called from a task's process_results (one document at a time) when its export is on."""
    export = getattr(task, "_token_export", None)
    if export is None:
        return
    s = task.settings
    name = task.config.task
    if name == "longppl_govreport":
        arrays = longppl_arrays(doc, results[0], judgement, key_idx, s["alpha"], s["beta"], s.get("soft_gamma"))
    elif name == "retrieval_gain":
        arrays = retrieval_gain_arrays(doc, results[0])
    elif name == "longeval_lines_ppl":
        arrays = longeval_arrays(doc, results[0])
    else:
        raise ValueError(f"export_tokens: no per-token export for task {name}")
    export.write(doc["doc_id"], arrays, (task.config.metadata or {}).get("longctx_settings") or {})
