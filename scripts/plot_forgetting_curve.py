#!/usr/bin/env python
"""Draw forgetting curves (as the paper's Figure 1) from lm-eval results JSON files.

One file: copy and LM accuracy with +-1 std bands, the fine-grained / coarse-grained / amnesia regions shaded and
the claimed length marked; several files: all models on one figure. ``lm_eval --output_path DIR`` already writes
``results_DATE_forgetting_curve.png`` beside each results file: this script redraws and compares models.

    python scripts/plot_forgetting_curve.py results/MODEL/results_DATE.json -o curve.png
    python scripts/plot_forgetting_curve.py a.json b.json --label "model A" --label "model B" -o both.png
"""

from __future__ import annotations

import sys

from lm_eval_longctx.report.pictures import forgetting_curve_plot


def main(argv=None) -> int:
    p = forgetting_curve_plot.results_plot_parser(__doc__, "forgetting-curve", "legend label per curve")
    geometric = "logarithmic length axis (default: when the lengths were spaced geometrically)"
    p.add_argument("--log-x", action="store_true", default=None, help=geometric)
    args = p.parse_args(argv)

    what = "forgetting curve (no copy_acc@LENGTH metrics)"
    find, build = forgetting_curve_plot.forgetting_curve_tasks, forgetting_curve_plot.curve_from_results
    curves = forgetting_curve_plot.labelled_from_results(args, find, build, what, p.error)
    out = forgetting_curve_plot.plot_forgetting_curves(curves, args.out, title=args.title, log_x=args.log_x)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
