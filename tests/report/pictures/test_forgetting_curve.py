"""The forgetting-curve picture on a nearly full disk: the old picture or none, never a part of one."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.report.pictures import forgetting_curve
from tests.tiny import writes_cut_at


def _curve() -> forgetting_curve.ForgettingCurve:
    lengths = np.array([16, 64, 256, 1024], dtype=np.int64)
    copy, lm, std = np.linspace(1.0, 0.3, 4), np.full(4, 0.03), np.full(4, 0.08)
    return forgetting_curve.ForgettingCurve("m", lengths, copy, std, lm, std, np.zeros(4, bool), 64, 256)


def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "results_x_forgetting_curve.png"
    with pytest.raises(OSError), writes_cut_at(2000):
        forgetting_curve.plot_forgetting_curves([_curve()], png)
    assert list(tmp_path.iterdir()) == []  # not a 0-byte or cut picture
    forgetting_curve.plot_forgetting_curves([_curve()], png)
    before = png.read_bytes()
    with pytest.raises(OSError), writes_cut_at(2000):
        forgetting_curve.plot_forgetting_curves([_curve()], png)
    assert png.read_bytes() == before and list(tmp_path.iterdir()) == [png]
