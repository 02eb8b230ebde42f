"""The retrieval-gain map's numbers (``metrics/gain_map.py``): the effective lengths' rules and the cells' gains."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_longctx.metrics import gain_map


def test_effective_length_rules():
    L = [1, 2, 4, 8, 16]
    g = [1.0, 0.8, 0.4, 0.6, 0.1]
    assert gain_map.effective_length(L, g, fraction=0.5) == 2  # 0.4 < 0.5: stops at 4
    assert gain_map.effective_length(L, g, fraction=0.5, rule="largest") == 8
    assert gain_map.effective_length(L, g, fraction=0.4) == 2  # a tie does not pass
    assert gain_map.effective_length(L, g, threshold=0.3) == 8
    assert gain_map.effective_length(L, g, threshold=1.0) == 0
    assert gain_map.effective_length(L, [-0.1, 0.5, 0.5, 0.5, 0.5], fraction=0.5) == 0  # no gain to keep
    assert gain_map.effective_length(L, [0.0] * 5, fraction=0.1) == 0
    # a shortest-length gain that does not clear the absolute threshold is noise: no effective length
    assert gain_map.effective_length(L, [0.03, 0.02, 0.0, 0.0, 0.0], fraction=0.5) == 2
    assert gain_map.effective_length(L, [0.03, 0.02, 0.0, 0.0, 0.0], fraction=0.5, base_minimum=0.5) == 0
    assert gain_map.effective_length(L, g, fraction=0.5, base_minimum=0.5) == 2
    with pytest.raises(ValueError, match="exactly one"):
        gain_map.effective_length(L, g)
    # items of one gain per length (runs logged before the items held each depth) read as one depth
    items = [(1.0, 0.9, 0.1), (0.6, 0.1, 0.1)]  # mean (0.8, 0.5, 0.1)
    assert gain_map.effective_length_from_docs(items, lengths=(1, 2, 4), fraction=0.6) == 2.0
    assert gain_map.effective_length_abs_from_docs(items, lengths=(1, 2, 4), threshold=0.6) == 1.0


def test_a_gate_fails_its_lengths_but_leaves_the_relative_base():
    L = [1, 2, 4, 8]
    g = [1.0, 0.9, 0.8, 0.7]
    assert gain_map.effective_length(L, g, fraction=0.5, gate=[True, True, False, True]) == 2
    assert gain_map.effective_length(L, g, fraction=0.5, rule="largest", gate=[True, True, False, True]) == 8
    # the base is the shortest length's gain even where the gate fails it
    assert gain_map.effective_length(L, g, fraction=0.5, rule="largest", gate=[False, True, True, True]) == 8
    with pytest.raises(ValueError, match="one gain"):
        gain_map.effective_length(L, g, threshold=0.5, gate=[True])


def test_every_depth_must_reach_each_length():
    # 2 documents x 3 lengths x 3 depths (10, 50, 90): the near depth keeps its gain, the far ones lose it
    gains = np.array(
        [
            [[2.0, 2.1, 2.2], [0.1, 1.9, 2.8], [-0.6, -0.2, 2.9]],
            [[1.8, 1.9, 2.0], [0.3, 1.7, 2.6], [-0.4, -0.4, 2.7]],
        ]
    )
    np.testing.assert_allclose(gain_map.weakest_depth_gain(gains), [1.9, 0.2, -0.5])
    L = [1024, 2048, 4096]
    mean = gains.mean(axis=(0, 2))  # 2.0, 1.57, 0.67: the mean alone passes every length by either rule
    assert gain_map.effective_length(L, mean, fraction=0.3, base_minimum=0.5) == 4096
    assert gain_map.effective_length(L, mean, threshold=0.5) == 4096
    # the absolute rule: every depth above the threshold
    assert gain_map.effective_length_by_depth(L, gains, threshold=0.5) == 1024
    assert gain_map.effective_length_by_depth(L, gains, threshold=0.1) == 2048
    # the relative rule: the mean keeps its share and every depth clears the floor (base_minimum, at least 0)
    assert gain_map.effective_length_by_depth(L, gains, fraction=0.3) == 2048
    assert gain_map.effective_length_by_depth(L, gains, fraction=0.3, base_minimum=0.5) == 1024
    assert gain_map.effective_length_by_depth(L, gains, fraction=0.8) == 1024  # 1.57 < 0.8 x 2.0
    assert gain_map.effective_length_by_depth(L, gains, fraction=0.1, base_minimum=1.95) == 0
    # a gate fails its lengths as in effective_length
    assert gain_map.effective_length_by_depth(L, gains, threshold=0.1, gate=[True, False, True]) == 1024
    # a NaN cell fails its length
    holed = gains.copy()
    holed[0, 1, 0] = np.nan
    assert gain_map.effective_length_by_depth(L, holed, threshold=0.1) == 1024
    assert gain_map.effective_length_by_depth(L, holed, fraction=0.3) == 1024
    # the aggregations take per-document items of per-length per-depth gains, as the task logs them
    items = [tuple(tuple(row) for row in doc) for doc in gains.tolist()]
    assert gain_map.effective_length_from_docs(items, lengths=tuple(L), fraction=0.3) == 2048.0
    assert gain_map.effective_length_from_docs(items, lengths=tuple(L), fraction=0.3, base_minimum=0.5) == 1024.0
    assert gain_map.effective_length_abs_from_docs(items, lengths=tuple(L), threshold=0.1) == 2048.0
    with pytest.raises(ValueError, match="one gain per depth"):
        gain_map.effective_length_from_docs(items, lengths=(1024, 2048), fraction=0.4)
    with pytest.raises(ValueError, match="one gain per depth"):
        gain_map.effective_length_abs_from_docs([items[0], items[1][:2]], lengths=tuple(L), threshold=0.1)
    with pytest.raises(ValueError, match="a document and a depth"):
        gain_map.weakest_depth_gain(np.zeros((0, 3, 3)))


@pytest.mark.parametrize("rules", [{"fraction": 0.5, "base_minimum": 0.5}, {"threshold": 0.5}])
def test_a_reach_bounded_model_fails_where_a_model_that_reaches_passes(rules):
    """Issue 59's gains at depths 10 / 50 / 90: a checkpoint limited to a 512-token sliding window (audited at 16k:
    lengths 2048, 4096), whose mean over depths (0.87, 0.52) passes both rules, and SmolLM2-135M-Instruct (1024 ...
    8192 tokens read: docs/real-models.md), whose farthest depth at 8192 keeps 0.88 nats of its 2.6."""
    window = np.array([[[0.07, -0.20, 2.74], [-0.59, -0.70, 2.84]]])
    assert gain_map.effective_length([2048, 4096], window.mean(axis=(0, 2)), **rules) == 4096
    assert gain_map.effective_length_by_depth([2048, 4096], window, **rules) == 0
    smollm2 = np.array([[[2.6, 2.5, 2.2], [2.6, 2.0, 2.6], [3.0, 2.0, 2.6], [0.88, 1.7, 2.2], [-4.5, -4.3, -4.2]]])
    assert gain_map.effective_length_by_depth([1024, 2048, 4096, 8192, 16384], smollm2, **rules) == 8192


def test_cell_gains():
    w = np.log(np.full((2, 3, 2, 4), 0.5))
    wo = np.log(np.full((2, 3, 2, 4), 0.25))
    wo[1, 2, 1] = np.log(0.125)
    g = gain_map.cell_gains(w, wo)
    assert g.shape == (2, 3)
    np.testing.assert_allclose(g[0, 0], math.log(2))
    np.testing.assert_allclose(g[1, 2], (math.log(2) + math.log(4)) / 2)
    with pytest.raises(ValueError, match="finite"):
        gain_map.cell_gains(w, np.full_like(wo, -np.inf))
