"""The LongEval picture on a nearly full disk: the old picture or none, never a part of one."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.pictures import longeval
from tests.tiny import writes_cut_at


def _runs() -> dict:
    acc = longeval.Curve("acc", [200, 300], [900.0, 1300.0], [0.9, 0.5], [0.05, 0.07])
    ppl = longeval.Curve("answer_ppl", [200, 300], [900.0, 1300.0], [1.5, 2.5], [0.1, 0.2])
    return {"m": {"acc": acc, "answer_ppl": ppl}}


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"longeval{suffix}"
    with pytest.raises(OSError), writes_cut_at(2000):
        longeval.plot_runs(_runs(), out)
    assert list(tmp_path.iterdir()) == []
    longeval.plot_runs(_runs(), out)
    before = out.read_bytes()
    assert before.startswith(b"\x89PNG" if suffix == ".png" else b"<?xml")  # the format the suffix names
    with pytest.raises(OSError), writes_cut_at(2000):
        longeval.plot_runs(_runs(), out)
    assert out.read_bytes() == before and list(tmp_path.iterdir()) == [out]
