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


def write_books(path: Path, texts: list[str]) -> str:
    """The texts as PG-19 rows (a title and a text each), the forgetting curve's data_files."""
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"short_book_title": f"Book {i}", "text": t}) + "\n")
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


def refuse_model_loading(monkeypatch) -> None:
    """Loading an hf model fails the test from now on: for errors that must come before lm-eval loads the model."""
    from lm_eval.models.huggingface import HFLM

    def load(self, *args, **kwargs):
        raise AssertionError("lm-eval loaded the model before the error")

    monkeypatch.setattr(HFLM, "__init__", load)


def lm_eval_in_process(argv: list[str], lm_eval_folders: tuple[str, ...] = ()) -> Path:
    """What ``lm_eval run ...`` (``argv`` after the program name) does for our tasks, in this process and without
    lm-eval's index of its own tasks (seconds per run): simple_evaluate with the arguments the command line would
    pass, the results and samples saved by lm-eval's EvaluationTracker under --output_path. ``lm_eval_folders``
    names folders of lm-eval's own tasks to index too (``("ruler",)``). Returns the results file."""
    import argparse

    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import simple_parse_args_string

    from lm_eval_longctx.harness.lm_eval_tasks import task_folder

    p = argparse.ArgumentParser()
    for flag in ("--tasks", "--model", "--model_args", "--device", "--batch_size", "--metadata", "--output_path"):
        p.add_argument(flag)
    p.add_argument("--include_path")
    p.add_argument("--gen_kwargs")
    p.add_argument("--limit", type=int)
    p.add_argument("--log_samples", action="store_true")
    args = p.parse_args(argv[1:] if argv and argv[0] == "run" else argv)
    model_args = simple_parse_args_string(args.model_args)  # as the command line reads them: 1024 an int
    metadata = json.loads(args.metadata)
    folders = [str(TASK_DIR), *(str(task_folder(name)) for name in lm_eval_folders)]
    tm = TaskManager(include_defaults=False, include_path=folders, metadata={**model_args, **metadata})
    results = simple_evaluate(
        model=args.model,
        model_args=model_args,
        tasks=args.tasks.split(","),
        task_manager=tm,
        device=args.device,
        batch_size=args.batch_size,
        log_samples=args.log_samples,
        gen_kwargs=args.gen_kwargs,
        limit=args.limit,
        bootstrap_iters=200,
    )
    import copy

    samples = results.pop("samples")
    tracker = EvaluationTracker(output_path=args.output_path)
    tracker.save_results_aggregated(results=copy.deepcopy(results), samples=samples)
    for task, task_samples in samples.items():
        tracker.save_results_samples(task_name=task, samples=task_samples)
    return next(Path(args.output_path).glob(f"**/results_{tracker.date_id}.json")).resolve()
