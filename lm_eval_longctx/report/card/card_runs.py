"""The runs on a report card: found by the rule of :mod:`..runs` (one run per folder of results files, in a natural
order of the folders or by date), labelled (``--label``, else the model's display name) and, when they are
checkpoints of one training run, ordered by step."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..pictures.names import display_name
from ..results import TEXT_NOTES, Run, UnusableInput
from ..runs import distinct_labels, every_file, run_of, runs_in
from ..text import visible

# a training step in a model name or label: checkpoint-1200, step1200, global_step_1200, ckpt_1200, iter-1200
_STEP = re.compile(r"(?i)(?:checkpoint|ckpt|global[-_]?step|step|iter(?:ation)?)[-_=\s]?(\d+)")


@dataclass
class CardRun:
    """One run on the page: a model's results (one folder or file), its label and, in a series, its step."""

    label: str  # what the page calls it: --label, else the model's display name (pictures.names.display_name)
    run: Run
    results: dict[str, dict]  # task -> the parsed results file its numbers came from (the pictures read these)
    source: str  # the folder or file the run was read from
    step: int | None = None
    notes: dict[str, str] = field(default_factory=dict)  # task -> its text note (skipped lengths), when not "none"


def step_of(name: str) -> int | None:
    """The training step in a model name or label (its last ``checkpoint-N`` / ``stepN`` / ...), or the label itself
    when it is a plain number."""
    matches = list(_STEP.finditer(name))
    if matches:
        return int(matches[-1].group(1))
    return int(name) if name.strip().isdigit() else None


def _without_step(name: str) -> str:
    m = list(_STEP.finditer(name))[-1]
    return name[: m.start(1)] + name[m.end(1) :]


def checkpoint_steps(labels: list[str]) -> list[int] | None:
    """The steps of the runs when they are checkpoints of one training run: two runs or more, each with a step
    (:func:`step_of`), the names equal once the step is taken out, and no step twice. Else None."""
    steps = [step_of(label) for label in labels]
    if len(labels) < 2 or any(s is None for s in steps) or len(set(steps)) < len(steps):
        return None
    stems = {"" if label.strip().isdigit() else _without_step(label) for label in labels}
    return [s for s in steps if s is not None] if len(stems) == 1 else None


@dataclass
class LoadedRuns:
    runs: list[CardRun]
    order: list[str]  # how the runs were found and ordered, one line each, for the user to see
    notices: list[str]  # what --newest took over what
    files: list[str]  # every results and samples file read


def load_runs(paths, labels=(), order: str = "name", newest: bool = False) -> LoadedRuns:
    """The runs of the RESULTS inputs, in input order, the runs inside a folder in ``order`` (a natural sort of
    their folders, or their dates); the labels, one per run in that order, replace the model names. Checkpoints of
    one training run are then sorted by step."""
    paths = list(paths)
    found = [f for i, p in enumerate(paths) for f in runs_in(p, paths[:i] + paths[i + 1 :], newest=newest, order=order)]
    if not found:
        raise UnusableInput("no results given")
    labels = list(labels)
    if labels and len(labels) != len(found):
        listed = ", ".join(str(f.source) for f in found[:6]) + (" ..." if len(found) > 6 else "")
        raise UnusableInput(
            f"{len(labels)} --label for {len(found)} runs found ({listed}); give one --label per run, in this order"
        )
    runs, notices = [], []
    for i, f in enumerate(found):
        run = run_of(f, f.source.name)
        label = labels[i] if labels else display_name(run.model)
        notes = {}
        for task, data in run.results.items():
            for note in TEXT_NOTES:
                text = (data["results"].get(task) or {}).get(f"{note},none")
                if isinstance(text, str) and text != "none":
                    notes[task] = text
        runs.append(CardRun(label, run, dict(run.results), str(f.source), notes=notes))
        notices += f.notices
    _unique_labels(runs)
    how = "by the results' dates" if order == "date" else "in a natural order of their folders"
    lines = [f"runs, inputs in the order given and the runs found in a folder {how}:"]
    lines += [
        f"  {i}. {visible(r.label)}: {visible(r.source)}"
        + ("" if r.label == r.run.model else f" ({visible(r.run.model)})")
        for i, r in enumerate(runs, 1)
    ]
    steps = checkpoint_steps([r.label for r in runs])
    if steps is not None:
        for r, s in zip(runs, steps):
            r.step = s
        runs.sort(key=lambda r: r.step or 0)
        lines.append(f"checkpoints of one training run, shown by step: {', '.join(str(r.step) for r in runs)}")
    return LoadedRuns(runs, lines, notices, [str(p) for p in every_file(found)])


def _unique_labels(runs: list[CardRun]) -> None:
    """Runs of one model name are told apart by the folder they were read from (then by their place)."""
    for r, label in zip(runs, distinct_labels([r.label for r in runs], [r.source for r in runs])):
        r.label = label
