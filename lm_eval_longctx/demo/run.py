"""``lm-eval-longctx demo``: the tasks on the embedded default, offline, through lm-eval's own CLI.

The embedded default is a choice of data and model, not a separate code path. The demo

1. writes the evaluation corpus (``embedded.py``: ``pydoc_data.topics``, which every CPython has) as
   one JSONL under the output folder;
2. runs lm-eval's command-line entry point in this process (``lm_eval.__main__.cli_evaluate``, what
   the ``lm_eval`` console script calls) with the argv a user would type::

       lm_eval run --tasks longppl_govreport,forgetting_curve,retrieval_gain,retrieval_gain_map,longeval_lines --model hf
           --model_args pretrained=<model>,dtype=float32 --device cpu --batch_size N
           --metadata '<budget JSON, data_files = the corpus>' --output_path <out>/results --log_samples
           --include_path <our task folder>

   so the harness prints its progress bars and results tables, saves the results JSON and the
   samples, and our results-saved hook draws the forgetting-curve PNG beside the results;
3. reads the results JSON back and checks the demo's targets (below), writing ``demo_summary.json``.

Only ``--metadata`` (the data file and the budget's sizes) and ``pretrained=`` differ from a real run.
``--include_path`` is lm-eval's explicit route to our YAMLs: the demo then works from a source checkout
too, and with the package's discovery hook installed the folder is not added twice.

The targets say whether the model really uses its context, as the embedded demo model should:
(a) forgetting curve: copy accuracy minus LM accuracy, averaged over the shortest copy lengths, is at
least 0.30; (b) the retrieval gain is positive; (c) LongPPL is below PPL; (d) the fine memory length (copy
accuracy > 0.99) is at least 64 tokens and (e) LongEval accuracy is at least 0.5: the packaged model copies
exactly and looks lines up. A failed target is reported, never raised; ``lm-eval-longctx demo --check`` turns a
failure into exit status 1.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import time
from pathlib import Path
from typing import Any

from .. import output_dirs
from ..data import embedded_corpus

log = logging.getLogger("lm_eval_longctx")

DEFAULT_OUT = "lm_eval_longctx_demo"
SUMMARY_FILE = "demo_summary.json"
REPORT_FILE = "report.html"
CORPUS_FILE = "corpus.jsonl"
CORPUS_PROVENANCE_FILE = "corpus_provenance.json"

# Per budget: ``chars_per_doc`` of the embedded corpus, the harness ``--batch_size``, the ``--metadata``
# sent to every task (each task reads only its own keys; the shared ones, data_files, num_docs, seed,
# mean the same thing everywhere), and the target thresholds. full: every task inside and beyond the demo
# model's copy reach, on 2 CPU cores; ci: the same pipeline with every size cut down, for a CI test. Why these
# sizes, with what was measured: docs/demo-and-known-answer-validation.md ("Why the demo's sizes").
_FULL_METADATA = {
    "evaluator": "self",
    "trunc_len": 512,
    "sliding_window": 256,
    "num_docs": 4,
    "lengths": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    # the lengths double: "geometric" records that, and the PNG draws them on a log axis
    # (explicit lengths replace the grid the spacing would otherwise build)
    "spacing": "geometric",
    "samples_per_length": 8,
    "seed": 0,
    "doc_tokens": 2048,
    "context_lengths": [256, 1024, 4096],
    "depths": [0, 50, 90],
    "num_lines": [10, 20, 40, 80],
    "num_cases": 10,
}
_CI_SIZES = {
    "num_docs": 2,
    "lengths": [16, 64, 256],
    "samples_per_length": 4,
    "doc_tokens": 1024,
    "context_lengths": [128, 512, 2048],
    "num_lines": [5, 10],
    "num_cases": 3,
}
DEMO_BUDGETS: dict[str, dict[str, Any]] = {
    "full": {
        "chars_per_doc": embedded_corpus.DEFAULT_CHARS_PER_DOC,
        "batch_size": 4,
        "metadata": _FULL_METADATA,
        "targets": {"copy_gap_lengths": 3, "copy_gap_min": 0.30, "fine_memory_min": 64, "longeval_acc_min": 0.5},
    },
    "ci": {
        "chars_per_doc": 12_000,
        "batch_size": 4,
        "metadata": {**_FULL_METADATA, **_CI_SIZES},
        "targets": {"copy_gap_lengths": 2, "copy_gap_min": 0.30, "fine_memory_min": 64, "longeval_acc_min": 0.5},
    },
}


class DemoError(RuntimeError):
    """The demo could not run (missing model, harness failure, no results): the message says why."""


# --------------------------------------------------------------------------- the model


def default_model_dir() -> Path:
    from .model import packaged_model_dir

    return Path(packaged_model_dir())


def resolve_model_dir(model_dir=None) -> Path:
    """The checkpoint folder to evaluate: ``model_dir``, else the packaged demo model."""
    path = Path(model_dir) if model_dir is not None else default_model_dir()
    if not (path / "config.json").is_file():
        where = "the packaged demo model" if model_dir is None else "--model"
        raise DemoError(
            f"{where} {path} is not a Hugging Face checkpoint folder (no config.json). "
            + (
                "Rebuild it with `python scripts/make_demo_model.py`, or pass --model DIR."
                if model_dir is None
                else "Pass the folder that holds config.json, the weights and the tokenizer."
            )
        )
    resolved = path.resolve()
    if any(c in str(resolved) for c in ",="):
        # lm-eval splits --model_args on ',' and '=': such a path would be read as other arguments
        raise DemoError(
            f"the model path {resolved} contains ',' or '=', which lm-eval's --model_args cannot "
            "carry; copy or link the checkpoint to a plain path"
        )
    return resolved


# --------------------------------------------------------------------------- the harness call


def budget_metadata(budget: str, corpus_path, extra_metadata: dict | None = None) -> dict:
    """The ``--metadata`` of a budget with the corpus as ``data_files`` (extra keys override)."""
    if budget not in DEMO_BUDGETS:
        raise DemoError(f"unknown budget {budget!r}; known: {sorted(DEMO_BUDGETS)}")
    return {
        **DEMO_BUDGETS[budget]["metadata"],
        "data_files": str(Path(corpus_path).resolve()),
        **(extra_metadata or {}),
    }


def harness_argv(
    model_dir,
    metadata: dict,
    results_dir,
    batch_size: int,
    device: str = "cpu",
    limit: float | None = None,
    tasks=None,
) -> list[str]:
    """The ``lm_eval`` arguments (after the program name) of the demo run (``tasks``: default every task of the
    suite, ``tasks.base.suite_run_names``)."""
    from ..harness.discovery import task_configs_dir
    from ..tasks import base

    argv = [
        "run",
        "--tasks",
        ",".join(base.suite_run_names() if tasks is None else tasks),
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model_dir},dtype=float32",
        "--device",
        device,
        "--batch_size",
        str(batch_size),
        "--metadata",
        json.dumps(metadata),
        "--output_path",
        str(results_dir),
        "--log_samples",
        "--include_path",
        task_configs_dir(),
    ]
    if limit is not None:
        argv += ["--limit", str(int(limit)) if float(limit) == int(limit) else str(limit)]
    return argv


def _offline_environment() -> None:
    """No hub access: set before the hub libraries are imported (they read these once, at import)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def run_harness(argv: list[str]) -> Path:
    """Run lm-eval's CLI entry point in this process with ``argv`` (which names an ``--output_path`` folder); return
    the results JSON it saved there."""
    from ..harness.evaluation import LmEvalRunError, run_cli

    try:
        return run_cli(argv)
    except LmEvalRunError as e:
        raise DemoError(str(e)) from e


# --------------------------------------------------------------------------- reading the results


def _metric_table(task_results: dict) -> dict:
    """``{metric: {"value": v, "stderr": se}}`` from one task's results (keys ``name,filter``)."""
    out = {}
    for key, value in task_results.items():
        if key == "alias" or "," not in key:
            continue
        name, filt = key.split(",", 1)
        if name.endswith("_stderr"):
            continue
        label = name if filt == "none" else f"{name},{filt}"
        out[label] = {"value": value, "stderr": task_results.get(f"{name}_stderr,{filt}")}
    return out


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _value(metrics: dict, name: str):
    v = metrics.get(name, {}).get("value")
    return v if _finite(v) else None


def _curve(metrics: dict) -> list[dict]:
    """Forgetting-curve rows ``{length, copy_acc, lm_acc}`` in length order."""
    rows: dict[int, dict] = {}
    for name, m in metrics.items():
        for what in ("copy_acc", "lm_acc"):
            if name.startswith(what + "@"):
                rows.setdefault(int(name.split("@", 1)[1]), {})[what] = m["value"]
    return [{"length": k, "copy_acc": v.get("copy_acc"), "lm_acc": v.get("lm_acc")} for k, v in sorted(rows.items())]


def _target(name: str, description: str, value, threshold, passed, note: str = "") -> dict:
    return {
        "name": name,
        "description": description,
        "value": value,
        "threshold": threshold,
        "passed": bool(passed),
        **({"note": note} if note else {}),
    }


def _measured_target(name: str, description: str, value, threshold, strict: bool = False) -> dict:
    """A target on one metric: passed when it reaches ``threshold`` (exceeds it when ``strict``)."""
    if value is None:
        return _target(name, description, None, threshold, False, "metric missing or not finite")
    return _target(name, description, value, threshold, value > threshold if strict else value >= threshold)


def check_targets(
    metrics: dict,
    copy_gap_lengths: int = 3,
    copy_gap_min: float = 0.30,
    fine_memory_min: int = 0,
    longeval_acc_min: float = 0.0,
) -> list[dict]:
    """The demo's targets, from ``{task: {metric: {"value", "stderr"}}}``. A missing or non-finite
    metric fails its target (with a note); nothing is raised."""
    targets = []

    curve = [r for r in _curve(metrics.get("forgetting_curve", {})) if _finite(r["copy_acc"]) and _finite(r["lm_acc"])]
    desc = (
        f"forgetting_curve: mean copy_acc - lm_acc over the {copy_gap_lengths} shortest copy lengths >= {copy_gap_min}"
    )
    if len(curve) < copy_gap_lengths:
        targets.append(
            _target(
                "copy_gap", desc, None, copy_gap_min, False, f"only {len(curve)} copy lengths with finite accuracies"
            )
        )
    else:
        rows = curve[:copy_gap_lengths]
        gaps = [r["copy_acc"] - r["lm_acc"] for r in rows]
        gap = sum(gaps) / len(gaps)
        targets.append(
            _target(
                "copy_gap",
                desc,
                gap,
                copy_gap_min,
                gap >= copy_gap_min,
                "per length: " + ", ".join(f"l={r['length']}: {g:+.3f}" for r, g in zip(rows, gaps)),
            )
        )

    if fine_memory_min:
        fine = _value(metrics.get("forgetting_curve", {}), "fine_memory_length")
        description = f"forgetting_curve: fine memory length (copy accuracy > 0.99) >= {fine_memory_min}"
        targets.append(_measured_target("fine_memory_length", description, fine, fine_memory_min))
    if longeval_acc_min:
        acc = _value(metrics.get("longeval_lines_acc", {}), "acc")
        description = f"longeval_lines_acc: accuracy >= {longeval_acc_min}"
        targets.append(_measured_target("longeval_acc", description, acc, longeval_acc_min))
    gain = _value(metrics.get("retrieval_gain", {}), "retrieval_gain")
    targets.append(
        _measured_target("retrieval_gain", "retrieval_gain: nll_without - nll_with > 0", gain, 0.0, strict=True)
    )

    lp = metrics.get("longppl_govreport", {})
    longppl, ppl = _value(lp, "longppl"), _value(lp, "ppl")
    ok = longppl is not None and ppl is not None
    targets.append(
        _target(
            "longppl_below_ppl",
            "longppl_govreport: longppl < ppl",
            longppl,
            ppl,
            ok and longppl < ppl,
            "" if ok else "longppl or ppl missing or not finite",
        )
    )
    return targets


HEADLINES = {
    "longppl_govreport": ["longppl", "ppl", "key_token_fraction"],
    "forgetting_curve": ["fine_memory_length", "coarse_memory_length", "n_failed_lengths"],
    "retrieval_gain": ["retrieval_gain", "nll_with", "nll_without"],
    "retrieval_gain_map": ["gain", "effective_length", "effective_length_abs"],
    "longeval_lines_ppl": ["answer_ppl", "non_answer_ppl"],
    "longeval_lines_acc": ["acc"],
}


def summarize(results: dict, budget: str = "full") -> dict:
    """Headline numbers, every metric, the non-finite ones and the targets of a results dict."""
    from ..tasks import base

    per_task = {task: _metric_table(res) for task, res in (results.get("results") or {}).items()}
    per_task = {task: m for task, m in per_task.items() if m}  # a group's row holds only its alias
    missing = [t for t in base.suite_task_names() if t not in per_task]
    # Memory lengths are threshold statistics: their stderr is "N/A" by design, never a failure.
    # a text note (skipped_lengths) counts only when it names something: "none" is the normal run
    non_finite = [
        f"{task}/{name}"
        for task, ms in per_task.items()
        for name, m in ms.items()
        if not _finite(m["value"]) and m["value"] != "none"
    ]
    headlines = {
        task: {name: per_task[task][name]["value"] for name in names if name in per_task[task]}
        for task, names in HEADLINES.items()
        if task in per_task
    }
    for task, metrics in per_task.items():
        curve = _curve(metrics)
        if curve:  # per-length copy and LM accuracies: a forgetting curve
            headlines.setdefault(task, {})["curve"] = curve
    t = DEMO_BUDGETS.get(budget, DEMO_BUDGETS["full"])["targets"]
    targets = check_targets(
        per_task, t["copy_gap_lengths"], t["copy_gap_min"], t.get("fine_memory_min", 0), t.get("longeval_acc_min", 0.0)
    )
    return {
        "headlines": headlines,
        "metrics": per_task,
        "missing_tasks": missing,
        "non_finite": non_finite,
        "targets": targets,
        "targets_passed": all(x["passed"] for x in targets),
    }


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def format_summary(summary: dict) -> str:
    lines = ["", f"lm_eval_longctx demo ({summary['budget']} budget), model {summary['model_dir']}"]
    for task, heads in summary["headlines"].items():
        parts = [f"{k} = {_fmt(v)}" for k, v in heads.items() if k != "curve"]
        lines.append(f"  {task}: " + ", ".join(parts))
        for row in heads.get("curve", []):
            lines.append(
                f"      l = {row['length']:>5}: copy_acc {_fmt(row['copy_acc'])}, lm_acc {_fmt(row['lm_acc'])}"
            )
    if summary["missing_tasks"]:
        lines.append(f"  MISSING tasks in the results: {', '.join(summary['missing_tasks'])}")
    if summary["non_finite"]:
        lines.append(f"  NON-FINITE metrics: {', '.join(summary['non_finite'])}")
    lines.append("targets:")
    for tg in summary["targets"]:
        mark = "PASS" if tg["passed"] else "FAIL"
        note = f"  [{tg['note']}]" if tg.get("note") else ""
        lines.append(
            f"  {mark}  {tg['description']}: value {_fmt(tg['value'])}, threshold {_fmt(tg['threshold'])}{note}"
        )
    lines.append(
        f"wall time: {summary['wall_seconds']['total']:.1f} s (harness {summary['wall_seconds']['harness']:.1f} s)"
    )
    files = summary["files"]
    lines.append(f"results: {files['results_json']}")
    if files.get("forgetting_curve_png"):
        lines.append(f"forgetting curve: {files['forgetting_curve_png']}")
    if files.get("retrieval_gain_map_png"):
        lines.append(f"retrieval-gain map: {files['retrieval_gain_map_png']}")
    if files.get("report_html"):
        lines.append(f"report card: {files['report_html']}")
    lines.append(f"summary: {files['summary']}")
    return "\n".join(lines)


def write_report_card(results_file: Path, out_html: Path, metadata: dict) -> str | None:
    """The report card of the run (``lm-eval-longctx report``), with the key-token viewer when the run exported its
    tokens; its path, or None (with a warning) when it could not be written."""
    from ..data import export_files
    from ..report.card.report import build_report_card
    from ..report.results import UnusableInput

    exports = []
    if metadata.get("export_tokens"):
        try:
            exports = [export_files.task_folder(metadata["export_tokens"], "longppl_govreport")]
        except FileNotFoundError:
            pass  # no longppl_govreport export (--limit 0, or another task list): the card has no viewer
    try:
        build_report_card([results_file], out_html, exports=exports)
    except UnusableInput as e:
        log.warning("no report card: %s", e)
        return None
    return str(out_html)


# --------------------------------------------------------------------------- the demo


def run_demo(
    out_dir=DEFAULT_OUT,
    model_dir=None,
    budget: str = "full",
    extra_metadata: dict | None = None,
    limit: float | None = None,
    device: str = "cpu",
    batch_size: int | None = None,
    echo: bool = True,
) -> dict:
    """Write the corpus under ``out_dir``, run the tasks through lm-eval's CLI, check the targets.

    ``model_dir``: a checkpoint folder (default: the packaged demo model). ``extra_metadata`` overrides
    the budget's ``--metadata`` keys (e.g. ``{"beta": -20}`` for a random model, which is never
    confident enough for the default key-token threshold). Returns the summary, also written to
    ``<out_dir>/demo_summary.json`` and (with ``echo``) printed.
    """
    t0 = time.perf_counter()
    _offline_environment()
    if budget not in DEMO_BUDGETS:
        raise DemoError(f"unknown budget {budget!r}; known: {sorted(DEMO_BUDGETS)}")
    cfg = DEMO_BUDGETS[budget]
    model = resolve_model_dir(model_dir)
    out = output_dirs.claim(Path(out_dir).resolve(), "the demo")

    texts = embedded_corpus.embedded_documents(chars_per_doc=cfg["chars_per_doc"])
    metadata = budget_metadata(budget, out / CORPUS_FILE, extra_metadata)
    if int(metadata.get("num_docs", 1)) > len(texts):
        raise DemoError(
            f"the {budget} budget asks for {metadata['num_docs']} documents; the embedded corpus "
            f"has {len(texts)} of >= {cfg['chars_per_doc']} characters"
        )
    corpus = embedded_corpus.write_corpus(out / CORPUS_FILE, texts)
    output_dirs.write_atomically(out / CORPUS_PROVENANCE_FILE, json.dumps(corpus, indent=2) + "\n")

    argv = harness_argv(model, metadata, out / "results", batch_size or cfg["batch_size"], device, limit)
    if echo:
        print("lm_eval " + shlex.join(argv), flush=True)
    t1 = time.perf_counter()
    results_file = run_harness(argv)
    harness_seconds = time.perf_counter() - t1

    results = json.loads(results_file.read_text(encoding="utf-8"))
    summary = {"budget": budget, "model_dir": str(model), **summarize(results, budget)}
    png = results_file.with_name(f"{results_file.stem}_forgetting_curve.png")
    map_png = results_file.with_name(f"{results_file.stem}_retrieval_gain_map.png")
    samples = sorted(
        str(p) for p in results_file.parent.glob(f"samples_*_{results_file.stem[len('results_') :]}.jsonl")
    )
    summary["files"] = {
        "results_json": str(results_file),
        "samples": samples,
        "forgetting_curve_png": str(png) if png.is_file() else None,
        "retrieval_gain_map_png": str(map_png) if map_png.is_file() else None,
        "corpus": corpus["path"],
        "corpus_provenance": str(out / CORPUS_PROVENANCE_FILE),
        "summary": str(out / SUMMARY_FILE),
        "report_html": write_report_card(results_file, out / REPORT_FILE, metadata),
    }
    summary["corpus"] = {k: corpus[k] for k in ("source", "python_version", "n_docs", "texts_sha256")}
    summary["command"] = "lm_eval " + shlex.join(argv)
    summary["metadata"] = metadata
    summary["wall_seconds"] = {"total": round(time.perf_counter() - t0, 2), "harness": round(harness_seconds, 2)}
    output_dirs.write_atomically(out / SUMMARY_FILE, json.dumps(summary, indent=2, default=str) + "\n")
    if echo:
        print(format_summary(summary), flush=True)
    return summary
