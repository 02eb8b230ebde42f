"""The forgetting-curve picture (``report/pictures/forgetting_curve_plot.py``), from curves (no model): amnesia drawn only
where a length was tested beyond memory, the first and last points and their bands whole; on a nearly full disk,
the old picture or none, never a part of one."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.report.pictures import forgetting_curve_plot
from tests.tiny import writes_cut_at


def _curve() -> forgetting_curve_plot.ForgettingCurve:
    lengths = np.array([16, 64, 256, 1024], dtype=np.int64)
    copy, lm, std = np.linspace(1.0, 0.3, 4), np.full(4, 0.03), np.full(4, 0.08)
    return forgetting_curve_plot.ForgettingCurve("m", lengths, copy, std, lm, std, np.zeros(4, bool), 64, 256)


def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "results_x_forgetting_curve.png"
    with pytest.raises(OSError), writes_cut_at(2000):
        forgetting_curve_plot.plot_forgetting_curves([_curve()], png)
    assert list(tmp_path.iterdir()) == []  # not a 0-byte or cut picture
    forgetting_curve_plot.plot_forgetting_curves([_curve()], png)
    before = png.read_bytes()
    with pytest.raises(OSError), writes_cut_at(2000):
        forgetting_curve_plot.plot_forgetting_curves([_curve()], png)
    assert png.read_bytes() == before and list(tmp_path.iterdir()) == [png]


def _curve_of(fine, coarse, lengths=(16, 64, 256, 1024)):
    lengths = np.array(lengths, dtype=np.int64)
    n = len(lengths)
    copy, lm, std = np.linspace(1.0, 0.3, n), np.full(n, 0.03), np.full(n, 0.08)
    return forgetting_curve_plot.ForgettingCurve(
        "m", lengths, copy, std, lm, std, np.zeros(n, bool), fine, coarse, None, "geometric"
    )


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _region_spans(ax, name):
    return [p for p in ax.patches if p.get_label().startswith(name)]


def test_picture_draws_amnesia_only_where_a_length_was_tested_beyond_memory():
    pytest.importorskip("matplotlib")
    forgets = forgetting_curve_plot.forgetting_curve_figure([_curve_of(64, 256)]).axes[0]
    assert "amnesia (> 256)" in _legend(forgets) and len(_region_spans(forgets, "amnesia")) == 1
    assert "fine-grained memory (<= 64)" in _legend(forgets) and "coarse-grained memory (<= 256)" in _legend(forgets)
    # memory up to the longest length tested: no amnesia drawn or named, and the memory length is a lower bound
    remembers = forgetting_curve_plot.forgetting_curve_figure([_curve_of(1024, 1024)]).axes[0]
    assert not [t for t in _legend(remembers) if t.startswith("amnesia")] and not _region_spans(remembers, "amnesia")
    assert "fine-grained memory (<= 1024, longest tested)" in _legend(remembers)
    # no memory at all: amnesia everywhere
    blank = forgetting_curve_plot.forgetting_curve_figure([_curve_of(None, None)]).axes[0]
    assert _legend(blank)[-1] == "amnesia" and len(_region_spans(blank, "amnesia")) == 1


@pytest.mark.parametrize("log_x", [True, False])
def test_picture_shows_the_first_and_last_points_and_their_bands_whole(log_x):
    pytest.importorskip("matplotlib")
    curve = _curve_of(64, 256)
    fig = forgetting_curve_plot.forgetting_curve_figure([curve], log_x=log_x)
    ax = fig.axes[0]
    fig.canvas.draw()
    box = ax.get_window_extent()
    points = [line for line in ax.get_lines() if line.get_marker() in ("o", "s")]
    assert len(points) == 2
    for line in points:
        radius = (line.get_markersize() / 2 + line.get_markeredgewidth()) * fig.dpi / 72
        x = ax.transData.transform(line.get_xydata())[:, 0]
        assert x.min() - radius > box.x0 and x.max() + radius < box.x1, (log_x, x, box)
    low, high = ax.get_ylim()  # the LM band dips below 0 and the copy band rises above 1: both inside
    assert low < (curve.lm_mean - curve.lm_std).min() and high > (curve.copy_mean + curve.copy_std).max()
    if log_x:  # the tested lengths as ticks, in plain numbers
        assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "64", "256", "1024"]


def test_the_claimed_length_is_marked_at_a_whole_copy_length_and_curves_are_runs():
    pytest.importorskip("matplotlib")
    n = 4
    lengths = np.array((16, 64, 256, 1024), dtype=np.int64)
    copy, lm, std = np.linspace(1.0, 0.3, n), np.full(n, 0.03), np.full(n, 0.08)
    curve = forgetting_curve_plot.ForgettingCurve(
        "m", lengths, copy, std, lm, std, np.zeros(n, bool), 64, 256, 2048, "geometric"
    )
    ax = forgetting_curve_plot.forgetting_curve_figure([curve]).axes[0]
    # 2 l + 3 <= 2048: the longest sample that fits copies 1022 tokens, not "1022.5"
    assert "2l + 3 <= T (l = 1022)" in _legend(ax)
    two = forgetting_curve_plot.forgetting_curve_figure([_curve_of(64, 256), _curve_of(64, 256)]).axes[0]
    assert two.get_title() == "Forgetting curves of 2 runs"


def test_runs_are_named_once_under_the_plot_and_everything_fits_the_figure():
    pytest.importorskip("matplotlib")
    long_label = "/work/experiments/SmolLM2-135M-Instruct-with-a-long-name [run-with-a-long-folder-name/out]"
    a, b = _curve_of(64, 1024), _curve_of(64, 256)
    a.label, b.label = long_label, "org/b"
    fig = forgetting_curve_plot.forgetting_curve_figure([a, b])
    fig.canvas.draw()
    styles, runs = fig.legends
    assert [t.get_text() for t in styles.get_texts()] == [
        "copy accuracy",
        "LM accuracy",
        "fine memory length",
        "coarse memory length",
    ]
    texts = [t.get_text() for t in runs.get_texts()]
    # each run once, its memory lengths beside it (a bound marked), a long label wrapped
    assert texts[1] == "org/b: fine 64, coarse 256" and texts[0].endswith("fine 64, coarse ≥ 1024")
    assert "\n" in texts[0] and all(len(line) <= 60 for line in texts[0].splitlines())
    assert fig.axes[0].get_legend() is None
    box = fig.bbox
    renderer = fig.canvas.get_renderer()
    for artist in (styles, runs, fig.axes[0].xaxis.label, fig.axes[0].yaxis.label):
        extent = artist.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1
    # the runs' legend is no wider than the figure, and does not cover the plot
    assert runs.get_window_extent(renderer).y1 <= fig.axes[0].get_window_extent(renderer).y0
