"""Audit records (``lm-eval-longctx audit``'s ``audit.json``) as the report tools read them: the claimed window, the
effective length with its interval, the verdict. Parsed as data and checked field by field; the leaderboard's
claimed / effective columns and the report card's section come from these, and a model without an audit gets
none (never a guess).

An audit is joined to a run on the checkpoint itself (:func:`audits_by_model`): the model names the two recorded
are equal, or name one local folder (resolved against the current directory, links followed), or two local folders
holding the same checkpoint (config.json, weights and tokenizer files of the same names and contents)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .. import output_dirs
from .bounds import bound_text, is_lower_bound
from .results import UnusableInput
from .text import visible

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
    recorded_models: tuple[str, ...] = ()  # every name the audit recorded for its model (what a run is joined on)

    @property
    def effective_lower_bound(self) -> bool:
        """The effective length reaches the longest length the audit tested: the model may use more."""
        tested = self.judged.get("tested_lengths")
        numbers = [x for x in tested if isinstance(x, (int, float))] if isinstance(tested, list) else []
        return is_lower_bound(self.effective, numbers)

    def effective_text(self) -> str:
        value = bound_text(str(self.effective), self.effective_lower_bound)
        if self.low is None or self.high is None:
            return value
        return f"{value} [{int(self.low)}, {int(self.high)}]"


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
            tuple(dict.fromkeys(str(data[k]) for k in ("results_model", "model") if data.get(k))),
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


# the files that make a checkpoint what it is: its config, weights and tokenizer
CHECKPOINT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".model", ".tiktoken", ".json", ".txt", ".jinja")


def checkpoint_folder(name: str) -> Path | None:
    """The local folder a recorded model name points to, resolved against the current directory with links
    followed; None for a hub id or a folder this machine does not have."""
    if not name:
        return None
    try:
        path = Path(name).expanduser()
        return path.resolve() if path.is_dir() else None
    except (OSError, RuntimeError):  # a name this machine cannot resolve names no folder of it
        return None


def _checkpoint_files(folder: Path) -> list[tuple[str, int, Path]]:
    """(name, size, path) of the checkpoint's files, by name; none without a config.json."""
    if not (folder / "config.json").is_file():
        return []
    out = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.suffix in CHECKPOINT_FILE_SUFFIXES:
            out.append((path.name, path.stat().st_size, path))
    return out


class CheckpointMatcher:
    """Whether two recorded model names are one checkpoint (the module's rule); each folder is read once."""

    def __init__(self) -> None:
        self._folders: dict[str, Path | None] = {}
        self._files: dict[Path, list[tuple[str, int, Path]]] = {}
        self._digests: dict[Path, str] = {}

    def folder(self, name: str) -> Path | None:
        if name not in self._folders:
            self._folders[name] = checkpoint_folder(name)
        return self._folders[name]

    def _listing(self, folder: Path) -> list[tuple[str, int, Path]]:
        if folder not in self._files:
            try:
                self._files[folder] = _checkpoint_files(folder)
            except OSError:
                self._files[folder] = []
        return self._files[folder]

    def _digest(self, folder: Path) -> str:
        if folder not in self._digests:
            h = hashlib.sha256()
            for name, _, path in self._listing(folder):
                h.update(f"{name}\0{output_dirs.file_sha256(path)}\n".encode())
            self._digests[folder] = h.hexdigest()
        return self._digests[folder]

    def same(self, a: str, b: str) -> bool:
        if a == b:
            return True
        fa, fb = self.folder(a), self.folder(b)
        if fa is None or fb is None:
            return False
        if fa == fb:
            return True
        la, lb = self._listing(fa), self._listing(fb)
        # the contents are hashed only when the names and sizes already agree
        if not la or [(n, size) for n, size, _ in la] != [(n, size) for n, size, _ in lb]:
            return False
        try:
            return self._digest(fa) == self._digest(fb)
        except OSError:
            return False


def audits_by_model(models, audits: list[AuditSummary]) -> tuple[dict[str, AuditSummary], list[AuditSummary]]:
    """Each run's model (the name its results record) -> the audit of its checkpoint, and the audits that match no
    run. Two audits of one run's checkpoint are refused."""
    matcher = CheckpointMatcher()
    matched: dict[str, AuditSummary] = {}
    for model in dict.fromkeys(models):
        found = [a for a in audits if any(matcher.same(model, name) for name in a.recorded_models or (a.model,))]
        if len(found) > 1:
            raise UnusableInput(
                f"--audit: {len(found)} audits of the checkpoint of {model!r} ({', '.join(a.path for a in found)}); "
                "give one per checkpoint"
            )
        if found:
            matched[model] = found[0]
    used = {id(a) for a in matched.values()}
    return matched, [a for a in audits if id(a) not in used]


def unmatched_text(audit: AuditSummary) -> str:
    """What a report tool says of an audit that matches no run."""
    return (
        f"--audit {visible(audit.path)}: its model {visible(audit.model)} matches no run given (by name, resolved "
        "folder, or config and weights): no run's numbers sit beside it"
    )
