"""Pictures written beside a saved results file, one per task: ``results_<date>_<task>.png``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("lm_eval_longctx")


def draw_beside_results(
    results_file, tasks: Iterable[str], draw: Callable[[str, Path], object], what: str
) -> list[Path]:
    """Call ``draw(task, png)`` for each task, ``png`` named after ``results_file``; return the PNGs written.

    Args:
        results_file: the results JSON lm-eval saved.
        tasks: the tasks to draw.
        draw: draws ``task``'s picture into ``png``.
        what: the picture's name in the log line ("forgetting curve").

    Returns:
        The paths of the PNGs, in the order of ``tasks``.

    Example:
        >>> draw_beside_results("out/results_2026.json", ["t"], lambda task, png: None, "picture")
        [PosixPath('out/results_2026_t.png')]
    """
    results_file = Path(results_file)
    written = []
    for task in tasks:
        png = results_file.with_name(f"{results_file.stem}_{task}.png")
        draw(task, png)
        log.info("%s of %s written to %s", what, task, png)
        written.append(png)
    return written


@dataclass(frozen=True)
class PicturesBesideResults:
    """The results-saved callback of one kind of picture: ``plot([build(results, task)], png)`` for each task that
    ``tasks(results)`` names, through ``draw_beside_results``."""

    tasks: Callable[[dict], Iterable[str]]
    build: Callable[[dict, str], object]
    plot: Callable[[list, Path], object]
    what: str

    def __call__(self, results: dict, results_file) -> list[Path]:
        return draw_beside_results(
            results_file, self.tasks(results), lambda task, png: self.plot([self.build(results, task)], png), self.what
        )
