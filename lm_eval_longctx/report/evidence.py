"""Thin evidence, named: a task whose numbers rest on few documents, few samples per tested length or few key tokens.
The report card and the leaderboard say so beside the numbers; each results JSON a run saves holds the same reading
under ``longctx_evidence`` (``evidence_record``): per task, what its numbers rest on and the reasons it is thin.

The counts come from the results themselves: lm-eval's ``n-samples`` (documents scored), the sizes a task's
``longctx_settings`` record per tested length (``samples_per_length``, ``num_cases``), and the key tokens per document
LongPPL reports (``n_key_tokens``, a mean over documents).
"""

from __future__ import annotations

import math

from .bounds import recorded_settings
from .paired import MIN_PAIRED_DOCS

EVIDENCE_KEY = "longctx_evidence"
THIN_EVIDENCE = "thin evidence"  # how the pages introduce a reason
# below this many documents (or samples at one length) the gate cannot pair runs (paired.py), and a mean over them
# moves by a large share of its spread from one set of documents to the next
MIN_DOCUMENTS = MIN_PAIRED_DOCS
# below this many key tokens, the mean key-token NLL has a standard error above 0.2 nats at a per-token spread of
# 2 nats: LongPPL itself moves by about 20% from one set of documents to the next
MIN_KEY_TOKENS = 100
# longctx_settings keys that give a task's samples at each tested length, and what they count
PER_LENGTH_SETTINGS = {
    "samples_per_length": "samples per copy length",
    "num_cases": "cases per size",
}


def _count(x) -> int | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return int(round(x))


def task_evidence(entries: dict, n_samples, settings) -> dict:
    """What one task's numbers rest on, and why that is thin (``thin``: one reason a line; empty when not).

    Args:
        entries: the task's entry in the results' ``results`` (``"metric,filter": value``).
        n_samples: its entry in ``n-samples`` (``{"original": N, "effective": N}``), or None.
        settings: its ``longctx_settings``, or None.

    Example:
        >>> task_evidence({"longppl,none": 9.1, "n_key_tokens,none": 3.4}, {"effective": 10}, {})
        {'documents': 10, 'key_tokens': 34, 'thin': ['34 key tokens over 10 documents (fewer than 100)']}
        >>> task_evidence({"copy_acc@00510,none": 1.0}, {"effective": 15}, {"samples_per_length": 5})["thin"]
        ['5 samples per copy length (the paired comparison of runs needs 10)']
    """
    out: dict = {}
    thin: list[str] = []
    documents = _count((n_samples or {}).get("effective")) if isinstance(n_samples, dict) else None
    if documents is not None:
        out["documents"] = documents
    per_length = None
    for key, what in PER_LENGTH_SETTINGS.items():
        value = _count(settings.get(key)) if isinstance(settings, dict) else None
        if value is not None:
            per_length = (key, what, value if documents is None else min(value, documents))
            break
    if per_length is not None:
        key, what, value = per_length
        out[key] = value
        if value < MIN_DOCUMENTS:
            thin.append(f"{value} {what} (the paired comparison of runs needs {MIN_DOCUMENTS})")
    elif documents is not None and documents < MIN_DOCUMENTS:
        thin.append(f"{documents} documents (the paired comparison of runs needs {MIN_DOCUMENTS})")
    per_document = entries.get("n_key_tokens,none")
    if documents is not None and isinstance(per_document, (int, float)) and _count(per_document) is not None:
        key_tokens = int(round(per_document * documents))
        out["key_tokens"] = key_tokens
        if key_tokens < MIN_KEY_TOKENS:
            thin.append(f"{key_tokens} key tokens over {documents} documents (fewer than {MIN_KEY_TOKENS})")
    out["thin"] = thin
    return out


def evidence_of(results: dict, task: str) -> dict | None:
    """``task_evidence`` of one task of a results dict (lm-eval's aggregated results); None for a task without
    metrics or of another suite (no ``longctx_settings``)."""
    entries = (results.get("results") or {}).get(task)
    settings = recorded_settings(results, task)
    if not isinstance(entries, dict) or settings is None:
        return None
    n_samples = results.get("n-samples")
    return task_evidence(entries, n_samples.get(task) if isinstance(n_samples, dict) else None, settings)


def evidence_record(results: dict) -> dict:
    """``task_evidence`` of every task of a results dict (lm-eval's aggregated results) that has a record."""
    found = {task: evidence_of(results, task) for task in results.get("results") or {}}
    return {task: record for task, record in found.items() if record is not None}


def add_evidence(results: dict) -> None:
    """Write ``evidence_record(results)`` into ``results`` under ``EVIDENCE_KEY`` (nothing when no task of the suite
    ran)."""
    record = evidence_record(results)
    if record:
        results[EVIDENCE_KEY] = record


def thin_notes(results: dict, task: str) -> list[str]:
    """The reasons a task's numbers in a results dict rest on thin evidence (read again from its numbers, so results
    saved before ``longctx_evidence`` existed are read alike)."""
    return (evidence_of(results, task) or {}).get("thin", [])
