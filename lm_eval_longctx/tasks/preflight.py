"""What a run of this suite's tasks will fetch from the hub (datasets, decode tokenizers, the key-token evaluator),
checked when the first of its tasks is built, before anything is loaded: everything that cannot be had is reported
in one message, rather than one failed run per missing resource. Each task class declares what its settings fetch
(``hub_resources``); this module knows no task."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors
from ..settings import SettingsError

log = logging.getLogger("lm_eval_longctx")

# the tag every task of the suite carries: --tasks longctx names them all (the groups: each task class's GROUP)
TAG = "longctx"
WAYS_OUT = (
    "Ways out: a reachable hub (unset HF_HUB_OFFLINE / HF_DATASETS_OFFLINE; `huggingface-cli login` for gated "
    "repositories), local copies through --metadata (data_files for a dataset, a local folder for a tokenizer or "
    'the evaluator, "evaluator": "self", or key_spans_dir from lm-eval-longctx precompute-spans), or the offline '
    "demo (lm-eval-longctx demo)."
)


@dataclass
class Resource:
    kind: str  # "dataset" | "tokenizer" | "evaluator"
    name: str
    revision: str | None = None
    needed_by: list[str] = field(default_factory=list)

    def problem(self) -> str | None:
        """Why it cannot be had (one line), or None."""
        try:
            if self.kind == "dataset":
                import datasets

                datasets.load_dataset_builder(self.name, revision=self.revision)
            elif self.kind == "tokenizer":
                from transformers import AutoTokenizer

                AutoTokenizer.from_pretrained(self.name)
            else:
                from ..keytokens import evaluator

                evaluator.evaluator_max_length(evaluator.evaluator_identity(self.name, self.revision))
        except errors.ResourceUnavailableError as err:
            return str(err).split(". Ways out")[0]
        except Exception as err:  # noqa: BLE001  (offline, gated, missing, malformed: one line each)
            return errors.first_line(err)
        return None


def our_tasks(requested, classes: dict) -> list[str]:
    """This suite's tasks (``classes``: name -> task class) among what lm-eval was asked to load (names, the tag, a
    group of the suite's tasks, dict specs)."""
    groups: dict[str, list[str]] = {}
    for name, cls in classes.items():
        if getattr(cls, "GROUP", None):
            groups.setdefault(cls.GROUP, []).append(name)
    out: list[str] = []
    for spec in requested or ():
        name = spec.get("task") if isinstance(spec, dict) else spec
        if not isinstance(name, str):
            continue
        names = sorted(classes) if name == TAG else sorted(groups.get(name, [name]))
        out += [n for n in names if n in classes and n not in out]
    return out


def is_local(name: str | None) -> bool:
    """Whether a resource setting names nothing or a local file or folder (which needs no check)."""
    return name is None or Path(str(name)).expanduser().exists()


def check(classes: dict, metadata: dict | None) -> None:
    """Check every hub resource the tasks ``classes`` (name -> task class) will fetch with these settings
    (``hub_resources``); raise one ResourceUnavailableError naming all that cannot be had. A task whose settings do
    not parse is left to its own error when it is built."""
    needed: dict[tuple, Resource] = {}
    for task, cls in classes.items():
        try:
            settings = cls.resolve_settings(dict(metadata or {}))
        except (SettingsError, ValueError):
            continue
        for r in cls.hub_resources(settings):
            if r.name and r.name != "self":
                needed.setdefault((r.kind, r.name, r.revision), r).needed_by.append(task)
    missing = [(r, why) for r in needed.values() if (why := r.problem()) is not None]
    if not missing:
        return
    lines = [
        f"  {k}. the {r.kind} {r.name!r}{f' at {r.revision!r}' if r.revision else ''} "
        f"(for {', '.join(r.needed_by)}): {why}"
        for k, (r, why) in enumerate(missing, 1)
    ]
    raise errors.ResourceUnavailableError(
        f"{len(missing)} of the {len(needed)} resources this run fetches cannot be had (all checked before any "
        "was loaded):\n" + "\n".join(lines) + "\n" + WAYS_OUT
    )


def check_run(this_task: str, metadata: dict | None, requested, classes: dict) -> None:
    """``check`` the suite's tasks (``classes``: name -> task class) among ``requested`` (what the running
    ``simple_evaluate`` call was asked to run; None outside one: this task alone), and this task."""
    tasks = our_tasks([requested] if isinstance(requested, (str, dict)) else requested, classes)
    names = tasks if this_task in tasks else [*tasks, this_task]
    check({name: classes[name] for name in names if name in classes}, metadata)
