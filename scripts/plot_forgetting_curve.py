#!/usr/bin/env python
"""Draw forgetting curves (as the paper's Figure 1) from lm-eval results JSON files.

One file: copy and LM accuracy with +-1 std bands, the fine-grained / coarse-grained / amnesia
regions shaded and the claimed length marked. Several files: all models on one figure.

    python scripts/plot_forgetting_curve.py results/MODEL/results_DATE.json -o curve.png
    python scripts/plot_forgetting_curve.py a.json b.json --label "model A" --label "model B" -o both.png

(``lm_eval --output_path DIR`` already writes ``results_DATE_forgetting_curve.png`` beside each
results file; this script is for redrawing and for comparing models.)
"""

from __future__ import annotations

import argparse
import sys

from lm_eval_longctx.report.pictures import forgetting_curve_plot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="results JSON files written by lm_eval --output_path")
    p.add_argument("-o", "--out", required=True, help="output PNG")
    p.add_argument(
        "--task", default=None, help="task name in the results (default: every forgetting-curve task of each file)"
    )
    p.add_argument(
        "--label",
        action="append",
        default=None,
        help="legend label per curve, in order (default: the model name recorded in the results)",
    )
    p.add_argument("--title", default=None)
    p.add_argument(
        "--log-x",
        action="store_true",
        default=None,
        help="logarithmic length axis (default: when the lengths were spaced geometrically)",
    )
    args = p.parse_args(argv)

    curves = forgetting_curve_plot.labelled_from_results(
        args.results,
        args.task,
        forgetting_curve_plot.forgetting_curve_tasks,
        forgetting_curve_plot.curve_from_results,
        args.label,
        "forgetting curve (no copy_acc@LENGTH metrics)",
        p.error,
    )
    out = forgetting_curve_plot.plot_forgetting_curves(curves, args.out, title=args.title, log_x=args.log_x)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
