"""What a run of this suite's tasks will fetch from the hub (datasets, decode tokenizers, the key-token evaluator),
checked when the first of its tasks is built, before anything is loaded: everything that cannot be had is reported
in one message, rather than one failed run per missing resource."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors
from ..settings import SettingsError

log = logging.getLogger("lm_eval_longctx")

# what lm-eval's --tasks may name that stands for several of our tasks
TAG = "longctx"
GROUPS = {"longeval_lines": ("longeval_lines_acc", "longeval_lines_ppl")}
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


def _task_classes() -> dict:
    from .forgetting_curve import ForgettingCurveTask
    from .longeval import LongEvalLinesAccTask, LongEvalLinesPPLTask
    from .longppl import LongPPLTask
    from .retrieval_gain import RetrievalGainTask
    from .retrieval_gain_map import RetrievalGainMapTask

    classes = (
        ForgettingCurveTask,
        LongEvalLinesAccTask,
        LongEvalLinesPPLTask,
        LongPPLTask,
        RetrievalGainTask,
        RetrievalGainMapTask,
    )
    return {c.SUITE_TASK_NAME: c for c in classes}


def our_tasks(requested) -> list[str]:
    """This suite's tasks among what lm-eval was asked to load (names, the tag, the LongEval group, dict specs)."""
    ours = _task_classes()
    out: list[str] = []
    for spec in requested or ():
        name = spec.get("task") if isinstance(spec, dict) else spec
        if not isinstance(name, str):
            continue
        names = list(ours) if name == TAG else GROUPS.get(name, (name,))
        out += [n for n in names if n in ours and n not in out]
    return out


def _is_local(name: str | None) -> bool:
    return name is None or Path(str(name)).expanduser().exists()


def resources(task: str, settings: dict) -> list[Resource]:
    """The hub resources ``task`` will fetch with these settings (local files and folders need no check)."""
    s = settings
    out = []
    if task in ("longppl_govreport", "retrieval_gain", "retrieval_gain_map") and not s.get("data_files"):
        out.append(Resource("dataset", s["dataset_path"], s.get("dataset_revision")))
        if not _is_local(s.get("decode_tokenizer")):
            out.append(Resource("tokenizer", s["decode_tokenizer"]))
    if task == "forgetting_curve":
        if not s.get("data_files"):
            out.append(Resource("dataset", s["dataset_path"], s.get("dataset_revision")))
        if not _is_local(s.get("tokenizer")):
            out.append(Resource("tokenizer", s["tokenizer"]))
    if task == "longppl_govreport" and s.get("key_source") == "evaluator" and not _is_local(s.get("evaluator")):
        out.append(Resource("evaluator", s["evaluator"], s.get("evaluator_revision")))
    return [r for r in out if r.name and r.name != "self"]


def check(tasks: list[str], metadata: dict | None) -> None:
    """Check every hub resource ``tasks`` will fetch; raise one ResourceUnavailableError naming all that cannot be
    had. A task whose settings do not parse is left to its own error when it is built."""
    classes = _task_classes()
    needed: dict[tuple, Resource] = {}
    for task in tasks:
        try:
            settings = classes[task].resolve_settings(dict(metadata or {}))
        except (SettingsError, ValueError):
            continue
        for r in resources(task, settings):
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


_CHECKED: set[int] = set()


def check_once(this_task: str, metadata: dict | None, loading) -> None:
    """``check`` the tasks of the lm-eval ``TaskManager.load`` call in progress (``loading``: its call number and
    task list; this task alone when it is None), once per call."""
    call, requested = loading if loading is not None else (None, None)
    if call is not None and call in _CHECKED:
        return
    tasks = our_tasks(requested)
    check(tasks if this_task in tasks else [*tasks, this_task], metadata)
    if call is not None:
        _CHECKED.add(call)
