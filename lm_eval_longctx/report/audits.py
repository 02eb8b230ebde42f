"""Audit records (``lm-eval-longctx audit``'s ``audit.json``) as the report tools read them: the claimed window, the
effective length with its interval, the verdict. Parsed as data and checked field by field; the leaderboard's
claimed / effective columns and the report card's section come from these, and a model without an audit gets
none (never a guess)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .results import UnusableInput

KIND = "lm_eval_longctx.audit"
RECORD_FILE = "audit.json"


@dataclass(frozen=True)
class AuditSummary:
    path: str
    model: str  # the model as its results files name it (the leaderboard's row key)
    claimed: int
    claimed_source: str
    effective: int
    low: float | None
    high: float | None
    rule: str  # the rule that decided: relative or absolute
    effective_other: int  # by the other rule
    verdict: str
    sentence: str
    judged: dict  # the whole verdict record (per-length rows, memory lengths), for the card's table and picture
    cross_check: dict | None = None  # RULER's record (``audit --cross-check ruler``), when the audit ran it
    agreement: dict | None = None  # the audit beside RULER on the claim

    def effective_text(self) -> str:
        if self.low is None or self.high is None:
            return str(self.effective)
        return f"{self.effective} [{int(self.low)}, {int(self.high)}]"


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnusableInput(f"{where} is not a finite number")
    return float(value)


def _window_tokens(value, where: str) -> int:
    tokens = _number(value, where)
    if tokens < 1 or tokens != int(tokens):
        raise UnusableInput(f"{where} is {value!r}, not a positive whole number of tokens; rerun the audit")
    return int(tokens)


def _cross_check(data: dict, file: Path) -> dict | None:
    """RULER's record of an audit, its per-length scores checked as numbers; None when the audit ran none."""
    cross = data.get("cross_check")
    if cross is None:
        return None
    if not isinstance(cross, dict) or not isinstance(cross.get("lengths"), list):
        raise UnusableInput(f"--audit {file}: cross_check is not a RULER record; rerun the audit")
    for r in cross["lengths"]:
        if not isinstance(r, dict):
            raise UnusableInput(f"--audit {file}: cross_check.lengths holds a non-object")
        _number(r.get("length"), f"{file}: cross_check length")
        _number(r.get("score"), f"{file}: cross_check score at {r.get('length')}")
    return cross


def read_audit_summary(path) -> AuditSummary:
    """The summary of one audit: ``path`` is its folder or its ``audit.json``; anything else is an UnusableInput
    naming the file."""
    path = Path(path)
    file = path / RECORD_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UnusableInput(f"--audit {file}: not a readable audit record ({err})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise UnusableInput(f'--audit {file}: not an audit record (no "kind": "{KIND}"); give an audit\'s folder')
    try:
        judged = data["verdict"]
        window = data["window"]
        rule = judged["rules"]["decides"]
        other = "absolute" if rule == "relative" else "relative"
        decided = judged["effective"][rule]
        low = None if decided.get("low") is None else _number(decided["low"], f"{file}: effective.{rule}.low")
        high = None if decided.get("high") is None else _number(decided["high"], f"{file}: effective.{rule}.high")
        return AuditSummary(
            str(file),
            str(data.get("results_model") or data["model"]),
            _window_tokens(window["tokens"], f"{file}: window.tokens"),
            str(window.get("source", "")),
            int(_number(decided["value"], f"{file}: effective.{rule}.value")),
            low,
            high,
            str(rule),
            int(_number(judged["effective"][other]["value"], f"{file}: effective.{other}.value")),
            str(judged["verdict"]),
            str(judged["sentence"]),
            judged,
            _cross_check(data, file),
            data.get("agreement") if isinstance(data.get("agreement"), dict) else None,
        )
    except (KeyError, TypeError) as err:
        raise UnusableInput(f"--audit {file}: the record lacks {err}; rerun the audit or its --from-run") from None


def read_audits(paths) -> list[AuditSummary]:
    out = [read_audit_summary(p) for p in paths]
    models = [a.model for a in out]
    twice = sorted({m for m in models if models.count(m) > 1})
    if twice:
        raise UnusableInput(f"--audit: two audits of {twice[0]!r}; give one per model")
    return out
