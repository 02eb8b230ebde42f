"""The retrieval-gain map read back from a results JSON (``GainMap``), and its heatmap.

matplotlib is imported only when a picture is drawn (object-oriented API on an Agg canvas); no torch, no
lm-eval: a results JSON is plain data. The numbers (per-cell gains, effective lengths, metric names) are
``lm_eval_longctx.metrics.gain_map``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ... import output_dirs
from .beside_results import PicturesBesideResults
from .names import plain_text, wrap_label

_CELL = re.compile(r"^gain@L(\d+)_d(\d+),(.+)$")
_LENGTH = re.compile(r"^gain@L(\d+),(.+)$")


@dataclass
class GainMap:
    label: str
    lengths: np.ndarray  # int64 [nL], ascending
    depths: np.ndarray  # int64 [nD] (percent), ascending
    gain: np.ndarray  # float64 [nL, nD], NaN where absent
    stderr: np.ndarray  # float64 [nL, nD]
    effective_length: float | None = None
    effective_length_abs: float | None = None
    fraction: float | None = None
    threshold: float | None = None


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):  # "N/A"
        return float("nan")


def gain_map_tasks(results: dict) -> list[str]:
    """Tasks of a results dict that hold a gain map (per-cell gain@L..._d.. metrics)."""
    return [task for task, res in (results.get("results") or {}).items() if any(_CELL.match(k) for k in res)]


def map_from_results(results: dict, task: str | None = None, label: str | None = None) -> GainMap:
    from .forgetting_curve_plot import model_label, task_results, whole_length

    task, res, settings = task_results(results, gain_map_tasks(results), task, "retrieval-gain map", "gain@L..._d..")
    cells = {}
    for key, value in res.items():
        m = _CELL.match(key)
        if m and m.group(3) == "none":
            L = whole_length(int(m.group(1)), f"the context length in the metric {key!r}")
            d = whole_length(int(m.group(2)), f"the depth in the metric {key!r}")
            se = res.get(f"gain@L{m.group(1)}_d{m.group(2)}_stderr,none")
            cells[(L, d)] = (_number(value), _number(se))
    lengths = np.array(sorted({L for L, _ in cells}), dtype=np.int64)
    depths = np.array(sorted({d for _, d in cells}), dtype=np.int64)
    gain = np.full((len(lengths), len(depths)), np.nan)
    stderr = np.full_like(gain, np.nan)
    for (L, d), (g, se) in cells.items():
        i, j = int(np.searchsorted(lengths, L)), int(np.searchsorted(depths, d))
        gain[i, j], stderr[i, j] = g, se
    eff = _number(res.get("effective_length,none"))
    eff_abs = _number(res.get("effective_length_abs,none"))
    return GainMap(
        label or model_label(results),
        lengths,
        depths,
        gain,
        stderr,
        None if math.isnan(eff) else eff,
        None if math.isnan(eff_abs) else eff_abs,
        settings.get("effective_fraction"),
        settings.get("effective_threshold"),
    )


# ------------------------------------------------------------------ the heatmap


def _edges(lengths: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, the ends mirrored."""
    x = np.log(lengths.astype(np.float64))
    if len(x) == 1:
        return np.exp(np.array([x[0] - math.log(2) / 2, x[0] + math.log(2) / 2]))
    mid = (x[1:] + x[:-1]) / 2
    return np.exp(np.concatenate([[x[0] - (mid[0] - x[0])], mid, [x[-1] + (x[-1] - mid[-1])]]))


def _depth_edges(depths: np.ndarray) -> np.ndarray:
    y = depths.astype(np.float64)
    if len(y) == 1:
        return np.array([y[0] - 5, y[0] + 5])
    mid = (y[1:] + y[:-1]) / 2
    return np.concatenate([[y[0] - (mid[0] - y[0])], mid, [y[-1] + (y[-1] - mid[-1])]])


def shared_limit(maps: list[GainMap]) -> float:
    """One symmetric colour limit for all maps: the largest |gain| (at least 1e-3)."""
    values = np.concatenate([m.gain[np.isfinite(m.gain)].ravel() for m in maps] or [np.zeros(0)])
    return max(float(np.abs(values).max()) if values.size else 0.0, 1e-3)


# sizes at the saved size (points): cell values no smaller than this; the effective-length lines' width and the gap
# that keeps two of them, or one and the axes' border, apart
VALUE_FONT_PT = 8.0
_MARK_WIDTH_PT = 2.0
_MARK_GAP_PT = 2.5
_MAX_DEPTH_TICKS = 21
_NO_VALUE = "#c8c8c8"  # a cell without a value: grey, not the white of a zero gain


def plot_gain_maps(
    maps: list[GainMap], out_path, title: str | None = None, limit: float | None = None, annotate: bool | None = None
):
    """Write a PNG of :func:`gain_map_figure` at its own size (the sizes it reads in points hold); return its path."""
    fig = gain_map_figure(maps, title, limit, annotate)
    out_path = Path(out_path)
    with output_dirs.atomic_file(out_path, "wb") as f:  # a full disk leaves no part of a picture
        fig.savefig(f, format=out_path.suffix[1:] or None, dpi=fig.dpi, bbox_inches="tight")
    return out_path


@plain_text
def gain_map_figure(
    maps: list[GainMap], title: str | None = None, limit: float | None = None, annotate: bool | None = None
):
    """The figure (on an Agg canvas): one heatmap per model, side by side (x: context length, log scale; y: depth),
    on ONE diverging colour scale centred at 0 (red: the context hurts, blue: it helps), the
    effective lengths marked (dashed: relative, dotted: absolute) at the right edge of their cells, inside the axes
    and named in a legend under each panel; cells without a value are grey.

    Cell values are printed (at ``VALUE_FONT_PT``, with 2 decimals or 1) where they fit in the cells, else left
    out with a note; ``annotate=False`` leaves them out always."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.colors import TwoSlopeNorm
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("plotting needs matplotlib: pip install 'lm_eval_longctx[plot]'") from e
    if not maps:
        raise ValueError("no map to plot")
    vmax = shared_limit(maps) if limit is None else float(limit)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
    n = len(maps)
    fig = Figure(figsize=(5.0 * n + 1.6, 5.0), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False, sharey=True)[0]
    mesh = None
    for ax, m in zip(axes, maps):
        xe, ye = _edges(m.lengths), _depth_edges(m.depths)
        ax.set_facecolor(_NO_VALUE)
        mesh = ax.pcolormesh(xe, ye, np.ma.masked_invalid(m.gain.T), cmap="RdBu", norm=norm, shading="flat")
        ax.set_xscale("log")
        ax.set_xticks(m.lengths)
        ax.set_xticklabels([f"{L // 1024}k" if L % 1024 == 0 else str(L) for L in m.lengths], fontsize=8)
        ax.minorticks_off()
        # every depth a tick, but no more than fit beside the rows (every k-th of a fine grid)
        ax.set_yticks(m.depths[:: math.ceil(len(m.depths) / _MAX_DEPTH_TICKS)])
        ax.set_xlim(xe[0], xe[-1])
        ax.set_ylim(ye[-1], ye[0])  # depth 0 (start of the context) at the top, as needle grids draw it
        ax.set_xlabel("context length L (tokens of the document before Q A)")
        if n > 1 or title:  # else the figure's title names the one model
            ax.set_title(wrap_label(m.label, 55), fontsize=10)
    axes[0].set_ylabel("depth of the passage (% of the context before the query)")
    title_lines = max(ax.get_title().count("\n") + 1 for ax in axes)
    if title_lines > 1:  # room under the figure's title for panel titles of several lines
        fig.subplots_adjust(top=0.88 - 0.045 * (title_lines - 1))
    assert mesh is not None  # every panel draws one
    cbar = fig.colorbar(mesh, ax=list(axes), fraction=0.035 if n > 1 else 0.05, pad=0.02)
    cbar.set_label("retrieval gain (nats / answer token)\nblue: context helps, red: it hurts")
    # the axes are placed now (the colour bar took its share): cell sizes, hence which values fit, are final
    decimals = _value_decimals(fig, axes, maps) if annotate is not False else None
    for ax, m in zip(axes, maps):
        if decimals is not None:
            _print_values(ax, m, decimals, vmax)
        handles = _effective_length_marks(fig, ax, m)
        if np.isnan(m.gain).any():
            handles.append(_patch(_NO_VALUE, "no value in the results"))
        if decimals is None and annotate is not False:
            handles.append(_note("cells too small to print their values"))
        ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, frameon=False, handlelength=3
        )
    fig.suptitle(
        title or (f"Retrieval-gain map: {maps[0].label}" if n == 1 else f"Retrieval-gain maps of {n} runs"),
        fontsize=11,
    )
    return fig


def _value_decimals(fig, axes, maps: list[GainMap]) -> int | None:
    """The decimals (2, else 1) at which every panel's cell values fit their cells at ``VALUE_FONT_PT``; None when
    even 1 does not (one choice for the picture: the panels compare)."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    font = FontProperties(size=VALUE_FONT_PT)
    cell_w = cell_h = math.inf
    for ax, m in zip(axes, maps):
        xs = ax.transData.transform(np.column_stack([_edges(m.lengths), np.zeros(len(m.lengths) + 1)]))[:, 0]
        ys = ax.transData.transform(np.column_stack([np.ones(len(m.depths) + 1), _depth_edges(m.depths)]))[:, 1]
        cell_w = min(cell_w, float(np.abs(np.diff(xs)).min()))
        cell_h = min(cell_h, float(np.abs(np.diff(ys)).min()))
    for decimals in (2, 1):
        texts = [f"{g:.{decimals}f}" for m in maps for g in m.gain[np.isfinite(m.gain)]]
        if not texts:
            return None
        w, h, _ = renderer.get_text_width_height_descent(max(texts, key=len), font, ismath=False)
        if w <= 0.85 * cell_w and 1.35 * h <= cell_h:
            return decimals
    return None


def _print_values(ax, m: GainMap, decimals: int, vmax: float) -> None:
    for i, L in enumerate(m.lengths):
        for j, d in enumerate(m.depths):
            g = m.gain[i, j]
            if np.isfinite(g):
                ax.text(
                    L,
                    d,
                    f"{g:.{decimals}f}",
                    ha="center",
                    va="center",
                    fontsize=VALUE_FONT_PT,
                    color="white" if abs(g) > 0.6 * vmax else "black",
                )


def _effective_length_marks(fig, ax, m: GainMap) -> list:
    """Draw the effective lengths inside the axes at the right edge of their cells (every cell left of the line
    passes): white-cased, so they show on dark and light cells; one on the axes' border is moved inside it, and
    two on one edge are drawn side by side. Return their legend handles."""
    from matplotlib import patheffects
    from matplotlib.lines import Line2D
    from matplotlib.transforms import ScaledTranslation

    xe = _edges(m.lengths)

    def right_edge(length):
        i = int(np.searchsorted(m.lengths, length))
        return xe[i + 1] if i < len(m.lengths) and m.lengths[i] == length else length

    relative = f"gain > {m.fraction:g} × gain at {int(m.lengths[0])}" if m.fraction is not None else "relative rule"
    absolute = f"gain > {m.threshold:g}" if m.threshold is not None else "absolute rule"
    # (length, name, rule, colour, dashes)
    marks = [
        (m.effective_length, "effective length", relative, "black", (0, (4, 2))),
        (m.effective_length_abs, "absolute effective length", absolute, "#404040", (0, (1, 1.5))),
    ]
    edges = [right_edge(length) if length else None for length, *_ in marks]  # 0: no length passes
    shared = edges[0] is not None and edges[0] == edges[1]
    casing = [patheffects.withStroke(linewidth=_MARK_WIDTH_PT + 2, foreground="white")]
    handles = []
    for k, ((length, name, rule, colour, dashes), edge) in enumerate(zip(marks, edges)):
        if edge is None or length is None:
            handles.append(_note(f"{name}: none (no length passes {rule})"))
            continue
        step = _MARK_WIDTH_PT / 2 + _MARK_GAP_PT
        if np.isclose(edge, xe[-1]):  # on the border: inside it, the second one further in
            shift = -step * (1 + k if shared else 1)
        elif shared:  # one edge, two lines: one either side of it
            shift = -step / 2 if k == 0 else step / 2
        else:
            shift = 0.0
        transform = ax.get_xaxis_transform() + ScaledTranslation(shift / 72, 0, fig.dpi_scale_trans)
        line = Line2D(
            [edge, edge], [0, 1], color=colour, ls=dashes, lw=_MARK_WIDTH_PT, transform=transform, path_effects=casing
        )
        line.set_clip_on(False)  # never lost to the axes' edge
        ax.add_line(line)
        # at the longest length tested the model may hold more: a lower bound (report/bounds.py)
        value = f"≥ {int(length)}" if length >= m.lengths[-1] else f"{int(length)}"
        handles.append(Line2D([], [], color=colour, ls=dashes, lw=_MARK_WIDTH_PT, label=f"{name} {value} ({rule})"))
    return handles


def _patch(colour: str, label: str):
    from matplotlib.patches import Patch

    return Patch(facecolor=colour, edgecolor="none", label=label)


def _note(label: str):
    """A legend line without a sample: a statement, not a drawn thing."""
    from matplotlib.lines import Line2D

    return Line2D([], [], ls="none", label=label)


# after --output_path results are saved: one PNG per gain-map task, results_<date>_<task>.png
save_beside_results = PicturesBesideResults(gain_map_tasks, map_from_results, plot_gain_maps, "retrieval-gain map")
