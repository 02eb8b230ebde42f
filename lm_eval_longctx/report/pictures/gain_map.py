"""The retrieval-gain map read back from a results JSON (``GainMap``), and its heatmap.

matplotlib is imported only when a picture is drawn (object-oriented API on an Agg canvas); no torch, no
lm-eval: a results JSON is plain data. The numbers (per-cell gains, effective lengths, metric names) are
``lm_eval_longctx.metrics.gain_map``.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("lm_eval_longctx")

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
    from .forgetting_curve import model_label, task_results

    task, res, settings = task_results(results, gain_map_tasks(results), task, "retrieval-gain map", "gain@L..._d..")
    cells = {}
    for key, value in res.items():
        m = _CELL.match(key)
        if m and m.group(3) == "none":
            L, d = int(m.group(1)), int(m.group(2))
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


def plot_gain_maps(
    maps: list[GainMap], out_path, title: str | None = None, limit: float | None = None, annotate: bool | None = None
):
    """Write a PNG: one heatmap per model, side by side (x: context length, log scale; y: depth),
    on ONE diverging colour scale centred at 0 (red: the context hurts, blue: it helps), the
    effective lengths marked (dashed: relative, dotted: absolute) at the right edge of their cells."""
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
        mesh = ax.pcolormesh(xe, ye, np.ma.masked_invalid(m.gain.T), cmap="RdBu", norm=norm, shading="flat")
        ax.set_xscale("log")
        ax.set_xticks(m.lengths)
        ax.set_xticklabels([f"{L // 1024}k" if L % 1024 == 0 else str(L) for L in m.lengths], fontsize=8)
        ax.minorticks_off()
        ax.set_yticks(m.depths)
        ax.set_xlim(xe[0], xe[-1])
        ax.set_ylim(ye[-1], ye[0])  # depth 0 (start of the context) at the top, as needle grids draw it
        ax.set_xlabel("context length L (tokens of the document before Q A)")
        show_values = annotate if annotate is not None else m.gain.size <= 80
        if show_values:
            for i, L in enumerate(m.lengths):
                for j, d in enumerate(m.depths):
                    g = m.gain[i, j]
                    if np.isfinite(g):
                        ax.text(
                            L,
                            d,
                            f"{g:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="white" if abs(g) > 0.6 * vmax else "black",
                        )
        marks = []

        def right_edge(length):  # the line closes the cell of that length: every cell left of it passes
            i = int(np.searchsorted(m.lengths, length))
            return xe[i + 1] if i < len(m.lengths) and m.lengths[i] == length else length

        if m.effective_length:
            ax.axvline(right_edge(m.effective_length), color="black", lw=2.0, ls="--")
            rel = f"> {m.fraction:g} x gain at {int(m.lengths[0])}" if m.fraction is not None else "relative"
            marks.append(f"effective length {int(m.effective_length)} ({rel})")
        else:
            marks.append("effective length: none")
        if m.effective_length_abs:
            ax.axvline(right_edge(m.effective_length_abs), color="dimgray", lw=1.5, ls=":")
            thr = f"gain > {m.threshold:g}" if m.threshold is not None else "absolute"
            marks.append(f"absolute {int(m.effective_length_abs)} ({thr})")
        else:
            marks.append("absolute: none")
        ax.set_title("\n".join([m.label, *marks]), fontsize=8.5)
    axes[0].set_ylabel("depth of the anchor (% of L - q - r)")
    assert mesh is not None  # every panel draws one
    cbar = fig.colorbar(mesh, ax=list(axes), fraction=0.035 if n > 1 else 0.05, pad=0.02)
    cbar.set_label("retrieval gain (nats / answer token)\nblue: context helps, red: it hurts")
    # above the three-line panel titles (bbox_inches="tight" keeps it in the picture)
    fig.suptitle(
        title or ("Retrieval-gain map" if n == 1 else f"Retrieval-gain maps of {n} models"), fontsize=11, y=1.06
    )
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, bbox_inches="tight")
    return out_path


def save_beside_results(results: dict, results_file) -> list[Path]:
    """After ``--output_path`` results are saved: one PNG per gain-map task, named after the
    results file (``results_<date>_<task>.png``)."""
    results_file = Path(results_file)
    written = []
    for task in gain_map_tasks(results):
        png = results_file.with_name(f"{results_file.stem}_{task}.png")
        plot_gain_maps([map_from_results(results, task)], png)
        log.info("retrieval-gain map of %s written to %s", task, png)
        written.append(png)
    return written
