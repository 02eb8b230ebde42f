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


def save_like_lm_eval(results: dict, folder: Path) -> tuple[Path, dict[str, list[dict]]]:
    """Write ``results`` (a ``run_task`` output) as ``lm_eval --output_path folder/results.json --log_samples``
    does, with lm-eval's own EvaluationTracker (on a copy: it rewrites the samples in place). Returns the results
    file and, per task, the lines of its samples file as parsed JSON."""
    import copy

    from lm_eval.loggers import EvaluationTracker

    results = copy.deepcopy(results)
    samples = results.pop("samples")
    tracker = EvaluationTracker(output_path=str(folder / "results.json"))
    tracker.save_results_aggregated(results=results, samples=samples)
    for task, task_samples in samples.items():
        tracker.save_results_samples(task_name=task, samples=task_samples)
    lines = {
        task: [json.loads(x) for x in (folder / f"samples_{task}_{tracker.date_id}.jsonl").read_text().splitlines()]
        for task in samples
    }
    return folder / f"results_{tracker.date_id}.json", lines


def json_numbers(value) -> bool:
    """A number or a (nested) list of numbers, as JSON gives them back: what a user can compute with."""
    if isinstance(value, list):
        return bool(value) and all(json_numbers(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)
