"""The report card's sections, as the results declare them: each task writes
``configs.<task>.metadata.longctx_report`` = ``{"section", "title", "lead", "order", "headlines": [[metric,
meaning], ...], "settings": [dotted keys], "pictures": [drawer names]}``. Tasks with one ``section`` are one section
of the page. A task whose results carry no declaration (an older run, another suite's task) gets a generic
section: its name as the title, all its metrics, no pictures. Nothing here knows a task by name."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..results import UnusableInput, split_name
from .card_runs import CardRun

REPORT_KEY = "longctx_report"
GENERIC_LEAD = "A task without a report declaration in its results: its metrics as the results file gives them."


@dataclass
class Declaration:
    """One task's ``longctx_report``."""

    section: str
    title: str
    lead: str = ""
    order: float = math.inf
    headlines: list[tuple[str, str]] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    pictures: list[str] = field(default_factory=list)


@dataclass
class Section:
    key: str
    title: str
    lead: str
    order: float
    tasks: list[str]
    declarations: dict[str, Declaration]  # task -> its declaration (absent: a generic task)
    pictures: list[str]


def _strings(value, where: str, source) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UnusableInput(f"{source}: {where} is {json.dumps(value)[:60]}, expected a list of strings")
    return list(value)


def declaration(data: dict, task: str, source) -> Declaration | None:
    """The task's ``longctx_report`` in a results dict, checked (None when absent); a malformed one is
    :class:`UnusableInput` naming the field and the file."""
    cfg = (data.get("configs") or {}).get(task)
    metadata = cfg.get("metadata") if isinstance(cfg, dict) else None
    raw = metadata.get(REPORT_KEY) if isinstance(metadata, dict) else None
    if raw is None:
        return None
    where = f"configs.{task}.metadata.{REPORT_KEY}"
    if not isinstance(raw, dict):
        raise UnusableInput(f"{source}: {where} is {json.dumps(raw)[:60]}, expected an object")
    for key in ("section", "title", "lead"):
        if key in raw and not isinstance(raw[key], str):
            raise UnusableInput(f"{source}: {where}.{key} is {json.dumps(raw[key])[:60]}, expected a string")
    order = raw.get("order", math.inf)
    if isinstance(order, bool) or not isinstance(order, (int, float)) or math.isnan(order):
        raise UnusableInput(f"{source}: {where}.order is {json.dumps(order)}, expected a number")
    headlines = raw.get("headlines", [])
    if not isinstance(headlines, list) or not all(
        isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h) for h in headlines
    ):
        raise UnusableInput(
            f"{source}: {where}.headlines is {json.dumps(headlines)[:60]}, expected a list of [metric, meaning]"
        )
    return Declaration(
        section=raw.get("section") or task,
        title=raw.get("title") or task,
        lead=raw.get("lead", ""),
        order=float(order),
        headlines=[(m, meaning) for m, meaning in headlines],
        settings=_strings(raw.get("settings", []), f"{where}.settings", source),
        pictures=_strings(raw.get("pictures", []), f"{where}.pictures", source),
    )


def tasks_of(runs: list[CardRun]) -> list[str]:
    """The tasks with metrics in any run, in the order first met."""
    seen: dict[str, None] = {}
    for r in runs:
        for name in r.run.metrics:
            seen.setdefault(split_name(name)[0], None)
    return list(seen)


def sections(runs: list[CardRun]) -> list[Section]:
    """The page's sections in order (``order``, then the key); the generic ones after the declared ones. A task's
    declaration is the first run's that has one."""
    found: dict[str, Declaration | None] = {}
    for task in tasks_of(runs):
        found[task] = None
        for r in runs:
            if task in r.results:
                d = declaration(r.results[task], task, r.run.sources.get(task, r.source))
                if d is not None:
                    found[task] = d
                    break
    by_key: dict[str, Section] = {}
    order_of = {t: d.order if d is not None else math.inf for t, d in found.items()}
    for task in sorted(found, key=lambda t: (order_of[t], t)):
        d = found[task]
        key = d.section if d is not None else task
        if key not in by_key:
            by_key[key] = (
                Section(key, d.title, d.lead, d.order, [], {}, [])
                if d is not None
                else Section(key, task, GENERIC_LEAD, math.inf, [], {}, [])
            )
        section = by_key[key]
        section.tasks.append(task)
        if d is not None:
            section.declarations[task] = d
            section.pictures += [p for p in d.pictures if p not in section.pictures]
    return sorted(by_key.values(), key=lambda s: (s.order, not s.declarations, s.key))


def metrics_of_task(runs: list[CardRun], task: str) -> list[str]:
    names: list[str] = []
    for r in runs:
        for name in r.run.metrics:
            if split_name(name)[0] == task and name not in names:
                names.append(name)
    return sorted(names)


def headline_names(runs: list[CardRun], section: Section, task: str) -> list[tuple[str, str]]:
    """("task/metric", meaning) of the task's declared headline metrics that some run has; for a task without a
    declaration, all its metrics."""
    present = set(metrics_of_task(runs, task))
    d = section.declarations.get(task)
    if d is None:
        return [(n, "") for n in sorted(present)]
    return [(f"{task}/{m}", meaning) for m, meaning in d.headlines if f"{task}/{m}" in present]


def settings_shown(section: Section, task: str) -> list[str]:
    d = section.declarations.get(task)
    return list(d.settings) if d is not None else []
