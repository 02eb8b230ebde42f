#!/usr/bin/env python
"""Plot LongEval "lines" accuracy and answer / non-answer token perplexity against prompt length.

Like the LongPPL paper's Figure 2 (b, c), from one or more lm-eval results JSONs of the
``longeval_lines`` group (or its tasks ``longeval_lines_acc`` / ``longeval_lines_ppl``):

    python scripts/plot_longeval.py results/*/results_*.json --out longeval_plot.png
    python scripts/plot_longeval.py a.json b.json --labels "model A" "model B" --out cmp.pdf

Each file is one line per panel, labelled with its model (``--labels`` overrides).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lm_eval_longctx.report.pictures import longeval_plot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="lm-eval results JSON files")
    parser.add_argument("--out", default="longeval_lines.png", help="output image (.png, .pdf, .svg)")
    parser.add_argument("--labels", nargs="+", help="one label per results file (default: the model names)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.results):
        parser.error(f"{len(args.labels)} labels for {len(args.results)} results files")
    runs = {}
    for k, path in enumerate(args.results):
        results = longeval_plot.load_results(path)
        label = args.labels[k] if args.labels else longeval_plot.run_label(results, Path(path).stem)
        if label in runs:
            label = f"{label} ({Path(path).name})"
        curves = longeval_plot.curves_from_results(results)
        if not curves:
            print(f"warning: {path} holds no LongEval lines metrics; skipped", file=sys.stderr)
            continue
        runs[label] = curves
    out = longeval_plot.plot_runs(runs, args.out, args.title)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
