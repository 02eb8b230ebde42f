"""Pictures of results: the forgetting curve (as the paper's Figure 1), from an lm-eval results dict.

matplotlib is an optional dependency (``pip install lm_eval_longctx[plot]``), imported only when a
picture is drawn, through its object-oriented API on an Agg canvas: no pyplot, so the caller's
backend is never switched. No lm-eval import: a results JSON is plain data.

Per-length spread: the results JSON holds, per length, the mean accuracy and lm-eval's stderr
(sample std with ddof = 1, over sqrt(n)). The bands are +-1 population std (ddof = 0, the
reference's ``np.std``): std = stderr * sqrt(n - 1), with n the samples at that length (docs are
sample-major, so n follows from the run's sample count and its lengths).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ... import output_dirs
from ..bounds import bound_text, is_lower_bound
from .beside_results import PicturesBesideResults
from .names import model_label, plain_text, wrap_label

_METRIC = re.compile(r"^(copy_acc|lm_acc)@(\d+),(.+)$")


@dataclass
class ForgettingCurve:
    label: str
    lengths: np.ndarray  # copy lengths, ascending
    copy_mean: np.ndarray
    copy_std: np.ndarray
    lm_mean: np.ndarray
    lm_std: np.ndarray
    failed: np.ndarray  # bool: the length did not run (NaN accuracies)
    fine: float | None = None
    coarse: float | None = None
    claimed_length: int | None = None
    spacing: str = "linear"


def forgetting_curve_tasks(results: dict) -> list[str]:
    """Tasks of a results dict that hold a forgetting curve (per-length copy_acc metrics)."""
    return [task for task, res in (results.get("results") or {}).items() if any(_METRIC.match(key) for key in res)]


def results_plot_parser(description: str, what: str, item: str):
    """The plot scripts' shared arguments: results files, ``-o``, ``--task`` (default: every ``what`` task of each
    file), ``--label`` (one per ``item``) and ``--title``."""
    import argparse

    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="results JSON files written by lm_eval --output_path")
    p.add_argument("-o", "--out", required=True, help="output PNG")
    p.add_argument("--task", default=None, help=f"task name in the results (default: every {what} task of each file)")
    p.add_argument("--label", action="append", default=None,
                   help=f"{item}, in order (default: the model name recorded in the results)")  # fmt: skip
    p.add_argument("--title", default=None)
    return p


def labelled_from_results(args, find_tasks, build, what: str, error) -> list:
    """What the plot scripts draw, from the arguments ``results_plot_parser`` parsed: one item per (results file,
    task), ``build(results, task, label)`` for the ``--task`` given or every task ``find_tasks(results)`` finds;
    ``--label`` (one per item) replaces the model names. ``error(message)`` reports a file without ``what`` or a
    wrong number of labels."""
    import json

    paths, task, labels = args.results, args.task, args.label
    items = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        tasks = [task] if task else find_tasks(results)
        if not tasks:
            error(f"{path} holds no {what}")
        for t in tasks:
            label = model_label(results, default=path)
            items.append(build(results, t, label if len(tasks) == 1 else f"{label} / {t}"))
    if labels:
        if len(labels) != len(items):
            error(f"{len(labels)} labels for {len(items)} plotted results")
        for item, label in zip(items, labels):
            item.label = label
    return items


def _samples_per_length(n_docs: int, n_lengths: int) -> list[int]:
    """Samples at each length index among the first n_docs sample-major docs (what --limit leaves)."""
    return [n_docs // n_lengths + (j < n_docs % n_lengths) for j in range(n_lengths)]


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):  # "N/A"; an integer beyond any float
        return float("nan")


# longer than any context: a length beyond it is a malformed file (and would not fit the int64 arrays drawn)
MAX_LENGTH = 2**40


def whole_length(value, where: str) -> int:
    """A token length from a results file: a whole number in [0, MAX_LENGTH]; else a ValueError naming ``where``."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value, ok = int(value), True
    if not ok or not 0 <= value <= MAX_LENGTH:
        shown = str(value) if not isinstance(value, str) else repr(value)
        raise ValueError(f"{where} is {shown[:40]}{'...' if len(shown) > 40 else ''}, not a token length")
    return int(value)


def task_results(results: dict, tasks: list[str], task: str | None, what: str, metrics: str):
    """``(task, its metrics, its recorded longctx_settings)`` for ``task`` (default: the first of ``tasks``,
    the tasks of ``results`` that hold ``what``, recognised by ``metrics``)."""
    if task is None:
        if not tasks:
            raise ValueError(f"these results hold no {what} (no {metrics} metrics)")
        task = tasks[0]
    elif task not in tasks:
        raise ValueError(f"task {task!r} has no {what} in these results; found {tasks}")
    settings = ((results.get("configs") or {}).get(task, {}).get("metadata") or {}).get("longctx_settings") or {}
    return task, results["results"][task], settings


def curve_from_results(results: dict, task: str | None = None, label: str | None = None) -> ForgettingCurve:
    """The curve of one task of a results dict (as ``lm_eval --output_path`` writes it)."""
    task, res, settings = task_results(
        results, forgetting_curve_tasks(results), task, "forgetting curve", "copy_acc@LENGTH"
    )

    points: dict[int, dict] = {}
    for key, value in res.items():
        m = _METRIC.match(key)
        if m and m.group(3) == "none":
            what, length = m.group(1), whole_length(int(m.group(2)), f"the length in the metric {key!r}")
            points.setdefault(length, {})[what] = _number(value)
            points[length][what + "_stderr"] = _number(res.get(f"{what}@{m.group(2)}_stderr,none"))
    lengths = np.array(sorted(points), dtype=np.int64)

    # samples per length: from the run's lengths and doc count (sample-major docs)
    recorded = settings.get("lengths")
    if recorded is not None and not isinstance(recorded, list):
        raise ValueError(f"longctx_settings.lengths of {task} is {recorded!r}, not a list of lengths")
    run_lengths = [whole_length(x, f"longctx_settings.lengths of {task}") for x in recorded or lengths.tolist()]
    n_docs = whole_length(
        ((results.get("n-samples") or {}).get(task) or {}).get("effective", 0), f"n-samples.{task}.effective"
    )
    if n_docs and run_lengths:
        per_index = _samples_per_length(n_docs, len(run_lengths))
        n_at = dict(zip(run_lengths, per_index))
    else:
        n_at = {}

    def column(what):
        mean = np.array([points[x].get(what, np.nan) for x in lengths], dtype=np.float64)
        se = np.array([points[x].get(what + "_stderr", np.nan) for x in lengths], dtype=np.float64)
        n = np.array([n_at.get(int(x), 0) for x in lengths], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            std = np.where((n > 1) & np.isfinite(se), se * np.sqrt(np.maximum(n - 1, 0)), 0.0)
        return mean, std

    copy_mean, copy_std = column("copy_acc")
    lm_mean, lm_std = column("lm_acc")
    failed = ~(np.isfinite(copy_mean) & np.isfinite(lm_mean))
    fine = _number(res.get("fine_memory_length,none"))
    coarse = _number(res.get("coarse_memory_length,none"))
    key = "claimed_length" if settings.get("claimed_length") else "model_max_length"
    claimed = settings.get(key)
    if claimed:
        claimed = whole_length(claimed, f"longctx_settings.{key} of {task}")
    return ForgettingCurve(
        label or model_label(results),
        lengths,
        copy_mean,
        copy_std,
        lm_mean,
        lm_std,
        failed,
        fine=None if math.isnan(fine) else fine,
        coarse=None if math.isnan(coarse) else coarse,
        claimed_length=int(claimed) if claimed else None,
        spacing=str(settings.get("spacing", "linear")),
    )


# reference colours: copy orange, LM blue
_COPY, _LM = "tab:orange", "tab:blue"
# (name, shade, text colour)
_REGIONS = (
    ("fine-grained memory", "#2ca02c", "#1a6e1a"),
    ("coarse-grained memory", "#ffbf00", "#9a6b00"),
    ("amnesia", "#d62728", "#a31d1d"),
)


def plot_forgetting_curves(
    curves: list[ForgettingCurve], out_path, title: str | None = None, log_x: bool | None = None
):
    """Write a PNG of :func:`forgetting_curve_figure`; return its path."""
    fig = forgetting_curve_figure(curves, title, log_x)
    out_path = Path(out_path)
    with output_dirs.atomic_file(out_path, "wb") as f:  # a full disk leaves no part of a picture
        fig.savefig(f, format=out_path.suffix[1:] or None, dpi=fig.dpi)
    return out_path


@plain_text
def forgetting_curve_figure(curves: list[ForgettingCurve], title: str | None = None, log_x: bool | None = None):
    """The figure (on an Agg canvas): copy and LM accuracy (+-1 std bands) against copy length.

    One curve: the fine-grained, coarse-grained and amnesia regions are shaded, as in the paper's Figure 1 (amnesia
    only where a tested length lies beyond the coarse memory length). Several curves share the axes, one colour per
    model (copy solid, LM dashed), each model's fine / coarse memory lengths as dotted / dash-dotted lines. The
    claimed length T is marked, and the copy length whose samples (2l + 3 tokens) fill it.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.transforms import blended_transform_factory
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("plotting needs matplotlib: pip install 'lm_eval_longctx[plot]'") from e
    if not curves:
        raise ValueError("no curve to plot")

    single = len(curves) == 1
    fig = Figure(figsize=(10, 5.5) if single else (10, 6.0), dpi=120, layout=None if single else "constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x_max = max(float(c.lengths.max()) for c in curves if len(c.lengths))
    x_min = min(float(c.lengths.min()) for c in curves if len(c.lengths))
    if log_x is None:
        log_x = all(c.spacing == "geometric" for c in curves)
    left, right = _x_limits(x_min, x_max, log_x)

    palette = [f"C{i}" for i in range(10)]
    for i, c in enumerate(curves):
        ok = ~c.failed
        x = c.lengths[ok]
        copy_colour, lm_colour = (_COPY, _LM) if single else (palette[i % 10], palette[i % 10])
        # several runs: one colour a run (named once, under the plot), the line styles named once beside it
        prefix = "" if single else "_"
        ax.plot(x, c.copy_mean[ok], color=copy_colour, lw=1.8, marker="o", ms=3, label=f"{prefix}copy accuracy")
        ax.fill_between(
            x, c.copy_mean[ok] - c.copy_std[ok], c.copy_mean[ok] + c.copy_std[ok], color=copy_colour, alpha=0.15, lw=0
        )
        ax.plot(
            x,
            c.lm_mean[ok],
            color=lm_colour,
            lw=1.8,
            ls="-" if single else "--",
            marker="s",
            ms=3,
            label=f"{prefix}LM accuracy",
        )
        ax.fill_between(
            x, c.lm_mean[ok] - c.lm_std[ok], c.lm_mean[ok] + c.lm_std[ok], color=lm_colour, alpha=0.12, lw=0
        )
        if c.failed.any():
            ax.plot(
                c.lengths[c.failed],
                np.zeros(int(c.failed.sum())),
                ls="none",
                marker="x",
                ms=8,
                mew=2,
                color="black" if single else palette[i % 10],
                label=f"{prefix}failed length (see log)",
            )
        if not single:
            if c.fine:
                ax.axvline(c.fine, color=palette[i % 10], ls=":", lw=1.3)
            if c.coarse:
                ax.axvline(c.coarse, color=palette[i % 10], ls="-.", lw=1.3)

    top = blended_transform_factory(ax.transData, ax.transAxes)
    if single:
        c = curves[0]
        fine = c.fine or left  # a region ends at its memory length; none when there is none
        coarse = max(fine, c.coarse) if c.coarse else fine
        tested = c.lengths[~c.failed]
        longest = float(tested.max()) if len(tested) else 0.0
        # amnesia is what was measured beyond the coarse memory length: no region where no length was tested
        bounds = ((left, fine), (fine, coarse), (coarse, right if longest > coarse else coarse))
        for (name, shade, ink), (a, b), value in zip(_REGIONS, bounds, (c.fine, c.coarse, None)):
            if b <= a:
                continue
            if value is None:
                label = f"{name} (> {coarse:g})" if c.fine or c.coarse else name
            elif value >= longest:  # the memory length is the longest length tested: a lower bound
                label = f"{name} (<= {value:g}, longest tested)"
            else:
                label = f"{name} (<= {value:g})"
            ax.axvspan(a, b, color=shade, alpha=0.10, lw=0, label=label)
            lo = max(a, left)
            if log_x:
                width = math.log(b / lo) / math.log(right / left)
                mid = math.sqrt(lo * b)
            else:
                width, mid = (b - lo) / (right - left), (lo + b) / 2
            if width > 0.12:  # a narrower region is named in the legend only
                ax.text(mid, 0.985, name, transform=top, ha="center", va="top", fontsize=8, color=ink)

    marked, off_axis = set(), []
    for c in curves:
        t = c.claimed_length
        if not t or t in marked:
            continue
        marked.add(t)
        fill = (t - 3) // 2  # the longest copy length whose sample fits T
        if left <= t <= right:
            ax.axvline(t, color="red", ls="--", lw=1.2, label=f"claimed length T = {t}")
        if left <= fill <= right:
            ax.axvline(fill, color="darkred", ls=(0, (4, 2, 1, 2)), lw=1.0, label=f"2l + 3 <= T (l = {fill})")
        if not left <= fill <= right:
            off_axis.append(f"claimed length T = {t} (samples fill it at l = {fill}, off this axis)")
    if off_axis:
        ax.text(
            0.99, 0.02, "\n".join(off_axis), transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="red"
        )

    if log_x:
        ax.set_xscale("log")
        tested = sorted({int(x) for c in curves for x in c.lengths})
        if len(tested) <= 12:  # the lengths themselves as ticks, in plain numbers (not 3 x 10^1)
            ax.set_xticks(tested)
            ax.set_xticklabels([str(x) for x in tested])
            ax.minorticks_off()
    ax.set_xlim(left, right)
    ax.set_ylim(*_y_limits(curves))
    ax.set_xlabel("copy length l (tokens of S; a sample [BOS] S [BOS] S [EOS] has 2l + 3 tokens)")
    ax.set_ylabel("accuracy on the last ceil(l/2) tokens of S")
    ax.set_title(
        title or (f"Forgetting curve: {curves[0].label}" if single else f"Forgetting curves of {len(curves)} runs")
    )
    ax.grid(True, alpha=0.3)
    if single:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
        fig.tight_layout()
    else:
        from matplotlib.lines import Line2D

        styles = [
            Line2D([], [], color="0.3", lw=1.8, marker="o", ms=3, label="copy accuracy"),
            Line2D([], [], color="0.3", lw=1.8, ls="--", marker="s", ms=3, label="LM accuracy"),
            Line2D([], [], color="0.3", lw=1.3, ls=":", label="fine memory length"),
            Line2D([], [], color="0.3", lw=1.3, ls="-.", label="coarse memory length"),
            *ax.get_legend_handles_labels()[0],  # the claimed length, its fill, failed lengths
        ]
        fig.legend(handles=styles, loc="outside right upper", fontsize=8, frameon=False)
        runs = [
            Line2D([], [], color=palette[i % 10], lw=3, label=wrap_label(f"{c.label}: {_memory_text(c)}", 60))
            for i, c in enumerate(curves)
        ]
        fig.legend(handles=runs, loc="outside lower center", fontsize=8, ncols=1 if len(runs) > 3 else len(runs))
    return fig


def _memory_text(c: ForgettingCurve) -> str:
    """A run's memory lengths as its legend entry says them (``≥`` where a length is the longest tested)."""
    tested = c.lengths[~c.failed].tolist()

    def shown(value) -> str:
        return bound_text(f"{value:g}", is_lower_bound(value, tested)) if value else "none"

    return f"fine {shown(c.fine)}, coarse {shown(c.coarse)}"


def _x_limits(x_min: float, x_max: float, log_x: bool) -> tuple[float, float]:
    """The length axis' range: a margin on both sides, so that the first and last points (markers, bands) are
    whole; a linear axis starts at 0 unless the first length sits too close to it."""
    if log_x:
        pad = (x_max / x_min) ** 0.03 if x_max > x_min else 1.3  # 3% of the decades shown
        return x_min / pad, x_max * pad
    pad = 0.03 * (x_max if x_max > 0 else 1.0)
    return min(0.0, x_min - pad), x_max + pad


def _y_limits(curves: list[ForgettingCurve]) -> tuple[float, float]:
    """The accuracy axis' range: 0 to 1 and every +-1 std band, a margin below (the failed-length crosses sit at 0)
    and headroom above for the region names."""
    lows, highs = [0.0], [1.0]
    for c in curves:
        ok = ~c.failed
        for mean, std in ((c.copy_mean[ok], c.copy_std[ok]), (c.lm_mean[ok], c.lm_std[ok])):
            if len(mean):
                lows.append(float(np.nanmin(mean - std)))
                highs.append(float(np.nanmax(mean + std)))
    return min(lows) - 0.04, max(highs) + 0.12


# after --output_path results are saved: one PNG per forgetting-curve task, results_<date>_<task>.png
save_beside_results = PicturesBesideResults(
    forgetting_curve_tasks, curve_from_results, plot_forgetting_curves, "forgetting curve"
)
