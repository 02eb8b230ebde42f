"""Per-token export: what a task saw, token by token, one ``.npz`` file per document (opt-in).

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

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

FORMAT = "lm_eval_longctx/token-export/1"
MANIFEST = "manifest.json"
SETTING = "export_tokens"
DOC_GLOB = "doc_*.npz"

COLUMNS = {
    "longppl_govreport": {
        "token_id": "evaluated-model token ids [n] (text tokenized without special tokens)",
        "char_start": "character offset where token i starts in `text` [n]",
        "char_end": "character offset where token i ends in `text` [n]",
        "logprob": "evaluated model: log p(token i | tokens < i), long context [n]; NaN for token 0",
        "nll": "evaluated model: -logprob [n]",
        "greedy": "evaluated model: argmax of the prediction of token i == token i [n]; False for token 0",
        "key": "token i is a key token (counted in LongPPL) [n]",
        "lsd": "evaluator LSD of the evaluator token holding token i's last character [n]; NaN: none",
        "lcl": "evaluator long-context log-prob (LCL) of that evaluator token [n]; NaN: none or not available",
        "soft_weight": "LongPPL-soft weight of token i [n] (only with soft_gamma); 1 where no LSD",
        "evaluator_token_id": "evaluator token ids [m] (with its special tokens), when available",
        "evaluator_char_start": "evaluator token j's start in `text` [m]",
        "evaluator_char_end": "evaluator token j's end in `text` [m]",
        "evaluator_logprob_long": "evaluator: log p(token j | all before), LCL [m]; NaN for j = 0; when available",
        "evaluator_logprob_short": "evaluator: log p(token j | truncated window) [m]; NaN before K; when available",
        "evaluator_lsd": "evaluator: LSD = long - short log-prob [m]; NaN where no truncated context",
        "evaluator_key": "evaluator token j is key (LSD > alpha and LCL > beta) [m]",
        "doc_id, text, text_sha256": "the document",
        "nll_sum, n_targets, key_nll_sum, n_key": "the task's per-document (NLL sum, count) pairs of ppl and longppl",
    },
    "retrieval_gain": {
        "anchors": "anchor token positions in the document [q]",
        "with_logprob": "answer tokens' log-probs read after the document [q, r]",
        "without_logprob": "answer tokens' log-probs without the document [q, r]",
        "gain, nll_with, nll_without": "per anchor [q] (gain = nll_without - nll_with)",
        "n_doc_tokens, n_source_tokens, doc_id, text, text_sha256": "the document",
    },
    "longeval_lines_ppl": {
        "char_start": "response token's start, relative to the response's first character [m]",
        "char_end": "response token's end, relative to the response's first character [m]",
        "logprob": "log p(response token | prompt and earlier response tokens) [m]",
        "nll": "-logprob [m]",
        "answer": "the token overlaps the number's digits (answer_ppl) [m]; others with width > 0: non_answer_ppl",
        "doc_id, num_lines, response, answer_start, answer_end, prompt_tokens, n_tokens, skipped": "the case",
    },
}


class ExportFolderError(ValueError):
    """An ``export_tokens`` folder this run may not write into."""


# --------------------------------------------------------------------------- settings


def parse_setting(value) -> str | None:
    """The ``export_tokens`` setting: a folder path, or None (off)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"export_tokens must be a folder path, got {value!r}")
    return str(Path(value).expanduser().resolve())


def _launch_id() -> str | None:
    """What the ranks of one data-parallel launch share (None outside data parallelism)."""
    world = os.environ.get("WORLD_SIZE", "1") or "1"
    if int(world) <= 1:
        return None
    parts = [os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")]
    if os.environ.get("LOCAL_WORLD_SIZE", world) == world:
        # one node: the ranks are children of one launcher process, which a later launch is not
        parts.append(str(os.getppid()))
    return "|".join(parts)


def check_folder(folder: Path) -> None:
    """Refuse a folder that exists and holds anything, unless a sibling rank of this launch made it."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ExportFolderError(f"export_tokens: {folder} exists and is not a folder")
    if not any(folder.iterdir()):
        return
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            m = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            m = {}
        launch = _launch_id()
        if m.get("format") == FORMAT and launch is not None and m.get("launch") == launch:
            return
        if m.get("format") == FORMAT:
            raise ExportFolderError(
                f"export_tokens: {folder} already holds a token export (created {m.get('created')}); it is not "
                "overwritten. Pass another export_tokens folder, or remove that one yourself.")
    raise ExportFolderError(
        f"export_tokens: {folder} is not empty and was not created by a token export; nothing is written into "
        "it. Pass a new or empty folder as export_tokens.")


# --------------------------------------------------------------------------- writing


class TokenExport:
    """Writes one task's per-document files into ``root/<task>/``; the folder is checked when this is
    built (before any model runs) and created at the first document."""

    def __init__(self, root: str | Path, task: str):
        self.folder = Path(root) / task
        self.task = task
        check_folder(self.folder)
        self._opened = False

    def _open(self, settings_record: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = {"format": FORMAT, "task": self.task, "settings": settings_record,
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "launch": _launch_id(), "columns": COLUMNS.get(self.task, {})}
        try:
            fd = os.open(self.folder / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            check_folder(self.folder)  # a sibling rank of this launch wrote it; anything else is refused
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(manifest, f, indent=2, default=str)
                f.write("\n")
        self._opened = True

    def write(self, doc_id: int, arrays: dict, settings_record: dict) -> Path:
        """Write ``doc_<doc_id>.npz`` (atomically: a partial file never carries the final name)."""
        if not self._opened:
            self._open(settings_record)
        path = self.folder / f"doc_{int(doc_id):05d}.npz"
        tmp = self.folder / f".doc_{int(doc_id):05d}.{os.getpid()}.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
        return path


def for_task(task) -> TokenExport | None:
    """The export of a task whose settings name an ``export_tokens`` folder, else None."""
    if not enabled(task):
        return None
    return TokenExport(task.settings[SETTING], task.config.task)


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


def _per_token(target_values: np.ndarray, fill) -> np.ndarray:
    """Per-target values [n - 1] (index t - 1 is token t) as per-token values [n], token 0 = ``fill``."""
    v = np.asarray(target_values)
    return np.concatenate([np.full(1, fill, dtype=v.dtype), v])


def longppl_arrays(doc: dict, scored, judgement, key_idx: np.ndarray, alpha: float, beta: float,
                   soft_gamma: float | None = None) -> dict:
    """The longppl_govreport file of one document (see the module docstring)."""
    from ..metrics import per_token as metrics

    lp = np.asarray(scored.long.logprob, dtype=np.float32)
    n = len(scored.token_ids)
    offsets = np.asarray(scored.offsets, dtype=np.int64).reshape(-1, 2)
    key = np.zeros(n, dtype=bool)
    key[np.asarray(key_idx, dtype=np.int64) + 1] = True
    logprob = _per_token(lp, np.float32(np.nan))
    lp64 = lp.astype(np.float64)
    out = {
        "doc_id": np.asarray(int(doc["doc_id"])), **_text_fields(doc["text"]),
        "token_id": np.asarray(scored.token_ids, dtype=np.int64),
        "char_start": offsets[:, 0], "char_end": offsets[:, 1],
        "logprob": logprob, "nll": -logprob,
        "greedy": _per_token(np.asarray(scored.long.greedy, dtype=bool), False),
        "key": key,
        # the task's own per-document pairs: (nll_sum, count) of ppl and of longppl
        "nll_sum": np.asarray(metrics.nll_sum(lp64)), "n_targets": np.asarray(len(lp64)),
        "key_nll_sum": np.asarray(metrics.nll_sum(lp64[key_idx])), "n_key": np.asarray(len(key_idx)),
    }
    nan = np.float32(np.nan)
    lsd = lcl = np.full(n, nan, dtype=np.float32)
    if judgement.offsets is not None and judgement.lsd is not None:
        ev_off = np.asarray(judgement.offsets, dtype=np.int64).reshape(-1, 2)
        ev_lsd = _per_token(np.asarray(judgement.lsd, dtype=np.float32), nan)
        out.update(evaluator_char_start=ev_off[:, 0], evaluator_char_end=ev_off[:, 1], evaluator_lsd=ev_lsd)
        j = evaluator_token_of(ev_off, offsets)
        lsd = ev_lsd[j]
        if judgement.long_logprob is not None and judgement.short_logprob is not None:
            ev_long = _per_token(np.asarray(judgement.long_logprob, dtype=np.float32), nan)
            ev_short = _per_token(np.asarray(judgement.short_logprob, dtype=np.float32), nan)
            out.update(evaluator_logprob_long=ev_long, evaluator_logprob_short=ev_short,
                       evaluator_key=_per_token(metrics.key_token_mask(judgement.long_logprob, judgement.short_logprob,
                                                                       alpha, beta), False))
            # LCL only where the token has an LSD (the same evaluator token; NaN before K like LSD)
            lcl = np.where(np.isnan(lsd), nan, ev_long[j]).astype(np.float32)
        else:
            # without LCL the spans decide: an evaluator token is key when a key span holds it
            from ..keytokens import spans_to_tokens as keyspans

            ev_key = np.zeros(len(ev_off), dtype=bool)
            ev_key[keyspans.tokens_inside_spans(ev_off, judgement.spans)] = True
            ev_key[0] = False
            out["evaluator_key"] = ev_key
        if judgement.token_ids is not None:
            out["evaluator_token_id"] = np.asarray(judgement.token_ids, dtype=np.int64)
    out["lsd"], out["lcl"] = lsd, lcl
    if soft_gamma is not None:
        out["soft_weight"] = _per_token(judgement.soft_weights_for(offsets, soft_gamma), 1.0)
    return out


def retrieval_gain_arrays(doc: dict, scores) -> dict:
    from ..metrics import per_token as metrics

    gain, nll_with, nll_without = metrics.retrieval_gain_per_pair(scores.with_logprob, scores.without_logprob)
    return {"doc_id": np.asarray(int(doc["doc_id"])), **_text_fields(doc["text"]),
            "anchors": np.asarray(scores.anchors, dtype=np.int64), "n_doc_tokens": np.asarray(scores.n_doc_tokens),
            "n_source_tokens": np.asarray(scores.n_source_tokens),
            "with_logprob": np.asarray(scores.with_logprob, dtype=np.float32),
            "without_logprob": np.asarray(scores.without_logprob, dtype=np.float32),
            "gain": gain, "nll_with": nll_with, "nll_without": nll_without}


def longeval_arrays(doc: dict, scores) -> dict:
    from ..metrics import per_token as metrics

    offsets = np.asarray(scores.offsets, dtype=np.int64).reshape(-1, 2)
    lp = np.asarray(scores.logprob, dtype=np.float32)
    answer = (metrics.overlapping_token_mask(offsets, (doc["answer_start"], doc["answer_end"]))
              if len(offsets) else np.zeros(0, dtype=bool))
    return {"doc_id": np.asarray(int(doc["doc_id"])), "num_lines": np.asarray(int(doc["num_lines"])),
            "response": np.asarray(doc["response"]), "answer_start": np.asarray(int(doc["answer_start"])),
            "answer_end": np.asarray(int(doc["answer_end"])), "prompt_tokens": np.asarray(scores.prompt_tokens),
            "n_tokens": np.asarray(scores.n_tokens), "skipped": np.asarray(bool(scores.skipped)),
            "char_start": offsets[:, 0], "char_end": offsets[:, 1], "logprob": lp, "nll": -lp,
            "answer": np.asarray(answer, dtype=bool)}


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


# --------------------------------------------------------------------------- reading


def task_folder(path: str | Path, task: str = "longppl_govreport") -> Path:
    """The task folder of an export: ``path`` itself when it holds a manifest, else ``path/<task>``."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if (path / task / MANIFEST).is_file():
        return path / task
    raise FileNotFoundError(f"{path} is not a token export (no {MANIFEST} in it or in {path / task})")


def read_manifest(folder: str | Path) -> dict:
    folder = Path(folder)
    m = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    if m.get("format") != FORMAT:
        raise ValueError(f"{folder / MANIFEST}: format {m.get('format')!r}, expected {FORMAT!r}")
    return m


def document_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob(DOC_GLOB))


def load_document(path: str | Path) -> dict:
    """One document's arrays (0-d arrays become Python scalars / str). No pickles are loaded."""
    with np.load(path, allow_pickle=False) as z:
        return {k: (z[k].item() if z[k].ndim == 0 else z[k]) for k in z.files}


def iter_documents(folder: str | Path) -> Iterator[dict]:
    for p in document_files(folder):
        yield load_document(p)


def longppl_from_export(folder: str | Path) -> dict:
    """Corpus LongPPL and PPL recomputed from the per-token arrays (key flags and log-probs)."""
    from ..metrics import per_token as metrics

    pairs_key, pairs_all = [], []
    for d in iter_documents(task_folder(folder, "longppl_govreport")):
        lp = d["logprob"][1:].astype(np.float64)
        key = d["key"][1:]
        pairs_key.append((metrics.nll_sum(lp[key]), int(key.sum())))
        pairs_all.append((metrics.nll_sum(lp), len(lp)))
    return {"longppl": metrics.token_weighted_perplexity(pairs_key),
            "ppl": metrics.token_weighted_perplexity(pairs_all), "n_docs": len(pairs_all)}
