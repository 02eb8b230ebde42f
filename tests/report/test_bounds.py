"""report/bounds.py: an effective or memory length that reaches the longest length its run tested is a lower bound;
the tested lengths come from the per-length metrics with a number, else from the recorded settings."""

from __future__ import annotations

import doctest

from lm_eval_longctx.report import bounds


def test_the_docstring_examples_run():
    assert doctest.testmod(bounds).failed == 0


def test_the_lengths_tested_are_the_per_length_metrics_with_a_number():
    entries = {
        "gain@L00256,none": 1.0,
        "gain@L00976,none": 0.9,
        "gain@L01952,none": float("nan"),  # a length that did not run
        "gain@L00976_d50,none": 0.8,  # a cell, not a length
        "effective_length,none": 976.0,
    }
    assert sorted(bounds.tested_lengths("effective_length", entries) or []) == [256, 976]
    assert bounds.metric_is_lower_bound("effective_length", 976.0, entries)
    assert not bounds.metric_is_lower_bound("effective_length", 256.0, entries)
    assert bounds.tested_lengths("gain", entries) is None  # not a length
    assert not bounds.metric_is_lower_bound("gain", 976.0, entries)


def test_without_per_length_metrics_the_recorded_settings_say_what_was_tested():
    entries = {"fine_memory_length,none": 512.0}
    assert bounds.metric_is_lower_bound("fine_memory_length", 512.0, entries, {"lengths": [128, 512]})
    assert not bounds.metric_is_lower_bound("fine_memory_length", 512.0, entries, {"lengths": [128, 512, 1024]})
    assert not bounds.metric_is_lower_bound("fine_memory_length", 512.0, entries)  # nothing says what was tested
    both = {"lengths_used": [976], "context_lengths": [128, 2048]}  # the lengths used win over those asked for
    assert bounds.metric_is_lower_bound("effective_length_abs", 976.0, {}, both)


def test_a_bound_is_marked():
    assert bounds.bound_text("976", True) == "≥ 976" and bounds.bound_text("976", False) == "976"


def test_the_results_record_names_each_length_metric_and_its_longest_length():
    results = {
        "results": {
            "forgetting_curve": {
                "fine_memory_length,none": 254.0,
                "coarse_memory_length,none": 510.0,
                "copy_acc@00126,none": 1.0,
                "copy_acc@00254,none": 1.0,
                "copy_acc@00510,none": 0.7,
            },
            "longppl_govreport": {"longppl,none": 3.2},
            "retrieval_gain_map": {"effective_length,none": 976.0},
        },  # fmt: skip
        "configs": {"retrieval_gain_map": {"metadata": {"longctx_settings": {"lengths_used": [208, 464, 976]}}}},
    }
    record = bounds.bounds_record(results)
    assert record == {
        "forgetting_curve": {
            "fine_memory_length": {"value": 254.0, "longest_tested": 510, "lower_bound": False},
            "coarse_memory_length": {"value": 510.0, "longest_tested": 510, "lower_bound": True},
        },
        "retrieval_gain_map": {"effective_length": {"value": 976.0, "longest_tested": 976, "lower_bound": True}},
    }
    bounds.add_bounds(results)
    assert results[bounds.BOUNDS_KEY] == record
    empty = {"results": {"longppl_govreport": {"longppl,none": 3.2}}}
    bounds.add_bounds(empty)
    assert bounds.BOUNDS_KEY not in empty
