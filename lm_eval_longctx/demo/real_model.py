"""Real-model validation: the five tasks on a real pretrained checkpoint, judged against what its model card says.

Beside the known-answer validation (``known_answer.py``: models whose memory is set by construction), this runs the
suite on a real checkpoint, SmolLM2-135M-Instruct (``lm-eval-longctx from-gguf smollm2-135m-instruct DIR``), at
lengths on both sides of its trained window W (8,192 positions, its config and GGUF metadata), and checks what the
model card and the papers lead one to expect:

* the retrieval-gain map's effective length equals W, and the mean gain at every context length beyond W is below 0;
* the forgetting curve's copy accuracy stays above LM accuracy at every copy length whose sample fits W
  (2 l + 3 <= W) and falls, below its value at the longest of those, at every length whose sample does not;
* LongPPL is below PPL (documents within W);
* the retrieval gain is positive on documents within W and not positive on documents beyond it;
* LongEval accuracy and answer-token PPL, with and without the chat template: reported, no expectation.

The suite runs through lm-eval's own command line (``demo.run.run_harness``), three times: ``within`` (documents
shorter than W), ``beyond`` (documents longer than W, ``allow_beyond_max_length``) and ``chat`` (LongEval with
``--apply_chat_template``: the document tasks refuse chat options). ``judge`` turns what the runs measured into the
table of expectation / measured / verdict; it reads only the harness's files, so a finished run can be judged
again against another window (``--from-run``), which is how a misdeclared window is shown to fail.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import output_dirs
from ..data import embedded_corpus
from . import known_answer

log = logging.getLogger("lm_eval_longctx")

REPORT_JSON = "real_model_validation.json"
REPORT_MD = "real_model_validation.md"
REPORT_HTML = "report.html"
CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054

RUN_WITHIN, RUN_BEYOND, RUN_CHAT = "within", "beyond", "chat"


@dataclass(frozen=True)
class HarnessRun:
    """One ``lm_eval`` call of the validation: its tasks, corpus (characters per document) and ``--metadata``."""

    tasks: tuple[str, ...]
    metadata: dict
    chars_per_doc: int | None = None  # None: the run reads no corpus (LongEval generates its cases)
    chat: bool = False


@dataclass(frozen=True)
class RealModelProfile:
    """A real checkpoint, what its model card declares, and the runs that test it at each budget."""

    name: str
    title: str
    trained_window: int
    window_source: str
    card: str
    budgets: dict[str, dict[str, HarnessRun]] = field(default_factory=dict)


# Sizes, and what each costs on 2 CPU cores: docs/real-models.md. The documents are cut from the embedded corpus
# (pydoc_data.topics of Python 3.11), about 4.1 characters per SmolLM2 token: 12,000 characters give documents of
# 2.6k-3.6k tokens, 30,000 characters 6.9k-7.7k (inside W: LongPPL scores every token of a document), 56,000
# characters at least 13.2k and 72,000 characters at least 17.1k (room for the ladder's longest L + q + r).
_LONGEVAL = {"over_length": "skip"}
SMOLLM2 = RealModelProfile(
    name="smollm2-135m-instruct",
    title="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)",
    trained_window=8192,
    window_source="model card: max_position_embeddings 8192 in its config; GGUF llama.context_length 8192, "
    "general.finetune 8k-lc100k-mix1-ep2",
    card="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    budgets={
        "full": {
            RUN_WITHIN: HarnessRun(
                ("longppl_govreport", "retrieval_gain", "longeval_lines"),
                {
                    "evaluator": "self",
                    "num_docs": 3,
                    # K = 4096 (the paper's, for 16k-32k documents) left no key token in these 7k-token documents
                    # (largest gain 1.09 nats): docs/real-models.md
                    "trunc_len": 1024,
                    "sliding_window": 512,
                    "doc_tokens": 6144,
                    "n_queries": 4,
                    "anchor_min": 0.1,
                    "anchor_max": 0.9,
                    "num_lines": [20, 100, 200],
                    "num_cases": 3,
                    **_LONGEVAL,
                },
                chars_per_doc=30_000,
            ),
            RUN_BEYOND: HarnessRun(
                ("forgetting_curve", "retrieval_gain", "retrieval_gain_map"),
                {
                    "allow_beyond_max_length": True,
                    "num_docs": 2,
                    "context_lengths": [1024, 2048, 4096, 8192, 12288, 16384],
                    "depths": [10, 50, 90],
                    "anchors_per_cell": 2,
                    "doc_tokens": 12288,
                    "n_queries": 4,
                    "anchor_min": 0.1,
                    "anchor_max": 0.9,
                    "lengths": [256, 1024, 2048, 4000, 5000, 6000],
                    "samples_per_length": 2,
                    "seed": 0,
                },
                chars_per_doc=72_000,
            ),
            RUN_CHAT: HarnessRun(
                ("longeval_lines",), {"num_lines": [20, 100, 200], "num_cases": 3, **_LONGEVAL}, chat=True
            ),
        },
        "ci": {
            RUN_WITHIN: HarnessRun(
                ("longppl_govreport", "retrieval_gain", "longeval_lines"),
                {
                    "evaluator": "self",
                    "num_docs": 2,
                    "trunc_len": 1024,
                    "sliding_window": 512,
                    "doc_tokens": 2048,
                    "n_queries": 3,
                    "anchor_min": 0.1,
                    "anchor_max": 0.9,
                    "num_lines": [20],
                    "num_cases": 3,
                    **_LONGEVAL,
                },
                chars_per_doc=12_000,
            ),
            RUN_BEYOND: HarnessRun(
                ("forgetting_curve", "retrieval_gain", "retrieval_gain_map"),
                {
                    "allow_beyond_max_length": True,
                    "num_docs": 2,
                    "context_lengths": [2048, 8192, 12288],
                    "depths": [10, 50, 90],
                    "anchors_per_cell": 1,
                    "doc_tokens": 12288,
                    "n_queries": 2,
                    "anchor_min": 0.1,
                    "anchor_max": 0.9,
                    "lengths": [512, 6000],
                    "samples_per_length": 2,
                    "seed": 0,
                },
                chars_per_doc=56_000,
            ),
            RUN_CHAT: HarnessRun(("longeval_lines",), {"num_lines": [20], "num_cases": 3, **_LONGEVAL}, chat=True),
        },
    },
)
PROFILES = {p.name: p for p in (SMOLLM2,)}


class RealModelValidationError(ValueError):
    """The validation cannot run or judge (unknown profile or budget, a run without the files it needs)."""


# ----------------------------------------------------------------------------------------------- statistics


def bootstrap_ci(stat: Callable[[np.ndarray], np.ndarray], n_units: int, seed: int = SEED) -> tuple | None:
    """Percentile CI of ``stat`` over units resampled with replacement (``stat(idx)``: last axis one resample);
    None with fewer than 2 units."""
    if n_units < 2:
        return None
    ci = known_answer.paired_bootstrap_difference(
        stat, lambda i: np.zeros(np.shape(i)[:-1]), n_units, N_RESAMPLES, CONFIDENCE, seed
    )
    return (ci["low"], ci["high"])


def _num(x, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, float) and x == int(x) and abs(x) >= 1000:
        return str(int(x))
    return f"{x:.{digits}g}"


def _ci_text(ci) -> str:
    return "n/a (1 unit)" if ci is None else f"[{_num(ci[0])}, {_num(ci[1])}]"


def _stderr_ci(value, stderr) -> tuple | None:
    if not isinstance(stderr, (int, float)) or isinstance(stderr, bool) or not math.isfinite(stderr):
        return None
    if stderr <= 0:
        return None
    return (value - Z95 * stderr, value + Z95 * stderr)


# ----------------------------------------------------------------------------------------------- what was measured


def _results_value(run: known_answer.RunFiles, task: str, metric: str):
    v = ((run.results.get("results") or {}).get(task) or {}).get(f"{metric},none")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _results_stderr(run: known_answer.RunFiles, task: str, metric: str):
    return _results_value(run, task, f"{metric}_stderr")


def _settings(run: known_answer.RunFiles, task: str) -> dict:
    return known_answer.task_settings(run.results, task)


def _spec(task: str, fld: str, kind: str) -> known_answer.MetricSpec:
    return known_answer.MetricSpec(fld, fld, task, fld, kind, True, "not stated")


def measure_map(run: known_answer.RunFiles) -> dict:
    """The map's ladder, mean gain per length with its CI, per-document curves and effective length."""
    task = "retrieval_gain_map"
    units = known_answer.unit_data(_spec(task, "effective_length", "effective"), run)
    lengths = [int(x) for x in units.lengths]
    per_length = []
    for j, length in enumerate(lengths):
        metric = next((m for m in _metric_names(run, task) if _is_length_metric(m, length)), None)
        if metric is None:
            raise RealModelValidationError(f"{run.results_file}: no mean gain of context length {length}")
        value = _results_value(run, task, metric)
        ci = bootstrap_ci(lambda i, j=j: units.values[i, j].mean(axis=-1), len(units.ids))
        per_length.append({"length": length, "gain": value, "ci": ci, "metric": metric})
    effective = _results_value(run, task, "effective_length")
    ci = bootstrap_ci(
        lambda i: known_answer.metric_value(_spec(task, "effective_length", "effective"), units, i), len(units.ids)
    )
    return {
        "lengths": lengths,
        "per_length": per_length,
        "effective_length": effective,
        "effective_length_ci": ci,
        "effective_rule": dict(units.params),
        "n_documents": len(units.ids),
    }


def _metric_names(run: known_answer.RunFiles, task: str) -> list[str]:
    res = (run.results.get("results") or {}).get(task) or {}
    return [k.split(",", 1)[0] for k in res if "," in k and "_stderr" not in k]


def _is_length_metric(name: str, length: int) -> bool:
    if not name.startswith("gain@L") or "_d" in name:
        return False
    try:
        return int(name[len("gain@L") :]) == length
    except ValueError:
        return False


def measure_curve(run: known_answer.RunFiles) -> dict:
    """The forgetting curve per copy length (copy and LM accuracy, the sample length 2 l + 3), per-sample arrays."""
    task = "forgetting_curve"
    units = known_answer.unit_data(_spec(task, "fine_memory_length", "fine"), run)
    lengths = [int(x) for x in units.lengths]
    rows = []
    for j, length in enumerate(lengths):
        copy = float(units.values[:, j, 0].mean())
        lm = float(units.values[:, j, 1].mean())
        rows.append({"length": length, "sample_tokens": 2 * length + 3, "copy_acc": copy, "lm_acc": lm})
    return {
        "rows": rows,
        "lengths": lengths,
        "values": units.values,  # [samples, lengths, (copy, lm)]
        "n_samples": len(units.ids),
        "fine_memory_length": _results_value(run, task, "fine_memory_length"),
        "coarse_memory_length": _results_value(run, task, "coarse_memory_length"),
    }


def measure_longppl(run: known_answer.RunFiles) -> dict:
    task = "longppl_govreport"
    lp = known_answer.unit_data(_spec(task, "longppl", "perplexity"), run)
    pp = known_answer.unit_data(_spec(task, "ppl", "perplexity"), run)
    ids = sorted(set(lp.ids) & set(pp.ids))
    lp, pp = lp.take(ids), pp.take(ids)
    spec_lp, spec_pp = _spec(task, "longppl", "perplexity"), _spec(task, "ppl", "perplexity")
    ci = bootstrap_ci(
        lambda i: known_answer.metric_value(spec_lp, lp, i) - known_answer.metric_value(spec_pp, pp, i), len(ids)
    )
    s = _settings(run, task)
    return {
        "longppl": _results_value(run, task, "longppl"),
        "ppl": _results_value(run, task, "ppl"),
        "difference_ci": ci,
        "n_documents": len(ids),
        "trunc_len": s.get("trunc_len"),
        "sliding_window": s.get("sliding_window"),
        "tokens": [int(x) for x in pp.values[:, 1]],
    }


def measure_gain(run: known_answer.RunFiles) -> dict:
    task = "retrieval_gain"
    units = known_answer.unit_data(_spec(task, "retrieval_gain", "mean"), run)
    s = _settings(run, task)
    doc, q, r = int(s["doc_tokens"]), int(s["query_tokens"]), int(s["answer_tokens"])
    value = _results_value(run, task, "retrieval_gain")
    return {
        "doc_tokens": doc,
        "sequence_tokens": doc + q + r + 1,  # the document, Q, A and at most one BOS
        "gain": value,
        "ci": bootstrap_ci(lambda i: units.values[i].mean(axis=-1), len(units.ids)),
        "n_documents": len(units.ids),
    }


def measure_longeval(run: known_answer.RunFiles, chat_template: bool) -> dict:
    """LongEval accuracy (with its CI, value ± 1.96 stderr) and answer-token PPL, overall and per number of lines."""
    acc = _results_value(run, "longeval_lines_acc", "acc")
    out: dict = {
        "chat_template": chat_template,
        "acc": acc,
        "acc_ci": _stderr_ci(acc, _results_stderr(run, "longeval_lines_acc", "acc")) if acc is not None else None,
        "n_cases": len(run.samples.get("longeval_lines_acc", [])),
    }
    for m in ("answer_ppl", "non_answer_ppl"):
        out[m] = _results_value(run, "longeval_lines_ppl", m)
    sizes = []
    for name in _metric_names(run, "longeval_lines_acc"):
        suffix = name[len("acc_") :]
        if name.startswith("acc_") and suffix.isdigit():
            sizes.append(
                {
                    "num_lines": int(suffix),
                    "acc": _results_value(run, "longeval_lines_acc", name),
                    "prompt_tokens": _results_value(run, "longeval_lines_acc", f"prompt_tokens_{suffix}"),
                    "answer_ppl": _results_value(run, "longeval_lines_ppl", f"answer_ppl_{suffix}"),
                }
            )
    out["sizes"] = sorted(sizes, key=lambda x: x["num_lines"])
    return out


# ----------------------------------------------------------------------------------------------- the verdicts


def _row(key, expectation, source, measured, ci, verdict, note=""):
    return {
        "key": key,
        "expectation": expectation,
        "source": source,
        "measured": measured,
        "ci": list(ci) if ci is not None else None,
        "verdict": verdict,
        **({"note": note} if note else {}),
    }


def _pass(ok: bool) -> str:
    return "pass" if ok else "FAIL"


CARD = "model card"
FC_PAPER = "Forgetting Curve (Liu et al., EMNLP 2024)"
MAP_RULE = "retrieval-gain map, NoLiMa's relative rule (docs/tasks/retrieval_gain_map.md)"
LONGPPL_PAPER = "LongPPL (Fang et al., ICLR 2025)"


def judge(measured: dict, window: int) -> list[dict]:
    """The table of expectations for a model whose trained window is ``window``, from ``measure_runs``' output.

    Pure: no model, no harness. Every expectation is a row; a row whose data cannot test it (no length beyond the
    window, a task missing) fails, it never passes by default. LongEval rows are reported, not judged."""
    rows = []
    w = int(window)

    m = measured.get("map")
    if m is None:
        rows.append(_row("map_effective_length", f"effective length = {w}", CARD, "not run", None, "FAIL"))
        rows.append(_row("map_gain_beyond", f"gain < 0 at L > {w}", MAP_RULE, "not run", None, "FAIL"))
    else:
        eff = m["effective_length"]
        note = "" if w in m["lengths"] else f"{w} is not a rung of the ladder {m['lengths']}"
        rows.append(
            _row(
                "map_effective_length",
                f"retrieval-gain map: effective length = the trained window, {w}",
                f"{CARD} (window); {MAP_RULE}",
                f"{_num(eff)} (ladder {', '.join(str(x) for x in m['lengths'])}; {m['n_documents']} documents)",
                m["effective_length_ci"],
                _pass(eff is not None and int(eff) == w and not note),
                note,
            )
        )
        beyond = [p for p in m["per_length"] if p["length"] > w]
        ok = bool(beyond) and all(_below_zero(p["gain"], p["ci"]) for p in beyond)
        rows.append(
            _row(
                "map_gain_beyond",
                f"retrieval-gain map: mean gain below 0 at every L > {w} (CI above 0 excluded)",
                f"{CARD} (window); RoPE without extension does not reach past its trained positions",
                "; ".join(f"L={p['length']}: {_num(p['gain'])} {_ci_text(p['ci'])}" for p in beyond)
                or "no context length beyond the window",
                beyond[0]["ci"] if len(beyond) == 1 else None,
                _pass(ok),
                "" if beyond else "the ladder has no rung beyond the window",
            )
        )

    c = measured.get("curve")
    if c is None:
        rows.append(_row("curve_within", "copy > LM within the window", FC_PAPER, "not run", None, "FAIL"))
        rows.append(_row("curve_falls_beyond", "copy falls beyond the window", FC_PAPER, "not run", None, "FAIL"))
    else:
        rows.extend(_judge_curve(c, w))

    lp = measured.get("longppl")
    if lp is None:
        rows.append(_row("longppl_below_ppl", "LongPPL < PPL", LONGPPL_PAPER, "not run", None, "FAIL"))
    else:
        inside = max(lp["tokens"], default=0) <= w
        ok = lp["longppl"] is not None and lp["ppl"] is not None and lp["longppl"] < lp["ppl"]
        ci = lp["difference_ci"]
        ok = ok and (ci is None or ci[1] < 0) and inside
        rows.append(
            _row(
                "longppl_below_ppl",
                "LongPPL below PPL on documents within the window (CI of LongPPL - PPL below 0)",
                f"{LONGPPL_PAPER}: key tokens are those the long context predicts",
                f"LongPPL {_num(lp['longppl'])}, PPL {_num(lp['ppl'])} ({lp['n_documents']} documents of "
                f"{min(lp['tokens'], default=0)}-{max(lp['tokens'], default=0)} tokens; K = {lp['trunc_len']}, "
                f"d = {lp['sliding_window']}); CI of the difference",
                ci,
                _pass(ok),
                "" if inside else f"a document is longer than {w} tokens",
            )
        )

    gains = measured.get("gain") or []
    within = [g for g in gains if g["sequence_tokens"] <= w]
    beyond_g = [g for g in gains if g["sequence_tokens"] > w]
    rows.append(
        _row(
            "gain_within_positive",
            f"retrieval gain positive on documents within the window (sequence <= {w} tokens; CI above 0)",
            f"{CARD} (window)",
            "; ".join(_gain_text(g) for g in within) or "no run within the window",
            within[0]["ci"] if len(within) == 1 else None,
            _pass(bool(within) and all(_above_zero(g["gain"], g["ci"]) for g in within)),
        )
    )
    rows.append(
        _row(
            "gain_beyond_not_positive",
            f"retrieval gain not positive on documents beyond the window (sequence > {w} tokens; value <= 0)",
            f"{CARD} (window)",
            "; ".join(_gain_text(g) for g in beyond_g) or "no run beyond the window",
            beyond_g[0]["ci"] if len(beyond_g) == 1 else None,
            _pass(bool(beyond_g) and all(g["gain"] is not None and g["gain"] <= 0 for g in beyond_g)),
        )
    )

    for key, le in (("longeval_raw", measured.get("longeval_raw")), ("longeval_chat", measured.get("longeval_chat"))):
        label = "with the chat template" if key.endswith("chat") else "without the chat template (raw prompt)"
        if le is None:
            rows.append(_row(key, f"LongEval {label}: reported", "none stated", "not run", None, "reported"))
            continue
        per_size = "; ".join(
            f"{s['num_lines']} lines (~{_num(s['prompt_tokens'])} tokens): acc {_num(s['acc'])}, "
            f"answer PPL {_num(s['answer_ppl'])}"
            for s in le["sizes"]
        )
        rows.append(
            _row(
                key,
                f"LongEval lines {label}: reported (the model card states no retrieval figure)",
                "none stated; the instruct model is meant to be prompted with its template",
                f"accuracy {_num(le['acc'])} over {le['n_cases']} cases, answer-token PPL {_num(le['answer_ppl'])}, "
                f"non-answer PPL {_num(le['non_answer_ppl'])} ({per_size})",
                le["acc_ci"],
                "reported",
            )
        )
    return rows


def _above_zero(value, ci) -> bool:
    return value is not None and value > 0 and (ci is None or ci[0] > 0)


def _below_zero(value, ci) -> bool:
    return value is not None and value < 0 and (ci is None or ci[1] < 0)


def _gain_text(g: dict) -> str:
    return (
        f"{_num(g['gain'])} nats {_ci_text(g['ci'])} at {g['doc_tokens']}-token documents "
        f"({g['sequence_tokens']}-token sequences, {g['n_documents']} documents)"
    )


def _judge_curve(c: dict, w: int) -> list[dict]:
    values = c["values"]  # [samples, lengths, 2]
    n = c["n_samples"]
    fits = [j for j, length in enumerate(c["lengths"]) if 2 * length + 3 <= w]
    over = [j for j, length in enumerate(c["lengths"]) if 2 * length + 3 > w]
    parts, ok = [], bool(fits)
    for j in fits:
        diff = float((values[:, j, 0] - values[:, j, 1]).mean())
        ci = bootstrap_ci(lambda i, j=j: (values[i, j, 0] - values[i, j, 1]).mean(axis=-1), n)
        ok = ok and _above_zero(diff, ci)
        r = c["rows"][j]
        parts.append(
            f"l={r['length']}: copy {_num(r['copy_acc'])} - LM {_num(r['lm_acc'])} = {_num(diff)} {_ci_text(ci)}"
        )
    rows = [
        _row(
            "curve_within",
            f"forgetting curve: copy accuracy above LM accuracy at every copy length whose sample fits the window "
            f"(2l + 3 <= {w}; CI of copy - LM above 0)",
            f"{FC_PAPER}: a model copies what lies inside its context",
            "; ".join(parts) or "no copy length within the window",
            None,
            _pass(ok),
        )
    ]
    if fits and over:
        jw = fits[-1]
        rw = c["rows"][jw]
        parts, ok, cis = [], True, []
        for jb in over:
            diff = float((values[:, jb, 0] - values[:, jw, 0]).mean())
            ci = bootstrap_ci(lambda i, jb=jb: (values[i, jb, 0] - values[i, jw, 0]).mean(axis=-1), n)
            ok = ok and _below_zero(diff, ci)
            cis.append(ci)
            rb = c["rows"][jb]
            parts.append(
                f"l={rb['length']} ({rb['sample_tokens']} tokens): {_num(rb['copy_acc'])}, {_num(diff)} {_ci_text(ci)}"
            )
        measured = (
            f"copy accuracy {_num(rw['copy_acc'])} at l={rw['length']} ({rw['sample_tokens']} tokens), the longest "
            "within; beyond, its value and change: " + "; ".join(parts)
        )
        rows.append(
            _row(
                "curve_falls_beyond",
                f"forgetting curve: copy accuracy falls at every copy length whose sample exceeds the window "
                f"(2l + 3 > {w}), below its value at the longest length within (CI of the change below 0)",
                f"{CARD} (window); {FC_PAPER}",
                measured,
                cis[0] if len(cis) == 1 else None,
                _pass(ok),
            )
        )
    else:
        rows.append(
            _row(
                "curve_falls_beyond",
                f"forgetting curve: copy accuracy falls once the sample exceeds the window (2l + 3 > {w})",
                f"{CARD} (window); {FC_PAPER}",
                "no copy length " + ("beyond" if not over else "within") + " the window",
                None,
                "FAIL",
            )
        )
    return rows


def failed(rows: list[dict]) -> list[str]:
    return [r["key"] for r in rows if r["verdict"] == "FAIL"]


# ----------------------------------------------------------------------------------------------- reading the runs


def read_runs(results_files: dict[str, str]) -> dict[str, known_answer.RunFiles]:
    return {name: known_answer.read_run(path) for name, path in results_files.items()}


def measure_runs(runs: dict[str, known_answer.RunFiles]) -> dict:
    """What the validation's runs measured (``judge``'s input), from their results and samples files."""
    out: dict = {"gain": []}
    for name, run in runs.items():
        for task in sorted(set(run.results.get("results") or {}) & set(MEASURES)):
            MEASURES[task](out, name, run)
    out["gain"].sort(key=lambda g: g["sequence_tokens"])
    return out


def _put_longeval(out: dict, name: str, run: known_answer.RunFiles) -> None:
    chat = name == RUN_CHAT
    out["longeval_chat" if chat else "longeval_raw"] = measure_longeval(run, chat)


# task in a run's results -> how its measurement goes into ``measure_runs``' output
MEASURES: dict[str, Callable[[dict, str, known_answer.RunFiles], None]] = {
    "retrieval_gain_map": lambda out, name, run: out.update(map=measure_map(run)),
    "forgetting_curve": lambda out, name, run: out.update(curve=measure_curve(run)),
    "longppl_govreport": lambda out, name, run: out.update(longppl=measure_longppl(run)),
    "retrieval_gain": lambda out, name, run: out["gain"].append({"run": name, **measure_gain(run)}),
    "longeval_lines_acc": _put_longeval,
}


# ----------------------------------------------------------------------------------------------- the table


def format_table(rows: list[dict]) -> str:
    head = ["expectation", "source", "measured", "95% CI", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---|---|"]
    for r in rows:
        ci = "—" if r["ci"] is None else f"[{_num(r['ci'][0])}, {_num(r['ci'][1])}]"
        note = f" ({r['note']})" if r.get("note") else ""
        cells = [r["expectation"], r["source"], r["measured"] + note, ci, r["verdict"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def format_report(report: dict) -> str:
    rows = report["rows"]
    bad = failed(rows)
    lines = [
        f"## Real-model validation: {report['title']} ({report['budget']} budget)",
        "",
        f"Trained window W = {report['window']} ({report['window_source']}). CIs: percentile bootstrap over "
        f"documents / samples ({N_RESAMPLES} resamples, seed {SEED}); LongEval accuracy: value ± 1.96 stderr.",
        "",
        format_table(rows).rstrip(),
        "",
        f"Expectations met: {sum(r['verdict'] == 'pass' for r in rows)} of "
        f"{sum(r['verdict'] != 'reported' for r in rows)}" + (f"; failed: {', '.join(bad)}" if bad else "") + ".",
    ]
    w = report.get("wall_seconds")
    if w:
        lines.append(
            "Wall time: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in w.items())
            + "; CPU time: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in report.get("cpu_seconds", {}).items())
            + "."
        )
    if report.get("report_html"):
        lines.append(f"Report card: {report['report_html']}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- running


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_validation(
    model_dir,
    out_dir,
    profile: str = SMOLLM2.name,
    budget: str = "ci",
    window: int | None = None,
    device: str = "cpu",
    batch_size: int = 1,
    echo: bool = True,
    log_fn=print,
) -> dict:
    """Run the profile's harness runs on ``model_dir`` into ``out_dir``, judge them against ``window`` (default:
    the profile's trained window), write the JSON, the Markdown table and the report card; return the report."""
    from . import gguf_checkpoint
    from . import run as demo

    prof = _profile(profile)
    if budget not in prof.budgets:
        raise RealModelValidationError(f"unknown budget {budget!r}; known: {sorted(prof.budgets)}")
    model = demo.resolve_model_dir(model_dir)
    if any(hr.chat for hr in prof.budgets[budget].values()) and not has_chat_template(model):
        raise RealModelValidationError(
            f"{model} has no chat template (chat_template.jinja, or chat_template in tokenizer_config.json), "
            "which the LongEval run with --apply_chat_template needs"
        )
    conversion = None
    if (model / gguf_checkpoint.CONVERSION_FILE).is_file():
        conversion = gguf_checkpoint.verify_checkpoint(model)
    out = output_dirs.claim(Path(out_dir).resolve(), "the real-model validation")
    demo._offline_environment()
    t0, c0 = time.perf_counter(), _cpu_seconds()
    files, commands, wall, cpu = {}, {}, {}, {}
    for name, hr in prof.budgets[budget].items():
        t1, c1 = time.perf_counter(), _cpu_seconds()
        metadata = dict(hr.metadata)
        if hr.chars_per_doc is not None:
            corpus = out / f"corpus_{name}.jsonl"
            texts = embedded_corpus.embedded_documents(chars_per_doc=hr.chars_per_doc)
            embedded_corpus.write_corpus(corpus, texts)
            metadata["data_files"] = str(corpus)
        argv = demo.harness_argv(model, metadata, out / "runs" / name, batch_size, device, tasks=hr.tasks)
        if hr.chat:
            argv.append("--apply_chat_template")
        commands[name] = "lm_eval " + shlex.join(argv)
        if echo:
            log_fn(commands[name])
        files[name] = str(demo.run_harness(argv))
        wall[name], cpu[name] = round(time.perf_counter() - t1, 1), round(_cpu_seconds() - c1, 1)
    report = judge_files(files, prof, window, budget)
    card = _write_card(files, out / REPORT_HTML, prof)
    wall["total"], cpu["total"] = round(time.perf_counter() - t0, 1), round(_cpu_seconds() - c0, 1)
    report.update(
        {
            "model_dir": str(model),
            "conversion": conversion,
            "commands": commands,
            "wall_seconds": wall,
            "cpu_seconds": cpu,
            "report_html": card,
            "pictures": _pictures(files),
        }
    )
    _write(out, report)
    if echo:
        log_fn(format_report(report))
    return report


def has_chat_template(model: Path) -> bool:
    if (model / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((model / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return bool(isinstance(config, dict) and config.get("chat_template"))


def judge_files(files: dict[str, str], prof: RealModelProfile, window: int | None, budget: str) -> dict:
    runs = read_runs(files)
    measured = measure_runs(runs)
    w = int(window) if window is not None else prof.trained_window
    rows = judge(measured, w)
    return {
        "profile": prof.name,
        "title": prof.title,
        "budget": budget,
        "window": w,
        "window_source": prof.window_source if w == prof.trained_window else f"given: {w}",
        "results_files": files,
        "rows": rows,
        "failed": failed(rows),
        "measured": _jsonable(measured),
    }


def rejudge(out_dir, window: int | None = None, echo: bool = True, log_fn=print) -> dict:
    """Judge the runs of an earlier validation in ``out_dir`` again (another ``window``); rewrites nothing of the
    runs, only the report files, and returns the report."""
    out = Path(out_dir)
    try:
        old = json.loads((out / REPORT_JSON).read_text(encoding="utf-8"))
        files, prof = old["results_files"], _profile(old["profile"])
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise RealModelValidationError(
            f"{out / REPORT_JSON}: no readable earlier validation ({e}); run it first without --from-run"
        ) from None
    report = judge_files(files, prof, window, old.get("budget", "?"))
    for k in ("model_dir", "conversion", "commands", "wall_seconds", "cpu_seconds", "report_html", "pictures"):
        if k in old:
            report[k] = old[k]
    name = REPORT_JSON if report["window"] == prof.trained_window else f"real_model_validation_w{report['window']}.json"
    (out / name).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (out / name.replace(".json", ".md")).write_text(format_report(report), encoding="utf-8")
    if echo:
        log_fn(format_report(report))
    return report


def _profile(name: str) -> RealModelProfile:
    if name not in PROFILES:
        raise RealModelValidationError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
    return PROFILES[name]


def _write(out: Path, report: dict) -> None:
    (out / REPORT_JSON).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (out / REPORT_MD).write_text(format_report(report), encoding="utf-8")


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def _pictures(files: dict[str, str]) -> dict:
    pics = {}
    for f in files.values():
        p = Path(f)
        for kind in ("forgetting_curve", "retrieval_gain_map"):
            png = p.with_name(f"{p.stem}_{kind}.png")
            if png.is_file():
                pics[kind] = str(png)
    return pics


def _write_card(files: dict[str, str], out_html: Path, prof: RealModelProfile) -> str | None:
    from ..report.report_card import build_report_card
    from ..report.results import UnusableInput

    order = [n for n in (RUN_WITHIN, RUN_BEYOND, RUN_CHAT) if n in files]
    labels = {RUN_WITHIN: "within W", RUN_BEYOND: f"beyond W ({prof.trained_window})", RUN_CHAT: "chat template"}
    try:
        build_report_card(
            [files[n] for n in order],
            out_html,
            [labels[n] for n in order],
            title=f"Real-model validation: {prof.title}",
        )
    except UnusableInput as e:
        log.warning("no report card: %s", e)
        return None
    return str(out_html)


# ----------------------------------------------------------------------------------------------- command line


def add_arguments(p) -> None:
    p.add_argument("out", metavar="OUT", help="output folder: corpora, runs/<run>/, the report JSON, table, card")
    p.add_argument(
        "--model",
        default=None,
        metavar="DIR",
        help="the checkpoint folder (lm-eval-longctx from-gguf smollm2-135m-instruct DIR makes it); required "
        "unless --from-run",
    )
    p.add_argument(
        "--budget",
        choices=sorted(SMOLLM2.budgets),
        default="full",
        help="full (default: the sizes of docs/real-models.md) or ci (cut down, as the test suite runs it)",
    )
    p.add_argument(
        "--window",
        type=int,
        default=None,
        help=f"the trained window the expectations use (default: the model card's, {SMOLLM2.trained_window})",
    )
    p.add_argument(
        "--from-run",
        action="store_true",
        help="judge the runs already in OUT again (e.g. with another --window) instead of running the model",
    )
    p.add_argument("--device", default="cpu", help="lm_eval --device (default cpu)")
    p.add_argument("--batch-size", type=int, default=1, help="lm_eval --batch_size (default 1)")
    p.add_argument("--check", action="store_true", help="exit 1 when an expectation fails")


def run_from_args(args) -> int:
    from . import gguf_checkpoint
    from .run import DemoError

    if args.window is not None and args.window < 1:
        print("error: --window must be a positive number of tokens", file=sys.stderr)
        return 2
    try:
        if args.from_run:
            report = rejudge(args.out, args.window)
        else:
            if args.model is None:
                print(
                    "error: --model DIR is required (make it with `lm-eval-longctx from-gguf smollm2-135m-instruct "
                    "DIR`), or --from-run to judge an earlier run",
                    file=sys.stderr,
                )
                return 2
            report = run_validation(
                args.model,
                args.out,
                budget=args.budget,
                window=args.window,
                device=args.device,
                batch_size=args.batch_size,
            )
    except (
        RealModelValidationError,
        known_answer.ValidationError,
        DemoError,
        output_dirs.ForeignFolderError,
        gguf_checkpoint.GgufCheckpointError,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if (args.check and report["failed"]) else 0
