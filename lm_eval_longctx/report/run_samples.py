"""The per-document samples of a harness run, read as resampling units: what the known-answer validation, the
audit's verdict and other readers of ``--log_samples`` output recompute their metrics from.

* ``read_samples``: one ``samples_<task>_<date>.jsonl`` file, parsed strictly (the gate's reader too);
* ``read_run``: a results JSON and the per-sample files beside it;
* ``unit_data``: per metric (``MetricSpec``), one row per resampling unit (a LongPPL / retrieval-gain document, a
  LongEval case, a forgetting-curve sample index with its copy and LM accuracy at every length, a map document's
  gain per length and depth);
* ``paired_units``: the units common to several runs, checked to hold the same content;
* ``metric_value``: the metric recomputed from those rows, for any resample (vectorised over index arrays).

numpy only; no model, no lm-eval import.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..metrics import per_token

log = logging.getLogger("lm_eval_longctx")

# lm-eval's date_id: datetime.now().isoformat().replace(":", "-"), at the end of the results file's stem
DATE_ID = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)$")
# the fields lm-eval writes in every samples line; the others are the task's per-document metric values
SAMPLE_FIELDS = {
    "doc_id",
    "doc",
    "target",
    "arguments",
    "resps",
    "filtered_resps",
    "filter",
    "metrics",
    "doc_hash",
    "prompt_hash",
    "target_hash",
}


@dataclass(frozen=True)
class MetricSpec:
    key: str  # id in the JSON output
    label: str  # table row
    task: str  # harness task whose samples hold it
    field: str  # per-sample field written by the task's process_results
    kind: str  # "perplexity" (nll_sum, n) pairs | "mean" of floats | "fine" / "coarse" memory length
    #           | "effective" context length of the retrieval-gain map (per-document gain per length)
    higher_is_better: bool
    expected: str  # what the metric should show by its design: "orders" | "no clear separation" | "not stated"
    # fine / coarse only: this threshold (margin) instead of the run's own setting; the row is then a diagnostic
    # recomputed from the samples, with no harness aggregate to compare against
    threshold: float | None = None


class ValidationError(ValueError):
    """The runs cannot be compared (missing samples, units that do not pair, unknown metric)."""


# ----------------------------------------------------------------------------------------------- reading


@dataclass
class RunFiles:
    """One model's harness output: the results dict and, per task, its logged samples."""

    results: dict
    samples: dict[str, list[dict]]  # task -> rows of samples_<task>_<date>.jsonl
    results_file: str = ""


def date_id_of(results_file) -> str | None:
    m = DATE_ID.search(Path(results_file).stem)
    return m.group(1) if m else None


def samples_files(results_file) -> dict[str, Path]:
    """``{task: path}`` of the ``samples_<task>_<date_id>.jsonl`` files lm-eval wrote beside a results file."""
    date_id = date_id_of(results_file)
    if date_id is None:
        return {}
    suffix = f"_{date_id}.jsonl"
    folder = Path(results_file).parent
    return {p.name[len("samples_") : -len(suffix)]: p for p in sorted(folder.glob(f"samples_*{suffix}"))}


class SamplesError(ValueError):
    """A samples file that cannot be used as it is (malformed line, duplicate document, other documents)."""


@dataclass
class TaskSamples:
    """One task's per-document records: ``(filter, doc_id) -> (doc_hash, {metric: value})``."""

    path: Path
    docs: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # every line, as lm-eval wrote it

    def values(self, metric: str, filt: str = "none") -> dict:
        """``{doc_id: value}`` of the documents that have ``metric`` under ``filt``."""
        return {d: vals[metric] for (f, d), (_, vals) in self.docs.items() if f == filt and metric in vals}


def samples_file(results_file, task: str) -> Path | None:
    """``samples_<task>_<date_id>.jsonl`` beside a results file (lm-eval's naming), or None when absent."""
    date_id = date_id_of(results_file)
    if date_id is None:
        return None
    p = Path(results_file).parent / f"samples_{task}_{date_id}.jsonl"
    return p if p.is_file() else None


def read_samples(path) -> TaskSamples:
    """Parse a samples file strictly: every line an object with an integer doc_id, a filter, a doc_hash and the
    values of the metrics it lists; a document twice under one filter is an error (a file appended to twice)."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SamplesError(f"{p}: cannot read: {e}") from e
    out = TaskSamples(p)
    # JSON lines end at "\n" only: U+2028, U+2029 and U+0085 may stand unescaped inside JSON strings
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SamplesError(f"{p}:{n}: malformed JSON ({e})") from e
        if not isinstance(rec, dict):
            raise SamplesError(f"{p}:{n}: not a JSON object")
        doc_id, filt, names = rec.get("doc_id"), rec.get("filter", "none"), rec.get("metrics")
        if isinstance(doc_id, bool) or not isinstance(doc_id, int):
            raise SamplesError(f"{p}:{n}: doc_id is not an integer ({doc_id!r})")
        if not isinstance(filt, str):
            raise SamplesError(f"{p}:{n}: filter is not a string")
        if names is None:  # lm-eval releases that do not list them: every field that is not lm-eval's own
            names = [k for k in rec if k not in SAMPLE_FIELDS]
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise SamplesError(f"{p}:{n}: 'metrics' is not a list of metric names")
        doc_hash = rec.get("doc_hash")
        if not isinstance(doc_hash, str) or not doc_hash:
            raise SamplesError(f"{p}:{n}: no doc_hash (lm-eval writes one per document)")
        key = (filt, doc_id)
        if key in out.docs:
            raise SamplesError(f"{p}:{n}: document {doc_id} (filter {filt}) appears twice")
        out.docs[key] = (doc_hash, {m: rec[m] for m in names if m in rec})
        out.rows.append(rec)
    if not out.docs:
        raise SamplesError(f"{p}: no documents")
    return out


def check_same_documents(task: str, run: TaskSamples, base: TaskSamples) -> None:
    """The run and the baseline must have scored the same documents: same (filter, doc_id) set, same doc_hash."""
    a, b = set(run.docs), set(base.docs)
    if a != b:
        only_run, only_base = sorted(a - b)[:5], sorted(b - a)[:5]
        raise SamplesError(
            f"{task}: the run and the baseline scored different documents (doc_ids only in the run: "
            f"{[d for _, d in only_run]}, only in the baseline: {[d for _, d in only_base]}; "
            f"{run.path.name} vs {base.path.name})"
        )
    diff = sorted(k for k in a if run.docs[k][0] != base.docs[k][0])
    if diff:
        raise SamplesError(
            f"{task}: {len(diff)} document(s) differ between the run and the baseline (same doc_id, other doc_hash: "
            f"doc_ids {[d for _, d in diff[:10]]}); {run.path} vs {base.path}"
        )


def read_run(results_file) -> RunFiles:
    """The results JSON (checked by ``results.load_results``) and every samples file beside it."""
    from .results import load_results

    results = load_results(results_file)
    samples = {task: read_samples(p).rows for task, p in samples_files(results_file).items()}
    if not samples:
        raise ValidationError(f"{results_file}: no samples_*.jsonl beside it (run lm_eval with --log_samples)")
    return RunFiles(results, samples, str(results_file))


def task_settings(results: dict, task: str) -> dict:
    return (((results.get("configs") or {}).get(task) or {}).get("metadata") or {}).get("longctx_settings") or {}


# ----------------------------------------------------------------------------------------------- units


@dataclass
class Units:
    """One metric's data for one model: ``values[i]`` belongs to unit ``ids[i]`` (a harness doc, or for the
    forgetting curve a sample index), ``hashes[i]`` identifies what the unit holds (for pairing)."""

    ids: list
    values: np.ndarray  # perplexity: [n, 2] (nll_sum, tokens); mean: [n]; fine/coarse: [n, lengths, 2] (copy, lm);
    #                     effective: [n, lengths, depths] (gain per context length and depth)
    hashes: list
    lengths: np.ndarray | None = None  # fine/coarse: the copy lengths, ascending
    params: dict = field(default_factory=dict)  # fine/coarse: threshold / margin and rule

    def take(self, ids: Sequence) -> Units:
        pos = {u: i for i, u in enumerate(self.ids)}
        sel = [pos[u] for u in ids]
        return Units(list(ids), self.values[sel], [self.hashes[i] for i in sel], self.lengths, dict(self.params))


def unit_data(spec: MetricSpec, run: RunFiles) -> Units:
    """Per-unit values of one metric from a run's samples (rows without the field, e.g. skipped LongEval cases,
    are left out)."""
    rows = run.samples.get(spec.task)
    if rows is None:
        raise ValidationError(f"{run.results_file}: no samples of task {spec.task}")
    if spec.kind in ("perplexity", "mean"):
        kept = [r for r in rows if spec.field in r]
        ids = [int(r["doc_id"]) for r in kept]
        hashes = [r.get("doc_hash") for r in kept]
        if spec.kind == "perplexity":
            values = np.asarray(
                [[float(r[spec.field][0]), float(r[spec.field][1])] for r in kept], dtype=np.float64
            ).reshape(-1, 2)
        else:
            values = np.asarray([float(r[spec.field]) for r in kept], dtype=np.float64)
        return Units(ids, values, hashes)
    if spec.kind in ("fine", "coarse"):
        return _curve_units(spec, run, rows)
    if spec.kind == "effective":
        s = task_settings(run.results, spec.task)
        kept = [r for r in rows if spec.field in r]
        lengths = np.asarray(s["lengths_used"], dtype=np.int64)
        depths = [int(d) for d in s["depths"]]
        values = np.asarray([_gains_by_depth(r, spec.field, lengths, depths) for r in kept], dtype=np.float64)
        params = {
            "fraction": float(s["effective_fraction"]),
            "base_minimum": float(s["effective_threshold"]),
            "rule": str(s["effective_rule"]),
        }
        return Units(
            [int(r["doc_id"]) for r in kept],
            values.reshape(len(kept), len(lengths), len(depths)),
            [r.get("doc_hash") for r in kept],
            lengths,
            {**params, "depths": depths},
        )
    raise ValidationError(f"unknown metric kind {spec.kind!r}")


CELL_FIELD = re.compile(r"gain@L(\d+)_d(\d+)")


def _gains_by_depth(row: dict, field: str, lengths, depths: list[int]) -> list[list[float]]:
    """A retrieval-gain-map document's gain per (length, depth): its item, or, where the item holds one gain per
    length (runs logged before it held each depth), its cells' fields ``gain@L<length>_d<depth>``."""
    item = row[field]
    if all(isinstance(x, list) for x in item):
        return [[float(g) for g in x] for x in item]
    cells = {(int(m[1]), int(m[2])): float(v) for k, v in row.items() if (m := CELL_FIELD.fullmatch(k))}
    try:
        return [[cells[(int(length), d)] for d in depths] for length in lengths]
    except KeyError as err:
        raise ValidationError(f"document {row.get('doc_id')}: no gain at (length, depth) {err}") from None


def _curve_units(spec: MetricSpec, run: RunFiles, rows: list[dict]) -> Units:
    """Forgetting curve: one unit per sample index k (docs are sample-major: sample k has one sample at every
    length), holding its copy and LM accuracy at each length. Resampling k keeps every length's sample count."""
    s = task_settings(run.results, spec.task)
    if spec.kind == "fine":
        params = {
            "threshold": float(s.get("fine_threshold", per_token.FINE_THRESHOLD)),
            "rule": str(s.get("fine_rule", "largest")),
        }
    else:
        params = {
            "margin": float(s.get("coarse_margin", per_token.COARSE_MARGIN)),
            "rule": str(s.get("coarse_rule", "contiguous")),
        }
    if spec.threshold is not None:
        params["threshold" if spec.kind == "fine" else "margin"] = float(spec.threshold)
    by_sample: dict[int, dict[int, tuple]] = {}
    hashes: dict[int, dict[int, str | None]] = {}
    for r in rows:
        length, copy, lm = r[spec.field]
        k, length = int(r["doc"]["sample"]), int(length)
        by_sample.setdefault(k, {})[length] = (float(copy), float(lm))
        hashes.setdefault(k, {})[length] = r.get("doc_hash")
    lengths = sorted({x for v in by_sample.values() for x in v})
    complete = sorted(k for k, v in by_sample.items() if len(v) == len(lengths))
    if len(complete) < len(by_sample):
        log.warning(
            "%d forgetting-curve sample indices lack some lengths (--limit?) and are left out",
            len(by_sample) - len(complete),
        )
    values = np.asarray([[by_sample[k][x] for x in lengths] for k in complete], dtype=np.float64)
    values = values.reshape(len(complete), len(lengths), 2)
    return Units(
        complete,
        values,
        [tuple(hashes[k][x] for x in lengths) for k in complete],
        np.asarray(lengths, dtype=np.int64),
        params,
    )


def paired_units(spec: MetricSpec, runs: dict[str, RunFiles]) -> dict[str, Units]:
    """Each model's units of one metric, restricted to the units every model has, in one order; raises if a
    unit's content differs between models (they would not be paired)."""
    data = {name: unit_data(spec, run) for name, run in runs.items()}
    common = set.intersection(*(set(u.ids) for u in data.values()))
    if not common:
        raise ValidationError(f"{spec.key}: no unit common to all models")
    ids = sorted(common)
    out = {name: u.take(ids) for name, u in data.items()}
    ref_name, ref = next(iter(out.items()))
    for name, u in out.items():
        if u.hashes != ref.hashes:
            bad = next(i for i, (a, b) in enumerate(zip(u.hashes, ref.hashes)) if a != b)
            raise ValidationError(
                f"{spec.key}: unit {ids[bad]} holds different documents for {name} and {ref_name} "
                "(the models must share tokenizer, data and seeds)"
            )
        if spec.kind in ("fine", "coarse", "effective"):
            assert u.lengths is not None and ref.lengths is not None  # unit_data gives these kinds their lengths
            if not np.array_equal(u.lengths, ref.lengths):
                raise ValidationError(f"{spec.key}: lengths differ between {name} and {ref_name}")
    return out


# ----------------------------------------------------------------------------------------------- the statistic


def metric_value(spec: MetricSpec, units: Units, idx: np.ndarray | None = None):
    """The metric over the units ``idx`` (an index array; its last axis is one resample, leading axes are
    resamples); all units when ``idx`` is None. Returns a float, or an array of the leading shape of ``idx``.

    perplexity: exp(sum nll / sum tokens) (``per_token.token_weighted_perplexity``; NaN without tokens); mean: the
    mean; fine / coarse: ``per_token.fine_memory_length`` / ``coarse_memory_length`` of the mean curve (a length
    with a NaN accuracy counts as failed, as ``per_token.forgetting_curve_by_length`` does); effective:
    ``gain_map.effective_length_by_depth``, every depth read, as the task does.
    """
    scalar = idx is None
    idx = np.arange(len(units.ids)) if scalar else np.asarray(idx)
    v = units.values[idx]  # idx.shape + value shape
    if spec.kind == "perplexity":
        nll, n = v[..., 0].sum(axis=-1), v[..., 1].sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.where(n > 0, np.exp(nll / np.where(n > 0, n, 1.0)), np.nan)
    elif spec.kind == "mean":
        out = v.mean(axis=-1)
    elif spec.kind in ("fine", "coarse"):
        curve = v.mean(axis=-3)  # [..., lengths, 2]
        flat = curve.reshape(-1, curve.shape[-2], 2)
        p = units.params
        if spec.kind == "fine":
            res = [per_token.fine_memory_length(units.lengths, c[:, 0], p["threshold"], p["rule"]) for c in flat]
        else:
            res = [
                per_token.coarse_memory_length(units.lengths, c[:, 0], c[:, 1], p["margin"], p["rule"]) for c in flat
            ]
        out = np.asarray(res, dtype=np.float64).reshape(curve.shape[:-2])
    elif spec.kind == "effective":
        from ..metrics.gain_map import effective_length_by_depth

        flat = v.reshape(-1, *v.shape[-3:])  # [resamples, documents, lengths, depths]
        rules = {k: units.params[k] for k in ("fraction", "base_minimum", "rule")}
        res = [effective_length_by_depth(units.lengths, g, **rules) for g in flat]
        out = np.asarray(res, dtype=np.float64).reshape(v.shape[:-3])
    else:
        raise ValidationError(f"unknown metric kind {spec.kind!r}")
    return float(out) if scalar else out
