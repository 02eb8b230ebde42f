"""records.py: the one serialization of a request kind's result: to_state for lm-eval's --use_cache database,
from_state back with each field converted to its declared type, a state of another layout refused
(StaleStateError, a cache miss for the harness), and str() the JSON of summary() for --log_samples."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from lm_eval_longctx.records import StaleStateError, StateRecord


@dataclass
class Inner(StateRecord):
    values: np.ndarray
    count: int

    def summary(self) -> dict:
        return {"count": self.count, "total": float(self.values.sum())}


@dataclass
class Outer(StateRecord):
    name: str
    inner: Inner
    scale: float
    extra: Inner | None = None
    flag: bool = False

    def summary(self) -> dict:
        return {"name": self.name, **self.inner.summary()}


def test_a_nested_record_round_trips_through_its_state():
    record = Outer("a", Inner(np.arange(3, dtype=np.float32), 3), 0.5, Inner(np.array([7]), 1), True)
    state = record.to_state()
    assert isinstance(state["inner"], dict) and isinstance(state["extra"], dict)  # nested records as plain dicts
    back = Outer.from_state(state)
    assert isinstance(back.inner, Inner) and isinstance(back.extra, Inner)
    np.testing.assert_array_equal(back.inner.values, record.inner.values)
    assert back.inner.values.dtype == np.float32
    assert (back.name, back.inner.count, back.scale, back.flag, back.extra.count) == ("a", 3, 0.5, True, 1)


def test_from_state_converts_each_field_to_its_declared_type():
    """A state of plain lists and numbers (what a JSON or an older pickle holds) comes back typed."""
    back = Outer.from_state({"name": 5, "inner": {"values": [1.0, 2.0], "count": 2.0}, "scale": 1, "flag": 1})
    assert isinstance(back.inner.values, np.ndarray) and back.inner.values.tolist() == [1.0, 2.0]
    assert type(back.inner.count) is int and type(back.scale) is float and back.flag is True
    assert back.name == "5"


def test_an_optional_record_stays_none_and_a_missing_defaulted_field_takes_its_default():
    state = {"name": "a", "inner": {"values": [1], "count": 1}, "scale": 0.0, "extra": None}
    back = Outer.from_state(state)
    assert back.extra is None and back.flag is False


@pytest.mark.parametrize(
    "state, message",
    [
        ({"name": "a", "scale": 0.0}, "Outer: the stored state has no 'inner'"),
        ({"name": "a", "inner": [1, 2], "scale": 0.0}, "Inner: expected a dict, got list"),
        ({"name": "a", "inner": {"values": [1]}, "scale": 0.0}, "Inner: the stored state has no 'count'"),
        ([1, 2, 3], "Outer: a stored state must be a dict, got list"),
    ],
)
def test_a_state_of_another_layout_is_stale(state, message):
    with pytest.raises(StaleStateError, match=message):
        Outer.from_state(state)


def test_str_is_the_summary_as_compact_json():
    record = Outer("a", Inner(np.array([1.5, 2.5]), 2), 1.0)
    assert json.loads(str(record)) == {"name": "a", "count": 2, "total": 4.0}
    assert " " not in str(record)
