"""The interval a report shows fits its metric: a perplexity's on the log scale (never below 0, skewed upwards), an
accuracy's within [0, 1], other metrics value ± z·se."""

from __future__ import annotations

import math

import pytest

from lm_eval_longctx.report.intervals import interval, scale_of


@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("longeval_lines_ppl/answer_ppl", "log"),
        ("longppl_govreport/longppl,none", "log"),
        ("longeval_lines_ppl/answer_ppl_200", "log"),
        ("longeval_lines_acc/acc", "unit"),
        ("longeval_lines_acc/acc_200", "unit"),
        ("forgetting_curve/copy_acc@00510", "unit"),
        ("retrieval_gain/retrieval_gain", "linear"),
    ],
)
def test_the_scale_follows_the_metric(name, scale):
    assert scale_of(name) == scale


def test_a_perplexity_interval_stays_above_zero_and_is_skewed():
    # the report card used to show answer_ppl 3.566 with [-0.138, 7.269]
    low, high = interval("answer_ppl", 3.566, 1.89, 1.96)
    assert low > 0 and high - 3.566 > 3.566 - low
    assert math.isclose(math.log(high) - math.log(3.566), math.log(3.566) - math.log(low))


def test_an_accuracy_interval_stays_within_zero_and_one_and_others_are_symmetric():
    assert interval("acc", 0.9, 0.1, 1.96) == (pytest.approx(0.704), 1.0)
    assert interval("retrieval_gain", 1.0, 0.5, 2.0) == (0.0, 2.0)
    assert interval("acc", float("nan"), 0.1, 1.96) is None and interval("acc", 0.5, None, 1.96) is None
