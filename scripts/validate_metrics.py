#!/usr/bin/env python
"""Known-answer validation: do the metrics rank models whose memory distance is known by construction?

Builds the demo model's variants (lm_eval_longctx.demo.model.VARIANTS: ``long`` rope_theta 1e6, ``short``
the same with its codes 6 RoPE pairs faster, ``none`` without the copy circuit; same tokenizer, recipe and
seed), runs the four tasks on each through the harness (lm_eval_longctx.demo.run.run_demo, offline), and prints
a table: each metric's value per model, the paired bootstrap CI of each difference between neighbours, and
whether the metric orders the models as constructed (long > short > none). LongPPL's key tokens are judged by
the long model for every model.

    python scripts/validate_metrics.py out/validation                       # full recipe (minutes per model)
    python scripts/validate_metrics.py out/validation_ci --budget ci --steps 0   # untrained construction, quick

Writes OUT/validation.json, OUT/validation.md and OUT/forgetting_curves.png (the three forgetting curves).
"""

import argparse
import sys

from lm_eval_longctx.demo import known_answer


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    known_answer.add_arguments(p)
    return known_answer.run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
