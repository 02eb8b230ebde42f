"""Run our tasks through the real harness entry point (lm_eval.simple_evaluate), in-process."""

from __future__ import annotations

import json
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1] / "task_configs"


def write_docs(path: Path, texts: list[str]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return str(path)


def run_task(task: str, model_dir: str, metadata: dict, model="hf", **kwargs) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    model_args = {"pretrained": model_dir, "dtype": "float32"}
    model_args.update(kwargs.pop("model_args", {}))
    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata={**model_args, **metadata})
    kwargs.setdefault("bootstrap_iters", 200)
    kwargs.setdefault("log_samples", True)
    return simple_evaluate(model=model, model_args=model_args, tasks=[task], task_manager=tm, device="cpu", **kwargs)
