"""lm-eval's own tasks (not this suite's), built without a model: whether a task can make its documents for the
metadata a run would give it, asked before the run loads the model (the audit's RULER cross-check asks it of each
length)."""

from __future__ import annotations

from pathlib import Path


def task_folder(name: str) -> Path:
    """The folder of lm-eval's own task YAMLs called ``name`` (``ruler``)."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent / name


def document_count(folder: str, task: str, metadata: dict) -> int:
    """Build the task ``task`` of lm-eval's task folder ``folder`` as ``lm_eval --tasks task`` builds it, from
    ``metadata`` (the model arguments and ``--metadata``, merged as lm-eval's command line merges them), and return
    how many documents it made. Only that folder is indexed, not lm-eval's whole task list.

    Raises:
        Exception: whatever the task's own builder raises when it cannot make its documents.
    """
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=False, include_path=str(task_folder(folder)), metadata=metadata)
    built = manager.load([task])["tasks"][task]
    return len(list(built.eval_docs))
