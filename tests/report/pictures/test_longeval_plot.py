"""The LongEval picture (``report/pictures/longeval_plot.py``): it names the model and draws flat perplexities flat; on a
nearly full disk, the old picture or none, never a part of one."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.pictures import longeval_plot
from tests.tiny import writes_cut_at


def _runs() -> dict:
    acc = longeval_plot.Curve("acc", [200, 300], [900.0, 1300.0], [0.9, 0.5], [0.05, 0.07])
    ppl = longeval_plot.Curve("answer_ppl", [200, 300], [900.0, 1300.0], [1.5, 2.5], [0.1, 0.2])
    return {"m": {"acc": acc, "answer_ppl": ppl}}


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_a_picture_that_does_not_fit_leaves_the_old_one_or_none(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"longeval{suffix}"
    with pytest.raises(OSError), writes_cut_at(2000):
        longeval_plot.plot_runs(_runs(), out)
    assert list(tmp_path.iterdir()) == []
    longeval_plot.plot_runs(_runs(), out)
    before = out.read_bytes()
    assert before.startswith(b"\x89PNG" if suffix == ".png" else b"<?xml")  # the format the suffix names
    with pytest.raises(OSError), writes_cut_at(2000):
        longeval_plot.plot_runs(_runs(), out)
    assert out.read_bytes() == before and list(tmp_path.iterdir()) == [out]


def test_picture_names_the_model_and_draws_flat_perplexities_flat():
    pytest.importorskip("matplotlib")
    results = {
        "model_name": "/home/me/src/lm_eval_longctx/demo/assets/model",
        "results": {
            "longeval_lines_acc": {"acc_0004,none": 1.0, "acc_0011,none": 1.0},
            "longeval_lines_ppl": {
                # every answer found: perplexities within 1e-6 of 1
                "answer_ppl_0004,none": 1.000001,
                "answer_ppl_0011,none": 1.0000005,
                "non_answer_ppl_0004,none": 68.0,
                "non_answer_ppl_0011,none": 37.0,
                "prompt_tokens_0004,none": 290.0,
                "prompt_tokens_0011,none": 415.0,
            },
        },
    }
    label = longeval_plot.run_label(results, "fallback")
    assert label == "demo model (lm_eval_longctx)"
    fig = longeval_plot.longeval_figure({label: longeval_plot.curves_from_results(results)})
    fig.canvas.draw()
    assert fig.get_suptitle() == "LongEval lines: demo model (lm_eval_longctx)"
    answer_ppl = fig.axes[2]  # the twin axis of panel (b)
    low, high = answer_ppl.get_ylim()
    assert answer_ppl.yaxis.get_offset_text().get_text() == ""  # plain ticks, no "1e-6 + 1.000001"
    assert high - low >= 0.02 and low < 1.0 < high
