"""The retrieval-gain map picture on a nearly full disk: the old picture or none, never a part of one."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.report.pictures import gain_map
from tests.tiny import writes_cut_at


def _map() -> gain_map.GainMap:
    gain = np.random.default_rng(0).uniform(-3.0, 6.0, (3, 4))
    return gain_map.GainMap(
        "m", np.array([256, 512, 1024]), np.array([0, 33, 66, 100]), gain, np.zeros_like(gain), 512.0, 512.0, 0.5, 0.5
    )


def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "results_x_retrieval_gain_map.png"
    with pytest.raises(OSError), writes_cut_at(2000):
        gain_map.plot_gain_maps([_map()], png)
    assert list(tmp_path.iterdir()) == []
    gain_map.plot_gain_maps([_map()], png)
    before = png.read_bytes()
    with pytest.raises(OSError), writes_cut_at(2000):
        gain_map.plot_gain_maps([_map()], png)
    assert png.read_bytes() == before and list(tmp_path.iterdir()) == [png]
