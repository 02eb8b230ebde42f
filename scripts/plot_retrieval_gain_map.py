#!/usr/bin/env python
"""Draw retrieval-gain maps (context length x depth heatmaps) from lm-eval results JSON files.

Several files (or several gain-map tasks in one file): the models side by side, on ONE diverging
colour scale centred at 0 (blue: the context helps, red: it hurts), so colours compare across
models; each panel marks its effective context lengths.

    python scripts/plot_retrieval_gain_map.py results/MODEL/results_DATE.json -o map.png
    python scripts/plot_retrieval_gain_map.py a.json b.json --label "model A" --label "model B" -o both.png

(``lm_eval --output_path DIR`` already writes ``results_DATE_retrieval_gain_map.png`` beside each
results file; this script is for redrawing and for comparing models.)
"""

from __future__ import annotations

import sys

from lm_eval_longctx.report.pictures import forgetting_curve_plot, gain_map_plot


def main(argv=None) -> int:
    p = forgetting_curve_plot.results_plot_parser(__doc__, "gain-map", "panel label per map")
    p.add_argument(
        "--limit",
        type=float,
        default=None,
        help="colour scale runs from -LIMIT to +LIMIT (default: the largest |gain| of all maps)",
    )
    args = p.parse_args(argv)

    what = "retrieval-gain map (no gain@L..._d.. metrics)"
    maps = forgetting_curve_plot.labelled_from_results(
        args, gain_map_plot.gain_map_tasks, gain_map_plot.map_from_results, what, p.error
    )
    out = gain_map_plot.plot_gain_maps(maps, args.out, title=args.title, limit=args.limit)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
