"""The suite as lm-eval loads it: the task classes the YAMLs name (``class: !function lm_eval_longctx.suite.X``),
with the pictures the report layer draws beside a saved results file hooked in. The tasks know nothing of
pictures; this module, above both, connects them."""

from __future__ import annotations

from .harness import glue
from .report.pictures import forgetting_curve, gain_map
from .tasks.forgetting_curve import ForgettingCurveTask
from .tasks.longeval import LongEvalLinesAccTask, LongEvalLinesPPLTask
from .tasks.longppl import LongPPLTask
from .tasks.retrieval_gain import RetrievalGainTask
from .tasks.retrieval_gain_map import RetrievalGainMapTask

__all__ = [
    "ForgettingCurveTask",
    "LongEvalLinesAccTask",
    "LongEvalLinesPPLTask",
    "LongPPLTask",
    "RetrievalGainTask",
    "RetrievalGainMapTask",
]

glue.on_results_saved("forgetting_curve", forgetting_curve.save_beside_results)
glue.on_results_saved("retrieval_gain_map", gain_map.save_beside_results)
