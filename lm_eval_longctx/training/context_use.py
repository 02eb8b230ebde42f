"""Whether a model uses its context, measured inside a training run: the ``retrieval_gain_map`` task's numbers on
held-out documents, computed in process.

``measure`` builds the task's cases (``data/retrieval_cases.py``), scores them with the engine exactly as the task's
requests are served (``score_map_cases``, which the task itself calls) under ``torch.no_grad`` with the model in
eval mode (its train/eval state restored afterwards), and reads them with the task's metrics: the gain per cell and
per length and the effective lengths by both rules (``metrics/gain_map.py``). ``LongContextCallback`` runs it every N
steps or at each evaluation of a transformers ``Trainer``, logs it as ``longctx/...`` and can write each measurement
as a results file of a checkpoint series (``lm-eval-longctx report`` draws it).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from .. import output_dirs
from ..data import embedded_corpus, retrieval_cases
from ..engine import scoring
from ..metrics import gain_map

log = logging.getLogger("lm_eval_longctx")

TASK = "retrieval_gain_map"
LOG_PREFIX = "longctx/"


def score_map_cases(
    model,
    cases: Sequence[retrieval_cases.MapCase],
    chunk_size: int = scoring.DEFAULT_CHUNK_SIZE,
    long_pass: str = "auto",
    batch_size: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per case, the answer log-probs with and without the context, float32 [lengths, depths, anchors, answer]:
    every distinct [BOS] Q A of every case scored once, batched; each case's prefix fed once, the cells of each
    length read on top of it (``engine.score_prefix_ladder``). ``progress(1)`` after each case."""
    distinct: dict[tuple, int] = {}  # (sequence, scored tokens) -> index: one anchor at several lengths is read once
    for case in cases:
        for rung in case.without:
            for seq in rung:
                distinct.setdefault((tuple(seq), case.answer_tokens), len(distinct))
    seqs = [list(seq) for seq, _ in distinct]
    counts = [r for _, r in distinct]
    scored = scoring.score_sequence_ends(model, seqs, counts, batch_size=batch_size) if seqs else []

    out = []
    for case in cases:
        nL, nD, n = case.anchors.shape
        rungs = [(len(case.lead) + L, case.continuations[i]) for i, L in enumerate(case.lengths)]
        ladder = scoring.score_prefix_ladder(
            model,
            case.prefix,
            rungs,
            n_scored=case.answer_tokens,
            chunk_size=chunk_size,
            long_pass=long_pass,
            batch_size=batch_size,
        )
        w = np.stack([np.stack([res.logprob for res in rung]) for rung in ladder])
        wo = np.stack(
            [
                np.stack([scored[distinct[(tuple(x), case.answer_tokens)]].logprob for x in rung])
                for rung in case.without
            ]
        )
        shape = (nL, nD, n, case.answer_tokens)
        out.append((w.reshape(shape).astype(np.float32), wo.reshape(shape).astype(np.float32)))
        if progress is not None:
            progress(1)
    return out


@dataclass(frozen=True)
class MapSettings:
    """The ``retrieval_gain_map`` settings a measurement uses (the task's names and defaults; ``lengths`` are its
    ``context_lengths``)."""

    lengths: tuple[int, ...]
    depths: tuple[int, ...] = (10, 50, 90)
    query_tokens: int = 24
    answer_tokens: int = 24
    anchors_per_cell: int = 1
    anchor_stride: int | None = None
    separator: str = ""
    bos: str = "auto"
    effective_fraction: float = 0.5
    effective_threshold: float = 0.5
    effective_rule: str = "contiguous"
    chunk_size: int = scoring.DEFAULT_CHUNK_SIZE
    long_pass: str = "auto"
    batch_size: int = 1

    def __post_init__(self) -> None:
        if not self.lengths or list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"lengths must be increasing context lengths, got {list(self.lengths)}")

    def case_settings(self) -> dict:
        stride = self.query_tokens + self.answer_tokens if self.anchor_stride is None else self.anchor_stride
        return {
            "query_tokens": self.query_tokens,
            "answer_tokens": self.answer_tokens,
            "anchors_per_cell": self.anchors_per_cell,
            "anchor_stride": stride,
            "separator": self.separator,
            "bos": self.bos,
            "depths": list(self.depths),
        }

    def task_metadata(self) -> dict:
        """The same measurement as ``lm_eval --tasks retrieval_gain_map --metadata JSON`` (with ``data_files``)."""
        return {
            "context_lengths": list(self.lengths),
            **{k: v for k, v in self.case_settings().items() if k != "anchor_stride" or self.anchor_stride},
            "effective_fraction": self.effective_fraction,
            "effective_threshold": self.effective_threshold,
            "effective_rule": self.effective_rule,
            "chunk_size": self.chunk_size,
            "long_pass": self.long_pass,
        }


@dataclass
class ContextUse:
    """One measurement: each document's gain per cell, float64 [documents, lengths, depths], and what it cost."""

    settings: MapSettings
    gains: np.ndarray
    tokens: int  # token positions run through the model
    seconds: float
    step: int | None = None
    text_sha256: list[str] = field(default_factory=list)  # each document's, in order: what pairs two measurements

    def metrics(self) -> dict[str, float]:
        """The task's metrics by its names: per cell and per length (mean over documents), ``gain`` and the
        effective lengths (``metrics.gain_map.effective_length*_from_docs``, the task's aggregations)."""
        s = self.settings
        width = max(5, len(str(max(s.lengths))))
        depth_width = max(2, len(str(max(s.depths))))
        out: dict[str, float] = {}
        for i, length in enumerate(s.lengths):
            for j, depth in enumerate(s.depths):
                out[gain_map.cell_metric(length, depth, width, depth_width)] = float(self.gains[:, i, j].mean())
            out[gain_map.length_metric(length, width)] = float(np.mean([g[i].mean() for g in self.gains]))
        out["gain"] = float(np.mean([g.mean() for g in self.gains]))
        items = [tuple(tuple(float(x) for x in row) for row in g) for g in self.gains]
        out["effective_length"] = gain_map.effective_length_from_docs(
            items, s.lengths, s.effective_fraction, s.effective_rule, base_minimum=s.effective_threshold
        )
        out["effective_length_abs"] = gain_map.effective_length_abs_from_docs(
            items, s.lengths, s.effective_threshold, s.effective_rule
        )
        return out

    def log_values(self) -> dict[str, float]:
        """What the Trainer logs: the gain per length, ``gain`` and the effective lengths, under ``longctx/``."""
        width = max(5, len(str(max(self.settings.lengths))))
        keep = {gain_map.length_metric(n, width) for n in self.settings.lengths} | {
            "gain",
            "effective_length",
            "effective_length_abs",
        }
        return {f"{LOG_PREFIX}{k}": v for k, v in self.metrics().items() if k in keep}


def planned_tokens(cases: Sequence[retrieval_cases.MapCase]) -> int:
    """Token positions a measurement runs through the model: each ladder's prefix, every cell's continuation and
    every distinct without-context sequence."""
    total = sum(len(c.prefix) + sum(len(x) for rung in c.continuations for x in rung) for c in cases)
    return total + sum(len(w) for w in {tuple(w) for c in cases for rung in c.without for w in rung})


def measure(model, tokenizer, texts: Sequence[str], settings: MapSettings, step: int | None = None) -> ContextUse:
    """The retrieval-gain map of ``texts`` (each at least the longest length plus q + r tokens) as the task
    measures it, on ``model`` as it is now; its train/eval state is restored afterwards."""
    lengths = list(settings.lengths)
    cases = [retrieval_cases.map_case_for_text(tokenizer, t, settings.case_settings(), lengths) for t in texts]
    tokens = planned_tokens(cases)
    was_training = model.training
    start = time.perf_counter()
    model.eval()
    try:
        with torch.no_grad():
            scored = score_map_cases(model, cases, settings.chunk_size, settings.long_pass, settings.batch_size)
    finally:
        model.train(was_training)
    gains = np.stack([gain_map.cell_gains(w, wo) for w, wo in scored])
    hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    return ContextUse(settings, gains, tokens, time.perf_counter() - start, step, hashes)


def held_out_documents(tokenizer, settings: MapSettings, num_docs: int) -> list[str]:
    """``num_docs`` documents of the embedded corpus long enough for every cell of the longest length."""

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    need = max(settings.lengths)
    return embedded_corpus.documents_of_tokens(need, num_docs, count)


def results_record(use: ContextUse, model_name: str) -> dict:
    """A measurement as an lm-eval results file of the ``retrieval_gain_map`` task (its metric names, settings record
    and directions), so that the report tools read a series of them as checkpoints of one run."""
    metrics = use.metrics()
    n = len(use.gains)
    results: dict = {"alias": TASK}
    for name, value in metrics.items():
        results[f"{name},none"] = value
        if name.startswith("gain"):
            per_doc = _per_document(use, name)
            results[f"{name}_stderr,none"] = float(np.std(per_doc, ddof=1) / math.sqrt(n)) if n > 1 else "N/A"
        else:
            results[f"{name}_stderr,none"] = "N/A"
    s = use.settings
    record = {
        **s.task_metadata(),
        "lengths_used": list(s.lengths),
        "task_kind": TASK,
        "runtime": {"measured_in_training": {"step": use.step, "tokens": use.tokens, "seconds": round(use.seconds, 3)}},
        "data": {"source": "training.context_use", "num_docs": n},
    }
    return {
        "results": {TASK: results},
        "configs": {TASK: {"task": TASK, "metadata": {"longctx_settings": record}}},
        "versions": {TASK: 1},
        "n-samples": {TASK: {"original": n, "effective": n}},
        "higher_is_better": {TASK: dict.fromkeys(metrics, True)},
        "model_name": model_name,
        "config": {"model": "hf", "model_args": f"pretrained={model_name}"},
        "date": time.time(),
    }


def _per_document(use: ContextUse, name: str) -> np.ndarray:
    if name == "gain":
        return use.gains.mean(axis=(1, 2))
    s = use.settings
    width = max(5, len(str(max(s.lengths))))
    depth_width = max(2, len(str(max(s.depths))))
    for i, length in enumerate(s.lengths):
        if name == gain_map.length_metric(length, width):
            return use.gains[:, i].mean(axis=1)
        for j, depth in enumerate(s.depths):
            if name == gain_map.cell_metric(length, depth, width, depth_width):
                return use.gains[:, i, j]
    raise KeyError(name)


def samples_lines(use: ContextUse) -> list[dict]:
    """One lm-eval samples line per document (its values of every metric, as the task's ``process_results`` gives
    them), so that ``gate`` pairs the documents of two measurements."""
    names = list(use.metrics())
    out = []
    for i, digest in enumerate(use.text_sha256):
        doc = {"doc_id": i, "text_sha256": digest}
        line: dict = {
            "doc_id": i,
            "doc": doc,
            "filter": "none",
            "metrics": names,
            "doc_hash": hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(),
        }
        for name in names:
            if name.startswith("effective_length"):
                line[name] = [[float(g) for g in row] for row in use.gains[i]]
            else:
                line[name] = float(_per_document(use, name)[i])
        out.append(line)
    return out


def write_results(use: ContextUse, folder: str | Path, model_name: str) -> Path:
    """``folder/checkpoint-<step>/results_<date>.json`` and the samples file beside it (new files; nothing is
    overwritten)."""
    out = Path(folder) / f"checkpoint-{use.step if use.step is not None else 0}"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().isoformat().replace(":", "-")
    path = out / f"results_{stamp}.json"
    record = results_record(use, f"{model_name}/checkpoint-{use.step if use.step is not None else 0}")
    lines = "".join(json.dumps(line) + "\n" for line in samples_lines(use))
    output_dirs.write_atomically(out / f"samples_{TASK}_{stamp}.jsonl", lines.encode())
    output_dirs.write_atomically(path, json.dumps(record, indent=2, default=str).encode())
    return path


class LongContextCallback(TrainerCallback):
    """Measures the retrieval-gain map (``measure``) every ``every_steps`` steps, with ``at_evaluate`` at each
    evaluation of a ``Trainer`` and with ``at_train_begin`` once before the first step; on the main process only. Each measurement is logged through the Trainer (as
    ``longctx/gain@L01024``, ``longctx/effective_length``, ...: TensorBoard, W&B and the console get them) when the
    callback is attached with ``attach(trainer)``, else added to ``state.log_history``; with ``output_dir`` each is
    also written as a results file (``write_results``). ``texts``: the held-out documents (default: ``num_docs`` of the
    embedded corpus). ``max_tokens``: a measurement that would run more token positions is refused at the first
    call, with its cost."""

    def __init__(
        self,
        tokenizer,
        settings: MapSettings,
        every_steps: int | None = None,
        at_evaluate: bool = False,
        at_train_begin: bool = False,
        texts: Sequence[str] | None = None,
        num_docs: int = 4,
        output_dir: str | Path | None = None,
        model_name: str = "model",
        max_tokens: int | None = None,
    ):
        if every_steps is not None and every_steps < 1:
            raise ValueError(f"every_steps must be at least 1, got {every_steps}")
        self.tokenizer = tokenizer
        self.settings = settings
        self.every_steps = every_steps
        self.at_evaluate = at_evaluate
        self.at_train_begin = at_train_begin
        self.texts = list(texts) if texts is not None else held_out_documents(tokenizer, settings, num_docs)
        self.output_dir = output_dir
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.trainer = None
        self.measurements: list[ContextUse] = []

    def attach(self, trainer) -> LongContextCallback:
        """Add the callback to ``trainer`` and log through its ``log``."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.at_train_begin:
            self._measure(state, control, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_steps and state.global_step % self.every_steps == 0:
            self._measure(state, control, model)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if self.at_evaluate:
            self._measure(state, control, model)

    def _measure(self, state, control, model) -> None:
        if model is None or not state.is_world_process_zero:
            return
        if not self.measurements:
            cases = [
                retrieval_cases.map_case_for_text(
                    self.tokenizer, t, self.settings.case_settings(), list(self.settings.lengths)
                )
                for t in self.texts
            ]
            tokens = planned_tokens(cases)
            if self.max_tokens is not None and tokens > self.max_tokens:
                raise ValueError(
                    f"LongContextCallback: one measurement runs {tokens} token positions, over max_tokens "
                    f"{self.max_tokens}; use fewer documents, lengths or depths, or raise max_tokens"
                )
        use = measure(model, self.tokenizer, self.texts, self.settings, step=int(state.global_step))
        if not self.measurements:
            log.warning(
                "longctx: one context-use measurement runs %d token positions (%d documents, lengths %s, depths %s) "
                "and took %.1f s",
                use.tokens,
                len(self.texts),
                list(self.settings.lengths),
                list(self.settings.depths),
                use.seconds,
            )
        self.measurements.append(use)
        values = use.log_values()
        if self.trainer is not None:
            # the Trainer's own log of this step (its loss) comes after on_step_end: Trainer.log clears the flag
            should_log = getattr(control, "should_log", False)
            self.trainer.log(values)
            if control is not None:
                control.should_log = should_log
        else:
            state.log_history.append({**values, "step": int(state.global_step)})
        if self.output_dir is not None:
            write_results(use, self.output_dir, self.model_name)

    def series(self) -> list[dict]:
        """Every measurement so far: its step, cost and metrics."""
        return [{"step": u.step, "tokens": u.tokens, "seconds": u.seconds, **u.metrics()} for u in self.measurements]


__all__ = [
    "ContextUse",
    "LongContextCallback",
    "MapSettings",
    "measure",
    "score_map_cases",
    "write_results",
]
