"""Known-answer validation: models whose long-context ability is known by construction, ranked by every metric.

The demo model (``demo_model.py``) copies from its context and looks LongEval lines up through hand-set heads
whose reach is set by the RoPE pairs their codes sit on. The variants ``demo_model.VARIANTS`` differ only in that
knob (``long``: rope_theta 1e6; ``short``: the same with every code 6 pairs faster, ``code_band_offset``; the first
demo model's recipe turned rope_theta instead, 1e6 / 1e4: ``demo_model.variants_for``), plus ``none``, the same
architecture without the copy circuit, so their order of long-context ability is known in advance:
``demo_model.VARIANT_ORDER`` = long > short > none. ``run_validation`` builds them, runs the demo's tasks on each
through the harness (``demo.run_demo``, with ``--log_samples``), and checks that each metric puts them in that
order, with a paired bootstrap CI of every difference between neighbours.

Everything but ``run_validation`` is a pure function of the harness's own files (numpy / scipy; no model, no
lm-eval import):

* ``read_run``, ``unit_data``, ``metric_value`` (``report/run_samples.py``): a run's samples as resampling units and
  the metric recomputed from them, for any resample;
* ``paired_bootstrap_difference``: percentile CI of ``metric(model a) - metric(model b)`` by
  ``scipy.stats.bootstrap`` over unit indices, so both models always see the same resampled units;
* ``ordering_verdict`` and ``validate``: the verdict per metric; ``format_table``: the Markdown table.

Pairing: unit ``i`` of every model is the same document / case / sample (same harness ``doc_id``, checked through
the harness's ``doc_hash``): the variants share the tokenizer, the corpus and every seed.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import output_dirs
from ..metrics import bootstrap
from ..report.run_samples import (  # noqa: F401  (the names this module's readers and tests know it by)
    CELL_FIELD,
    MetricSpec,
    RunFiles,
    Units,
    ValidationError,
    metric_value,
    paired_units,
    read_run,
    samples_files,
    task_settings,
    unit_data,
)

log = logging.getLogger("lm_eval_longctx")

DEFAULT_N_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0
VALIDATION_JSON = "validation.json"
VALIDATION_MD = "validation.md"
FIGURE = "forgetting_curves.png"


# ----------------------------------------------------------------------------------------------- what is checked


# The diagnostic row applies the fine-grained rule at a lower threshold than the paper's (copy accuracy > 0.99),
# to show whether a tie of the fine memory lengths comes from the threshold or from the curves.
FINE_DIAGNOSTIC_THRESHOLD = 0.5

METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("longppl", "LongPPL", "longppl_govreport", "longppl", "perplexity", False, "orders"),
    MetricSpec("ppl", "PPL", "longppl_govreport", "ppl", "perplexity", False, "no clear separation"),
    MetricSpec(
        "fine_memory_length", "fine memory length", "forgetting_curve", "fine_memory_length", "fine", True, "orders"
    ),
    MetricSpec(
        f"fine_memory_length@{FINE_DIAGNOSTIC_THRESHOLD}",
        f"fine memory length at copy accuracy > {FINE_DIAGNOSTIC_THRESHOLD} (diagnostic)",
        "forgetting_curve",
        "fine_memory_length",
        "fine",
        True,
        "not stated",
        threshold=FINE_DIAGNOSTIC_THRESHOLD,
    ),
    MetricSpec(
        "coarse_memory_length",
        "coarse memory length",
        "forgetting_curve",
        "coarse_memory_length",
        "coarse",
        True,
        "orders",
    ),
    MetricSpec("retrieval_gain", "retrieval gain", "retrieval_gain", "retrieval_gain", "mean", True, "orders"),
    MetricSpec(
        "gain_map_effective_length",
        "effective context length (retrieval-gain map)",
        "retrieval_gain_map",
        "effective_length",
        "effective",
        True,
        "orders",
    ),
    MetricSpec(
        "answer_ppl", "LongEval answer-token PPL", "longeval_lines_ppl", "answer_ppl", "perplexity", False, "orders"
    ),
    # the demo model looks a line up by its name (``_set_lookup``) as far as its codes reach: accuracy orders by design
    MetricSpec("longeval_acc", "LongEval accuracy", "longeval_lines_acc", "acc", "mean", True, "orders"),
)
SPECS_BY_KEY = {s.key: s for s in METRIC_SPECS}

# Settings of the validation run on top of the demo budget (``demo.DEMO_BUDGETS``), per budget. The short
# variant copies over about a hundred tokens and the long one over about a thousand (untrained construction, ci
# budget: copy accuracy > 0.5 up to 128 and 1024 tokens), so every probe spans distances on both sides of the short
# reach; probing only beyond it would, correctly, find short = none.
# * LongPPL: K = 128, d = 64: key tokens are those whose long-context gain comes from more than 128 tokens back
#   (with K = 256 most key tokens lie beyond the short reach, and short ~ none there, as it should be).
# * forgetting curve: copy lengths from well inside to well beyond the short reach (ci: 32 .. 1024; full: the
#   demo's 16 .. 4096).
# * retrieval gain: anchors from 10% to 90% of the document, so the copy distance runs from ~0.1 T to ~0.9 T.
# * retrieval-gain map: the demo's ladders (ci: 128, 512, 2048; full: 256, 1024, 4096 tokens), from inside to
#   beyond the short reach, and at full budget one rung beyond the long reach too (8192): a map's mean gain at L
#   also counts depth 90, whose needle lies only 0.1 L back, so the short variant keeps 2.70 nats at 4096 against
#   half its 256-token gain, 2.95 (trained variants, 6 documents); within resampling noise of the relative rule's
#   threshold, so on a ladder that ended at 4096 a bootstrap resample sometimes gave short the ladder's top, level
#   with long (long - short CI [0, 3072]). At 8192 long keeps 4.6-6.2 nats per document and short 1.2-2.0.
# * LongEval: prompts of ~0.3k to ~1.3k tokens (ci: 5 and 40 lines; full: up to 80 lines, ~2.5k tokens).
VALIDATION_METADATA = {
    "ci": {
        "num_docs": 4,
        "trunc_len": 128,
        "sliding_window": 64,
        "lengths": [32, 128, 512, 1024],
        "samples_per_length": 4,
        "doc_tokens": 1024,
        "n_queries": 6,
        "anchor_min": 0.1,
        "anchor_max": 0.9,
        "num_lines": [5, 40],
        "num_cases": 4,
    },
    "full": {  # the demo's copy lengths (16 .. 4096, 8 samples each); 6 of the 7 documents of >= 16k tokens
        # (Python 3.11's topics; one spare for versions that ship less text), for more resampling units
        "num_docs": 6,
        "trunc_len": 128,
        "sliding_window": 64,
        "doc_tokens": 2048,
        "n_queries": 8,
        "anchor_min": 0.1,
        "anchor_max": 0.9,
        "context_lengths": [256, 1024, 4096, 8192],
        "num_lines": [5, 20, 80],
        "num_cases": 10,
    },
}


def paired_bootstrap_difference(
    stat_a: Callable[[np.ndarray], np.ndarray], stat_b: Callable[[np.ndarray], np.ndarray], n_units: int, **options
) -> dict:
    """CI of ``stat_a - stat_b`` by ``scipy.stats.bootstrap``, resampling unit indices: each resample draws
    ``n_units`` indices with replacement and both statistics read the SAME units (a paired bootstrap).

    ``stat_x(idx)`` maps an index array (last axis = one resample) to the statistic per resample. The percentile
    method is the default because memory lengths are step functions of the data (BCa's jackknife is degenerate
    there). Resamples where a statistic is undefined (NaN) make the bounds NaN. ``options``: those of
    ``bootstrap.interval`` (``n_resamples``, ``confidence``, ``seed``, ``method``), its defaults where not given.
    """
    if n_units < 1:
        raise ValidationError("no units to resample")
    out = bootstrap.interval(lambda i: stat_a(i) - stat_b(i), n_units, **options)
    out["difference"] = out.pop("value")
    return out


# ----------------------------------------------------------------------------------------------- the verdict


def _better(diff: float, higher_is_better: bool) -> bool:
    return diff > 0 if higher_is_better else diff < 0


def ordering_verdict(values: Sequence[float], cis: Sequence[dict], higher_is_better: bool) -> dict:
    """Whether ``values`` (models in the constructed order, best first) are ordered, given the CIs of the
    neighbours' differences ``cis[j]`` = CI of values[j] - values[j + 1].

    * ``ordered``: every neighbour's point difference points the constructed way (strictly);
    * ``separated``: ordered, and every CI excludes 0 on that side (the CIs of the differences, not of the
      values, since the models are paired on the same units);
    * ``reversed``: some CI excludes 0 on the wrong side (a significant inversion);
    * verdict: ``yes`` (ordered and separated), ``yes, not separated``, ``no (tie)`` (some equal neighbours, none
      inverted), ``no`` (some neighbours inverted).
    """
    if len(cis) != len(values) - 1:
        raise ValueError(f"{len(values)} values need {len(values) - 1} differences, got {len(cis)}")
    diffs = [values[j] - values[j + 1] for j in range(len(cis))]
    finite = all(math.isfinite(d) for d in diffs)
    right = [finite and _better(d, higher_is_better) for d in diffs]
    tie = [finite and d == 0 for d in diffs]

    def excludes_zero(ci, good_side: bool) -> bool:
        lo, hi = ci["low"], ci["high"]
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return False
        positive = lo > 0
        negative = hi < 0
        want_positive = higher_is_better == good_side
        return positive if want_positive else negative

    separated_each = [excludes_zero(ci, True) for ci in cis]
    reversed_each = [excludes_zero(ci, False) for ci in cis]
    ordered = all(right)
    separated = ordered and all(separated_each)
    if separated:
        verdict = "yes"
    elif ordered:
        verdict = "yes, not separated"
    elif not finite:
        verdict = "undefined"
    elif any(not r and not t for r, t in zip(right, tie)):
        verdict = "no"
    else:
        verdict = "no (tie)"
    return {
        "ordered": ordered,
        "separated": separated,
        "reversed": any(reversed_each),
        "verdict": verdict,
        "pair_ordered": right,
        "pair_separated": separated_each,
    }


def validate(
    runs: dict[str, RunFiles],
    order: Sequence[str],
    specs: Sequence[MetricSpec] = METRIC_SPECS,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence_level: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> list[dict]:
    """Per metric: each model's value (recomputed from the samples, beside the harness's own), the paired bootstrap
    CI of each difference between neighbours in ``order`` (best first), and the ordering verdict."""
    order = list(order)
    missing = [m for m in order if m not in runs]
    if missing:
        raise ValidationError(f"no run for {missing}")
    if len(order) < 2:
        raise ValidationError("need at least two models to order")
    rows: list[dict] = []
    for spec in specs:
        if any(spec.task not in runs[m].samples for m in order):
            rows.append({"metric": spec.key, "label": spec.label, "task": spec.task, "skipped": "no samples"})
            continue
        units = paired_units(spec, {m: runs[m] for m in order})
        n = len(units[order[0]].ids)
        values = {m: metric_value(spec, units[m]) for m in order}
        harness_values = {m: _harness_value(runs[m].results, spec) for m in order}
        pairs = []
        for j in range(len(order) - 1):
            a, b = order[j], order[j + 1]
            ci = paired_bootstrap_difference(
                functools.partial(metric_value, spec, units[a]),
                functools.partial(metric_value, spec, units[b]),
                n,
                n_resamples=n_resamples,
                confidence=confidence_level,
                seed=seed,
            )
            pairs.append({"a": a, "b": b, **ci})
        verdict = ordering_verdict([values[m] for m in order], pairs, spec.higher_is_better)
        rows.append(
            {
                "metric": spec.key,
                "label": spec.label,
                "task": spec.task,
                "field": spec.field,
                "higher_is_better": spec.higher_is_better,
                "expected": spec.expected,
                "n_units": n,
                "values": values,
                "harness_values": harness_values,
                "differences": pairs,
                **verdict,
            }
        )
    return rows


def _harness_value(results: dict, spec: MetricSpec):
    if spec.threshold is not None:  # a diagnostic threshold: the harness aggregated the run's own
        return None
    v = ((results.get("results") or {}).get(spec.task) or {}).get(f"{spec.field},none")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def check_against_harness(rows: list[dict], rel: float = 1e-6) -> list[str]:
    """Metrics whose value recomputed from the samples differs from the harness's aggregate (should be none)."""
    bad = []
    for r in rows:
        for m, v in (r.get("values") or {}).items():
            h = r["harness_values"].get(m)
            if h is None or not (math.isfinite(v) and math.isfinite(h)):
                if not (h is None or (math.isnan(v) and math.isnan(h))):
                    bad.append(f"{r['metric']}/{m}: recomputed {v}, harness {h}")
                continue
            if abs(v - h) > rel * max(1.0, abs(h)):
                bad.append(f"{r['metric']}/{m}: recomputed {v}, harness {h}")
    return bad


# ----------------------------------------------------------------------------------------------- the table


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—" if x is None else str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


def format_table(rows: list[dict], order: Sequence[str], labels: dict | None = None) -> str:
    """Markdown: one row per metric, the models' values in the constructed order, each neighbours' difference
    with its paired bootstrap CI, and whether the metric orders the models as constructed."""
    labels = labels or {}
    order = list(order)
    level = next((p["level"] for r in rows for p in r.get("differences", [])), DEFAULT_CONFIDENCE)
    head = (
        ["metric", "better"]
        + [labels.get(m, m) for m in order]
        + [f"{a} − {b} [{level:.0%} CI]" for a, b in zip(order, order[1:])]
        + ["orders as constructed", "expected by design"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("skipped"):
            dashes = " | ".join("—" for _ in head[2:-2])
            lines.append(f"| {r['label']} | | {dashes} | skipped: {r['skipped']} | |")
            continue
        cells = [f"{r['label']} (`{r['task']}/{r['field']}`)", "higher" if r["higher_is_better"] else "lower"]
        cells += [_num(r["values"][m]) for m in order]
        for p in r["differences"]:
            cells.append(f"{_num(p['difference'])} [{_num(p['low'])}, {_num(p['high'])}]")
        cells += [r["verdict"], r["expected"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- orchestration


def _variant_dir_is_current(path: Path, name: str, steps, tokenizer_dir=None) -> bool:
    """Whether ``path`` holds variant ``name`` built with this recipe (and, when given, this tokenizer), so it
    need not be rebuilt. (A change of the construction code itself is not detected: pass ``rebuild``.)"""
    from . import model as demo_model

    rec = path / "recipe.json"
    if not (rec.is_file() and (path / "config.json").is_file()):
        return False
    try:
        built = json.loads(rec.read_text(encoding="utf-8")).get("recipe")
    except (OSError, json.JSONDecodeError):
        return False
    overrides = {} if steps is None else {"steps": int(steps)}
    want = json.loads(json.dumps(asdict(demo_model.variant_recipe(name, **overrides))))
    if built != want:
        return False
    if tokenizer_dir is not None:
        mine, theirs = path / "tokenizer.json", Path(tokenizer_dir) / "tokenizer.json"
        try:
            same = json.loads(mine.read_text(encoding="utf-8")) == json.loads(theirs.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            same = False
        if not same:
            return False
    return True


def _tokenizer_dir(out: Path, tokenizer_dir, log_fn) -> Path:
    """The tokenizer every variant shares: the given one, else the packaged demo model's, else a stand-in
    trained here as the packaged one is (until the packaged model exists)."""
    from . import model as demo_model

    if tokenizer_dir is not None:
        return Path(tokenizer_dir)
    packaged = Path(demo_model.packaged_model_dir())
    if (packaged / "tokenizer.json").is_file() or (packaged / "tokenizer_config.json").is_file():
        return packaged
    stand_in = out / "tokenizer"
    if not (stand_in / "tokenizer.json").is_file():
        from .offline import train_tokenizer

        log_fn(f"validation: no packaged demo tokenizer at {packaged}; training a stand-in in {stand_in}")
        tok = train_tokenizer(demo_model.training_texts(300_000), vocab_size=demo_model.Recipe().vocab_size)
        tok.save_pretrained(stand_in)
    return stand_in


def build_models(
    out_dir, variants: Sequence[str], steps=None, tokenizer_dir=None, rebuild: bool = False, log_fn=print
) -> dict[str, Path]:
    """``{variant: checkpoint folder}`` under ``out_dir/models``; a folder already holding the same recipe and
    tokenizer is reused (a full-recipe variant takes minutes to train)."""
    from . import model as demo_model

    out = Path(out_dir)
    tok = _tokenizer_dir(out, tokenizer_dir, log_fn)
    dirs = {}
    for name in variants:
        path = out / "models" / name
        if rebuild or not _variant_dir_is_current(path, name, steps, tok):
            t0 = time.perf_counter()
            demo_model.build_variant(name, path, steps=steps, tokenizer_dir=tok, log=log_fn)
            log_fn(f"validation: built variant {name} in {time.perf_counter() - t0:.1f} s -> {path}")
        dirs[name] = path.resolve()
    return dirs


def variant_labels(variants: Sequence[str]) -> dict[str, str]:
    """Table / legend labels: the variant and its knob (``long (rope_theta 1e6)``, ``none (no copy circuit)``)."""
    from . import model as demo_model

    out = {}
    for v in variants:
        r = demo_model.variant_recipe(v)
        band = f", code band +{r.code_band_offset}" if r.code_band_offset else ""
        out[v] = f"{v} (rope_theta {_power(r.rope_theta)}{band})" if r.copy_circuit else f"{v} (no copy circuit)"
    return out


def _power(x: float) -> str:
    """1e6 for 1000000.0 (a power of ten), else the shortest float form."""
    e = math.log10(x) if x > 0 else float("nan")
    return f"1e{int(round(e))}" if math.isfinite(e) and abs(e - round(e)) < 1e-12 else f"{x:g}"


def plot_curves(runs: dict[str, RunFiles], order: Sequence[str], out_path, labels: dict | None = None):
    """The forgetting curves of all models on one figure (``forgetting_curve_plot.plot_forgetting_curves``); None without
    matplotlib."""
    from ..report.pictures import forgetting_curve_plot

    labels = labels or {}
    curves = [
        forgetting_curve_plot.curve_from_results(runs[m].results, task, labels.get(m, m))
        for m in order
        for task in forgetting_curve_plot.forgetting_curve_tasks(runs[m].results)
    ]
    if not curves:
        return None
    try:
        return forgetting_curve_plot.plot_forgetting_curves(
            curves, out_path, title="Forgetting curves of the known-answer models"
        )
    except ImportError as e:
        log.warning("validation: no figure (%s)", e)
        return None


def run_validation(
    out_dir,
    budget: str = "full",
    steps=None,
    variants: Sequence[str] | None = None,
    tokenizer_dir=None,
    extra_metadata: dict | None = None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence_level: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    rebuild: bool = False,
    plot: bool = True,
    echo: bool = True,
    log_fn=print,
) -> dict:
    """Build the known-answer variants, run the demo's tasks on each through the harness, and check the ordering.

    * ``budget``: the demo budget (``demo.DEMO_BUDGETS``: ``ci`` or ``full``) plus ``VALIDATION_METADATA[budget]``
      and ``extra_metadata``; LongPPL's evaluator is the first (best) variant's checkpoint for every model, so
      the key tokens are the same for all (as the paper's fixed evaluator); its spans are cached in
      ``out_dir/span_cache``.
    * ``steps``: training steps of the variants (None: the full recipe, minutes each; 0: the untrained
      construction, instantaneous). Variants already built with the same recipe under ``out_dir/models`` are
      reused unless ``rebuild``.
    * ``variants``: a subset of ``demo_model.VARIANTS`` (default all), ordered as ``demo_model.VARIANT_ORDER``.

    Writes ``out_dir/validation.json`` (everything), ``out_dir/validation.md`` (the table) and
    ``out_dir/forgetting_curves.png``; returns the JSON's content.
    """
    from . import model as demo_model
    from . import run as demo

    t0 = time.perf_counter()
    out = Path(out_dir).resolve()
    out = output_dirs.claim(out, "the known-answer validation")
    variants = list(variants or demo_model.VARIANT_ORDER)
    unknown = [v for v in variants if v not in demo_model.VARIANTS]
    if unknown:
        raise ValidationError(f"unknown variants {unknown}; known: {list(demo_model.VARIANT_ORDER)}")
    order = [v for v in demo_model.VARIANT_ORDER if v in variants]
    if len(order) < 2:
        raise ValidationError("need at least two variants to order")
    if budget not in VALIDATION_METADATA:
        raise ValidationError(f"unknown budget {budget!r}; known: {sorted(VALIDATION_METADATA)}")

    dirs = build_models(out, order, steps, tokenizer_dir, rebuild, log_fn)
    t_built = time.perf_counter()
    metadata = {
        **VALIDATION_METADATA[budget],
        "evaluator": str(dirs[order[0]]),
        "span_cache_dir": str(out / "span_cache"),
        **(extra_metadata or {}),
    }
    runs, summaries, seconds = {}, {}, {}
    for name in order:
        t1 = time.perf_counter()
        run_metadata = dict(metadata)
        if metadata.get("export_tokens"):  # one per-token export per variant, side by side: DIR/<variant>
            run_metadata["export_tokens"] = str(Path(metadata["export_tokens"]) / name)
        summary = demo.run_demo(
            out / "runs" / name, model_dir=dirs[name], budget=budget, extra_metadata=run_metadata, echo=echo
        )
        seconds[name] = round(time.perf_counter() - t1, 2)
        summaries[name] = summary
        runs[name] = read_run(summary["files"]["results_json"])

    rows = validate(runs, order, n_resamples=n_resamples, confidence_level=confidence_level, seed=seed)
    mismatches = check_against_harness(rows)
    for m in mismatches:
        log.warning("validation: %s", m)
    labels = variant_labels(order)
    table = format_table(rows, order, labels)
    figure = plot_curves(runs, order, out / FIGURE, labels) if plot else None
    wall = {
        "build_models": round(t_built - t0, 2),
        "harness_per_model": seconds,
        "total": round(time.perf_counter() - t0, 2),
    }
    report = {
        "budget": budget,
        "steps": steps,
        "order": order,
        "labels": labels,
        "models": {m: str(d) for m, d in dirs.items()},
        "evaluator": str(dirs[order[0]]),
        "metadata": summaries[order[0]].get("metadata", metadata),
        "bootstrap": {
            "method": "percentile, paired (same resampled units for every model), scipy.stats.bootstrap",
            "n_resamples": n_resamples,
            "confidence_level": confidence_level,
            "seed": seed,
        },
        "metrics": rows,
        "harness_mismatches": mismatches,
        "table_markdown": table,
        "results_files": {m: runs[m].results_file for m in order},
        "figure": str(figure) if figure else None,
        "wall_seconds": wall,
    }
    output_dirs.write_atomically(out / VALIDATION_JSON, json.dumps(report, indent=2, default=str) + "\n")
    output_dirs.write_atomically(out / VALIDATION_MD, format_report(report))
    if echo:
        print(format_report(report), flush=True)
    return report


def format_report(report: dict) -> str:
    """The table with a header that says what was run."""
    b = report["bootstrap"]
    steps = report["steps"]
    lines = [
        f"## Known-answer validation ({report['budget']} budget, "
        f"{'full training recipe' if steps is None else f'{steps} training steps'})",
        "",
        f"Constructed order (best first): {' > '.join(report['labels'][m] for m in report['order'])}. "
        f"LongPPL key tokens judged by `{Path(report['evaluator']).name}` for every model. Differences are "
        f"paired over the same documents / samples; {b['confidence_level']:.0%} percentile bootstrap CIs "
        f"({b['n_resamples']} resamples, seed {b['seed']}).",
        "",
        report["table_markdown"].rstrip(),
        "",
    ]
    n_units = ", ".join(f"{r['metric']} {r['n_units']}" for r in report["metrics"] if "n_units" in r)
    lines.append(f"Units resampled: {n_units}.")
    if report.get("harness_mismatches"):
        lines.append(
            "Recomputed values that differ from the harness's aggregates: " + "; ".join(report["harness_mismatches"])
        )
    w = report["wall_seconds"]
    lines.append(
        f"Wall time: {w['total']:.1f} s (models {w['build_models']:.1f} s; harness per model: "
        + ", ".join(f"{m} {s:.1f} s" for m, s in w["harness_per_model"].items())
        + ")."
    )
    if report.get("figure"):
        lines.append(f"Forgetting curves: {report['figure']}")
    return "\n".join(lines) + "\n"


def unmet_expectations(report: dict) -> list[str]:
    """Metrics that should by design order the models (``expected == "orders"``) that did not, with CIs that
    exclude 0 (verdict other than ``yes``)."""
    return [
        f"{r['metric']}: {r['verdict']}"
        for r in report["metrics"]
        if r.get("expected") == "orders" and r.get("verdict") != "yes"
    ]


def plot_command(report: dict, out_png: str = "forgetting_curves.png") -> str:
    """The ``scripts/plot_forgetting_curve.py`` call that redraws the figure from the results files."""
    import shlex

    args = ["python", "scripts/plot_forgetting_curve.py"]
    args += [report["results_files"][m] for m in report["order"]]
    for m in report["order"]:
        args += ["--label", report["labels"][m]]
    return shlex.join(args + ["-o", out_png])


# ----------------------------------------------------------------------------------------------- command line


def add_arguments(p) -> None:
    """The options of ``lm-eval-longctx validate``, the one command line of the known-answer validation."""
    from . import model as demo_model

    p.add_argument(
        "out",
        nargs="?",
        default="lm_eval_longctx_validation",
        help="output folder: models/, runs/<variant>/, validation.json, validation.md, forgetting_curves.png",
    )
    p.add_argument(
        "--budget",
        choices=sorted(VALIDATION_METADATA),
        default="full",
        help="the demo budget the tasks run at, with the validation's settings (default: full)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps of each variant (default: the full recipe, minutes each on CPU; "
        "0: the untrained construction)",
    )
    p.add_argument(
        "--variants",
        default=",".join(demo_model.VARIANT_ORDER),
        help="comma-separated subset of the variants (default: all, best first)",
    )
    p.add_argument(
        "--tokenizer", default=None, help="tokenizer folder shared by the variants (default: the packaged demo model's)"
    )
    p.add_argument("--metadata", default=None, help="JSON of extra --metadata keys for every task (override)")
    p.add_argument(
        "--n-resamples",
        type=int,
        default=DEFAULT_N_RESAMPLES,
        help=f"bootstrap resamples of each paired comparison (default {DEFAULT_N_RESAMPLES})",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help=f"level of the bootstrap confidence intervals (default {DEFAULT_CONFIDENCE})",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--rebuild", action="store_true", help="rebuild the variants even if out/models holds them")
    p.add_argument("--no-plot", action="store_true", help="no forgetting-curve figure")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a metric that should by design order the models does not (CIs excluding 0)",
    )
    p.add_argument("--quiet", action="store_true", help="do not echo the harness's output")


def run_from_args(args) -> int:
    """Run ``run_validation`` from parsed ``add_arguments`` options; print the report; return the exit code."""
    try:
        extra = json.loads(args.metadata) if args.metadata else None
    except json.JSONDecodeError as e:
        print(
            f"error: --metadata is not valid JSON ({e}); give a JSON object such as '{{\"alpha\": 2}}'", file=sys.stderr
        )
        return 2
    if extra is not None and not isinstance(extra, dict):
        print("error: --metadata must be a JSON object such as '{\"alpha\": 2}'", file=sys.stderr)
        return 2
    report = run_validation(
        args.out,
        budget=args.budget,
        steps=args.steps,
        variants=[v.strip() for v in args.variants.split(",") if v.strip()],
        tokenizer_dir=args.tokenizer,
        extra_metadata=extra,
        n_resamples=args.n_resamples,
        confidence_level=args.confidence,
        seed=args.seed,
        rebuild=args.rebuild,
        plot=not args.no_plot,
        echo=not args.quiet,
    )
    if args.quiet:
        print(format_report(report))
    print(f"redraw the figure: {plot_command(report)}")
    unmet = unmet_expectations(report)
    if unmet:
        print("metrics expected to order the models that did not (with CIs excluding 0): " + "; ".join(unmet))
    return 1 if (args.check and unmet) else 0
