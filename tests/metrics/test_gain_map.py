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
    items = [(1.0, 0.9, 0.1), (0.6, 0.1, 0.1)]  # mean (0.8, 0.5, 0.1)
    assert gain_map.effective_length_from_docs(items, lengths=(1, 2, 4), fraction=0.6) == 2.0
    assert gain_map.effective_length_abs_from_docs(items, lengths=(1, 2, 4), threshold=0.6) == 1.0


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
