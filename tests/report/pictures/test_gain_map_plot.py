"""The retrieval-gain map picture (``report/pictures/gain_map_plot.py``), from a map (no model): the effective lengths
marked inside the axes and named, the cells' values printed readably or not at all; on a nearly full disk, the old
picture or none, never a part of one."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from lm_eval_longctx.report.pictures import gain_map_plot
from tests.tiny import writes_cut_at


def _map() -> gain_map_plot.GainMap:
    gain = np.random.default_rng(0).uniform(-3.0, 6.0, (3, 4))
    return gain_map_plot.GainMap(
        "m", np.array([256, 512, 1024]), np.array([0, 33, 66, 100]), gain, np.zeros_like(gain), 512.0, 512.0, 0.5, 0.5
    )


def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "results_x_retrieval_gain_map.png"
    with pytest.raises(OSError), writes_cut_at(2000):
        gain_map_plot.plot_gain_maps([_map()], png)
    assert list(tmp_path.iterdir()) == []
    gain_map_plot.plot_gain_maps([_map()], png)
    before = png.read_bytes()
    with pytest.raises(OSError), writes_cut_at(2000):
        gain_map_plot.plot_gain_maps([_map()], png)
    assert png.read_bytes() == before and list(tmp_path.iterdir()) == [png]


def _map_of(lengths, depths, effective, effective_abs, seed=0):
    gain = np.random.default_rng(seed).uniform(-3.0, 6.0, (len(lengths), len(depths)))
    return gain_map_plot.GainMap(
        "m", np.array(lengths), np.array(depths), gain, np.zeros_like(gain), effective, effective_abs, 0.5, 0.5
    )


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _mark_xs(ax):
    """Display x of the effective-length lines (the only lines of a panel)."""
    return sorted(float(line.get_transform().transform((line.get_xdata()[0], 0))[0]) for line in ax.get_lines())


LADDER, GRID = [256, 512, 1024, 2048, 4096], list(range(0, 100, 10))


def test_picture_marks_effective_lengths_inside_the_axes_and_names_them():
    pytest.importorskip("matplotlib")
    # both effective lengths at the longest length: their cell edge is the axes' right border
    m = _map_of(LADDER, GRID, 4096, 4096)
    m.gain[2, 3] = np.nan
    fig = gain_map_plot.gain_map_figure([m])
    ax = fig.axes[0]
    fig.canvas.draw()
    box, half_width = ax.get_window_extent(), gain_map_plot._MARK_WIDTH_PT / 2 * fig.dpi / 72
    xs = _mark_xs(ax)
    assert len(xs) == 2 and box.x0 < xs[0] - half_width and xs[1] + half_width < box.x1 - 1  # inside, off the border
    assert xs[1] - xs[0] > 2 * half_width  # side by side, not on top of each other
    assert _legend(ax) == [
        "effective length ≥ 4096 (gain > 0.5 × gain at 256)",
        "absolute effective length ≥ 4096 (gain > 0.5)",
        "no value in the results",
    ]
    # inside the map: each line on the right edge of its length's cell (every cell left of it passes)
    m = _map_of(LADDER, GRID, 512, 2048)
    fig = gain_map_plot.gain_map_figure([m])
    ax = fig.axes[0]
    fig.canvas.draw()
    edges = [ax.transData.transform((math.sqrt(a * b), 50))[0] for a, b in ((512, 1024), (2048, 4096))]
    assert _mark_xs(ax) == pytest.approx(edges, abs=0.5)
    # none: named in the legend, nothing drawn
    ax = gain_map_plot.gain_map_figure([_map_of(LADDER, GRID, None, None)]).axes[0]
    assert not ax.get_lines() and _legend(ax) == [
        "effective length: none (no length passes gain > 0.5 × gain at 256)",
        "absolute effective length: none (no length passes gain > 0.5)",
    ]


def test_picture_prints_cell_values_readably_or_not_at_all():
    pytest.importorskip("matplotlib")
    fig = gain_map_plot.gain_map_figure([_map_of(LADDER, GRID, 1024, 1024), _map_of(LADDER, GRID, 512, 4096, seed=1)])
    fig.canvas.draw()
    for ax in fig.axes[:2]:
        assert len(ax.texts) == len(LADDER) * len(GRID)
        cell_w = abs(float(np.diff(ax.transData.transform([(362, 0), (724, 0)])[:, 0])[0]))  # one cell's width
        for t in ax.texts:
            assert t.get_fontsize() >= 8 and re.fullmatch(r"-?\d+\.\d\d", t.get_text())
            assert t.get_window_extent().width < cell_w
    # a grid too fine for 8 pt: the values are left out, and the legend says so
    dense = _map_of([2**k for k in range(7, 19)], list(range(0, 101, 2)), 1024, None)
    ax = gain_map_plot.gain_map_figure([dense]).axes[0]
    assert not ax.texts and "cells too small to print their values" in _legend(ax)
    assert len(ax.get_yticks()) <= 21  # depth ticks thinned to what fits beside the rows


def test_long_run_labels_wrap_inside_their_panels_under_the_title():
    pytest.importorskip("matplotlib")
    maps = [_map_of(LADDER, GRID, 1024, 1024), _map_of(LADDER, GRID, 512, 512)]
    maps[0].label = "/work/experiments/SmolLM2-135M-Instruct-with-a-long-name [run-with-a-long-folder-name/out]"
    maps[1].label = "/work/experiments/SmolLM2-135M-Instruct-with-a-long-name [run-with-another-folder-name/out]"
    fig = gain_map_plot.gain_map_figure(maps)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert fig.get_suptitle() == "Retrieval-gain maps of 2 runs"
    title = fig._suptitle.get_window_extent(renderer)
    panels = [ax.title.get_window_extent(renderer) for ax in fig.axes[:2]]
    for ax, extent in zip(fig.axes[:2], panels):
        assert "\n" in ax.get_title()
        assert extent.y1 <= title.y0  # under the figure's title
        box = ax.get_window_extent(renderer)
        assert box.x0 - 20 <= extent.x0 and extent.x1 <= box.x1 + 20  # about its panel's width
    assert panels[0].x1 < panels[1].x0  # the two titles do not overprint
