"""LongEval "lines" curves from harness results, and their figure (LongPPL paper, Figure 2 b, c).

Reads the per-configuration metrics of ``longeval_lines_ppl`` / ``longeval_lines_acc``
(``acc_0200``, ``answer_ppl_0200``, ``non_answer_ppl_0200``, ``prompt_tokens_0200``, with their
stderrs) from a results JSON (what ``--output_path`` writes, or ``simple_evaluate``'s return value)
and draws, against the prompt length in tokens:

* (a) accuracy beside the perplexity of the answer tokens (the paper's Figure 2 b);
* (b) accuracy beside the perplexity of the response's other tokens (its Figure 2 c).

The x value of a point is its configuration's mean prompt length measured by the same task
(``prompt_tokens_N``); results without it are drawn against the number of lines.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ... import output_dirs
from .names import model_label, plain_text, wrap_label

CURVE_METRICS = ("acc", "answer_ppl", "non_answer_ppl")
MAX_SIZE = 2**40  # lines in a prompt: beyond it, a malformed file
_KEY = re.compile(r"^(?P<stem>acc|answer_ppl|non_answer_ppl|prompt_tokens)_(?P<n>\d+),(?P<filter>[^,]+)$")


@dataclass
class Curve:
    """One metric across configurations, ascending in the number of lines."""

    metric: str
    num_lines: list[int] = field(default_factory=list)
    x: list[float] = field(default_factory=list)  # mean prompt tokens, or the number of lines
    value: list[float] = field(default_factory=list)
    stderr: list[float] = field(default_factory=list)  # NaN where the harness gave none
    x_is_tokens: bool = True


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):  # "N/A"
        return math.nan


def curves_from_results(results: dict) -> dict[str, Curve]:
    """The three curves of one run: ``results`` is a results JSON or its ``"results"`` section."""
    section = results.get("results", results)
    found: dict[str, dict[int, float]] = {}
    per_task_tokens: dict[str, dict[int, float]] = {}
    stderrs: dict[str, dict[int, float]] = {}
    owner: dict[str, str] = {}
    for task, values in section.items():
        if not isinstance(values, dict):
            continue
        for key, v in values.items():
            m = _KEY.match(key)
            if m is None:
                continue
            stem, n = m.group("stem"), int(m.group("n"))
            if n > MAX_SIZE:
                raise ValueError(f"the size in the metric {key!r} is beyond any prompt ({m.group('n')[:20]}...)")
            if stem == "prompt_tokens":
                per_task_tokens.setdefault(task, {})[n] = _number(v)
                continue
            found.setdefault(stem, {})[n] = _number(v)
            owner[stem] = task
            err = values.get(f"{stem}_{m.group('n')}_stderr,{m.group('filter')}")
            stderrs.setdefault(stem, {})[n] = _number(err)
    any_tokens = next(iter(per_task_tokens.values()), {})
    curves = {}
    for stem in CURVE_METRICS:
        if stem not in found:
            continue
        tokens = per_task_tokens.get(owner[stem], any_tokens)
        ns = sorted(found[stem])
        use_tokens = all(n in tokens and math.isfinite(tokens[n]) for n in ns)
        curves[stem] = Curve(
            stem,
            ns,
            [tokens[n] if use_tokens else float(n) for n in ns],
            [found[stem][n] for n in ns],
            [stderrs[stem].get(n, math.nan) for n in ns],
            use_tokens,
        )
    return curves


def load_results(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_label(results: dict, fallback: str) -> str:
    """The model's name from a results JSON (``model_name`` or ``pretrained=`` in ``config.model_args``), as every
    picture names it (:func:`.names.display_name`)."""
    return model_label(results, fallback)


def plot_runs(
    runs: dict[str, dict[str, Curve]], out_path: str | Path, title: str | None = None, ppl_limits: dict | None = None
) -> Path:
    """Save :func:`longeval_figure` (PNG, PDF or SVG, by the suffix); return its path."""
    fig = longeval_figure(runs, title, ppl_limits)
    out = Path(out_path)
    with output_dirs.atomic_file(out, "wb") as f:  # a full disk leaves no part of a picture
        fig.savefig(f, format=out.suffix[1:] or None, dpi=130)
    return out


@plain_text
def longeval_figure(runs: dict[str, dict[str, Curve]], title: str | None = None, ppl_limits: dict | None = None):
    """The figure (on an Agg canvas; no pyplot, so the caller's backend is never switched): (a) accuracy +
    answer-token PPL and (b) accuracy + non-answer PPL for every run (label -> curves).

    ``ppl_limits``: ``{"answer_ppl": (low, high), ...}``, the perplexity axes' ranges (default: each picture's own),
    so that pictures of other runs can share them."""
    try:
        from matplotlib import rcParams
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("plotting needs matplotlib: pip install 'lm_eval_longctx[plot]'") from e

    if not any(runs.values()):
        raise ValueError("no LongEval lines metrics (acc_N, answer_ppl_N, non_answer_ppl_N) in the results")
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    colors = rcParams["axes.prop_cycle"].by_key()["color"]
    panels = (("answer_ppl", "(a) answer tokens"), ("non_answer_ppl", "(b) non-answer tokens"))
    x_tokens = all(c.x_is_tokens for curves in runs.values() for c in curves.values())
    handles: list = []
    for ax, (ppl_metric, panel_title) in zip(axes, panels):
        twin = ax.twinx()
        for k, (label, curves) in enumerate(runs.items()):
            color = colors[k % len(colors)]
            # accuracy solid on the left axis, perplexity dashed on the right
            styles = ((ax, "acc", "o", "-", "accuracy"), (twin, ppl_metric, "s", "--", "PPL"))
            for on, metric, marker, line, what in styles:
                curve = curves.get(metric)
                if curve is not None:
                    on.errorbar(curve.x, curve.value, yerr=_finite(curve.stderr), color=color, marker=marker,
                                linestyle=line, capsize=2, label=wrap_label(f"{label}: {what}", 45))  # fmt: skip
        ax.set_xlabel("prompt length (tokens)" if x_tokens else "number of lines")
        ax.set_ylabel("accuracy (solid)")
        ax.set_ylim(-0.03, 1.03)
        twin.set_ylabel("perplexity (dashed)")
        if ppl_limits and ppl_metric in ppl_limits:
            twin.set_ylim(*ppl_limits[ppl_metric])
        _readable_range(twin)
        ax.set_title(panel_title)
        ax.grid(alpha=0.3)
        if ax is axes[0]:
            handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    # one legend for both panels (the same runs and colours), under them: inside the axes it hid points
    order = sorted(range(len(handles)), key=lambda i: (i % max(len(runs), 1), i))  # each run's two lines together
    if handles:
        fig.legend(
            handles=[handles[i] for i in order] if len(handles) == 2 * len(runs) else handles,
            fontsize=8,
            loc="outside lower center",
            ncols=min(len(runs), 4),
        )
    fig.suptitle(
        title or (f"LongEval lines: {next(iter(runs))}" if len(runs) == 1 else f"LongEval lines of {len(runs)} runs")
    )
    return fig


def _readable_range(ax) -> None:
    """Ticks in plain numbers (no "1e-6 + 1.000001" offset) over a range of at least 2% of its centre: perplexities
    that all round to one number (1.0 when every answer is found) are drawn flat, not stretched to fill the axis."""
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    low, high = ax.get_ylim()
    centre, least = (low + high) / 2, 0.02 * max(abs((low + high) / 2), 1.0)
    if high - low < least:
        ax.set_ylim(centre - least / 2, centre + least / 2)


def _finite(values: list[float]):
    """Error bars, or None when no stderr is known (matplotlib rejects NaN-only bars)."""
    cleaned = [v if math.isfinite(v) else 0.0 for v in values]
    return cleaned if any(v > 0 for v in cleaned) else None
