"""The suite as lm-eval loads it: the task classes the YAMLs name (``class: !function lm_eval_longctx.suite.X``),
with the pictures the report layer draws beside a saved results file hooked in. The tasks know nothing of
pictures or bounds; this module, above both, connects them. It names no task: a YAML's ``X`` is looked up among the classes
the task modules define (``tasks.base.suite_tasks``), and the drawers are registered under their own names."""

from __future__ import annotations

from .harness import saving
from .report import bounds, evidence
from .report.pictures import forgetting_curve_plot, gain_map_plot
from .tasks import base


def task_classes() -> dict[str, type]:
    """Every task class of the suite by its Python name (what a YAML's ``class:`` names)."""
    return {cls.__name__: cls for cls in base.suite_tasks().values()}


def __getattr__(name: str):
    classes = task_classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its task classes: {sorted(classes)}")


def __dir__() -> list[str]:
    return sorted({*globals(), *task_classes()})


# the report drawers that write a picture beside each saved results file, by drawer name
saving.on_results_saved("forgetting_curve", forgetting_curve_plot.save_beside_results)
saving.on_results_saved("gain_map", gain_map_plot.save_beside_results)
# which length values are lower bounds, written into each results JSON beside them
saving.before_results_saved("bounds", bounds.add_bounds)
# what each task's numbers rest on, and where that is thin
saving.before_results_saved("evidence", evidence.add_evidence)
# the release of this package that wrote them (pip show lm_eval_longctx; CHANGELOG.md)
saving.before_results_saved("version", saving.add_package_version)
