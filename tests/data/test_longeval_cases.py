"""LongEval case files on a nearly full disk: whole or not there."""

from __future__ import annotations

import pytest

from lm_eval_longctx.data import longeval_cases
from tests.tiny import writes_cut_at


def test_cases_that_do_not_fit_leave_nothing(tmp_path):
    cases = longeval_cases.generate_cases([20], num_cases=2)
    with pytest.raises(OSError), writes_cut_at(500):
        longeval_cases.write_jsonl(cases, tmp_path / "cases.jsonl")
    assert list(tmp_path.iterdir()) == []
