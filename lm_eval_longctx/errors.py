"""Errors that tell the user what could not be had and the ways out (no lm-eval import)."""

from __future__ import annotations


class ResourceUnavailableError(RuntimeError):
    """A dataset, tokenizer or model that cannot be fetched or read (offline, gated, missing, malformed)."""


def first_line(err: BaseException) -> str:
    """``Type: first line of the message``: the cause in one line, not a 30-line traceback."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
