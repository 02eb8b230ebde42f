"""One serialization for the results that request kinds return (a dataclass each).

* ``to_state()``: the fields as plain arrays, numbers and strings (nested records as nested dicts): what lm-eval's
  ``--use_cache`` database stores.
* ``from_state(state)``: the record rebuilt from that, each field converted to its declared type; a state that is
  not this record's (another version's layout) raises ``StaleStateError``, which the harness treats as a cache miss.
* ``str()``: the JSON of ``summary()``, what lm-eval writes for a response into ``--log_samples`` files.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing

import numpy as np


class StaleStateError(ValueError):
    """A stored state that does not have this record's fields (written by another version)."""


def _convert(kind, value):
    """``value`` as the declared field type ``kind`` (ndarray, int, float, bool, str, a record, or X | None)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        if value is None:
            return None
        return _convert(options[0], value) if len(options) == 1 else value
    if isinstance(kind, type) and issubclass(kind, StateRecord):
        if not isinstance(value, dict):
            raise StaleStateError(f"{kind.__name__}: expected a dict, got {type(value).__name__}")
        return kind.from_state(value)
    if kind is np.ndarray:
        return np.asarray(value)
    if kind in (int, float, bool, str):
        return kind(value)
    return value


class StateRecord:
    """Base of a dataclass whose instances a request kind returns; subclasses give ``summary() -> dict``."""

    def to_state(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.to_state() if isinstance(value, StateRecord) else value
        return out

    @classmethod
    def from_state(cls, state: dict):
        if not isinstance(state, dict):
            raise StaleStateError(f"{cls.__name__}: a stored state must be a dict, got {type(state).__name__}")
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in state:
                kwargs[f.name] = _convert(hints[f.name], state[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise StaleStateError(f"{cls.__name__}: the stored state has no {f.name!r}")
        return cls(**kwargs)

    def summary(self) -> dict:
        raise NotImplementedError

    def __str__(self) -> str:
        # lm-eval writes str() of every response into --log_samples files: JSON text a user can parse
        return json.dumps(self.summary(), separators=(",", ":"))
