"""The retrieval-gain tasks' sequences (``data/retrieval_cases.py``): anchors, conditions and cells built token by
token as the tasks document them."""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import pytest

from lm_eval_longctx.data import retrieval_cases
from lm_eval_longctx.engine import scoring
from lm_eval_longctx.tasks import retrieval_gain, retrieval_gain_map
from tests.tiny import load

# a ladder of three lengths, three depths, query 6 and answer 5 tokens
MAP_SETTINGS = {"context_lengths": [60, 120, 240], "depths": [0, 50, 100], "query_tokens": 6, "answer_tokens": 5}


def test_the_examples_in_the_docstrings_run():
    assert doctest.testmod(retrieval_cases).failed == 0


# ------------------------------------------------------------------ retrieval_gain


@pytest.mark.parametrize("spacing", ["endpoints", "centered"])
def test_anchors_are_deterministic_distinct_and_inside_the_interval(spacing):
    for T in list(range(60, 400, 7)) + [8192, 8188, 5000]:
        for n in (1, 2, 3, 5):
            U = T - 24 - 24
            lo, hi = math.ceil(Fraction(1, 10) * U), math.floor(Fraction(6, 10) * U)
            a = retrieval_cases.choose_anchors(T, 24, 24, n, 0.1, 0.6, spacing)
            assert a == retrieval_cases.choose_anchors(T, 24, 24, n, 0.1, 0.6, spacing)
            assert len(set(a)) == n and a == sorted(a) and lo <= a[0] and a[-1] <= hi
    assert retrieval_cases.choose_anchors(8192, 24, 24, 2) == [815, 4886]  # U = 8144: 814.4 -> 815, 4886.4 -> 4886
    assert retrieval_cases.choose_anchors(8188, 24, 24, 2) == [814, 4884]  # U = 8140: exactly 814 (no float round-up)
    assert retrieval_cases.choose_anchors(8192, 24, 24, 2, spacing="centered") == [1832, 3868]
    with pytest.raises(scoring.ScoringError, match="no room for 2 distinct anchors"):
        retrieval_cases.choose_anchors(50, 24, 24, 2)


def gain_settings(**kw):
    return retrieval_gain.resolve_settings({"doc_tokens": 250, "query_tokens": 5, "answer_tokens": 4, **kw})


def test_conditions_are_built_token_by_token_as_documented():
    doc = list(range(100, 400))  # 300 tokens, truncated to 250
    case = retrieval_cases.retrieval_case(doc, gain_settings(), lead_ids=[1], separator_ids=[7, 8])
    U = 250 - 9
    assert case.anchors == [math.ceil(U / 10), math.floor(6 * U / 10)] == [25, 144]
    assert (case.n_doc_tokens, case.n_source_tokens, case.answer_tokens) == (250, 300, 4)
    [(prefix, idx)] = case.groups  # one shared prefix: [BOS] document separator
    assert prefix == [1] + doc[:250] + [7, 8] and idx == [0, 1]
    for a, cont, without in zip(case.anchors, case.continuations, case.without):
        assert cont == doc[a : a + 9]  # Q (5) then A (4)
        assert without == [1] + doc[a : a + 9]  # [BOS] Q A
        # the document holds this Q A at the anchor (after the BOS): what a retriever copies
        full = prefix + cont
        assert full[1 + a : 1 + a + 9] == cont
    assert case.max_with_length == 1 + 250 + 2 + 9
    # before_anchor: the document up to the anchor, then Q A (no earlier copy to find)
    case = retrieval_cases.retrieval_case(
        doc, gain_settings(with_context="before_anchor"), lead_ids=[], separator_ids=[]
    )
    assert [g[0] for g in case.groups] == [doc[:25], doc[:144]] and [g[1] for g in case.groups] == [[0], [1]]
    assert case.without == [doc[25:34], doc[144:153]]


def test_bos_follows_the_tokenizer_unless_set(model_dirs):
    _, tok = load(model_dirs["a"])  # its tokenizer adds <s>
    assert (
        retrieval_cases.lead_token_ids(tok, "auto")
        == [tok.bos_token_id]
        == retrieval_cases.lead_token_ids(tok, "always")
    )
    assert retrieval_cases.lead_token_ids(tok, "never") == []
    assert retrieval_gain.resolve_settings({"bos": False})["bos"] == "never"
    assert retrieval_gain.resolve_settings({"bos": "true"})["bos"] == "always"


# ------------------------------------------------------------------ retrieval_gain_map


def test_cell_anchors_round_halves_up_and_stay_inside():
    # U = 100 - 6 - 5 = 89: 0.5 * 89 = 44.5 -> 45 (halves up, not to even), 0.1 * 89 = 8.9 -> 9
    assert retrieval_cases.cell_anchors(100, 50, 6, 5) == [45]
    assert retrieval_cases.cell_anchors(100, 10, 6, 5) == [9]
    assert retrieval_cases.cell_anchors(100, 0, 6, 5) == [0]
    assert retrieval_cases.cell_anchors(100, 100, 6, 5) == [89]  # Q A are x[89:100], the last tokens of x[0:L]
    assert retrieval_cases.cell_anchors(8192, 50, 24, 24) == [4072]
    # several anchors, q + r apart; a deep cell's group moves back so that its last Q A ends by L
    assert retrieval_cases.cell_anchors(100, 50, 6, 5, 3) == [45, 56, 67]
    assert retrieval_cases.cell_anchors(100, 100, 6, 5, 3, 7) == [75, 82, 89]
    for L in range(11, 300, 13):
        for d in range(0, 101, 7):
            for n, s in ((1, None), (2, 3), (4, 11)):
                a = retrieval_cases.cell_anchors(L, d, 6, 5, n, s) if (n - 1) * (s or 11) + 11 <= L else None
                if a is not None:
                    assert 0 <= a[0] and a[-1] + 11 <= L and len(a) == n
    with pytest.raises(scoring.ScoringError, match="no room"):
        retrieval_cases.cell_anchors(10, 50, 6, 5)


def map_settings(**kw):
    return retrieval_gain_map.resolve_settings({**MAP_SETTINGS, **kw})


def test_conditions_are_built_token_by_token():
    doc = list(range(100, 400))
    s = map_settings(anchors_per_cell=2)
    case = retrieval_cases.map_case(doc, s, [60, 120, 240], lead_ids=[1], separator_ids=[7])
    assert case.prefix == [1] + doc[:240]
    assert case.anchors.shape == (3, 3, 2)
    for i, L in enumerate([60, 120, 240]):
        U = L - 11
        for j, d in enumerate([0, 50, 100]):
            a0 = min(math.floor(d / 100 * U + 0.5), U - 11)
            assert case.anchors[i, j].tolist() == [a0, a0 + 11]
            for k, a in enumerate(case.anchors[i, j]):
                qa = doc[a : a + 11]
                assert case.continuations[i][2 * j + k] == [7] + qa  # sep Q A after [BOS] x[0:L]
                assert case.without[i][2 * j + k] == [1] + qa  # [BOS] Q A
                assert a + 11 <= L  # Q A lie inside x[0:L]
    assert case.max_with_length == 1 + 240 + 1 + 11
    with pytest.raises(scoring.ScoringError, match="fewer than the longest context length 240"):
        retrieval_cases.map_case(doc[:239], s, [60, 120, 240], [1], [7])
