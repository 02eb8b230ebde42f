"""``lm-eval-longctx`` / ``python -m lm_eval_longctx``: helpers around the harness tasks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lm-eval-longctx", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("tasks-dir", help="print the folder of the task YAMLs (the explicit lm_eval --include_path)")
    add_gate_parser(sub)
    add_leaderboard_parser(sub)
    add_correlate_parser(sub)
    args = p.parse_args(argv)
    if args.command == "tasks-dir":
        from ._discovery import task_configs_dir

        print(task_configs_dir())
        return 0
    from .reporting import EXIT_UNUSABLE, UnusableInput

    try:
        return {"gate": run_gate, "leaderboard": run_leaderboard, "correlate": run_correlate}[args.command](args)
    except UnusableInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_UNUSABLE


# --------------------------------------------------------------------------- reporting subcommands
# The logic lives in lm_eval_longctx/reporting.py; scripts/regression_gate.py, scripts/leaderboard.py and
# scripts/verify_correlation.py call these same subcommands.

GATE_HELP = """Compare a results JSON (or a folder of them) with a baseline. Exit 0: pass; 1: a metric regressed
(worse than the baseline by more than its tolerance AND more than z x sqrt(se_run^2 + se_base^2)); 2: unusable
input (malformed file, a baseline metric missing from the run, differing longctx_settings / task version /
number of documents)."""


def add_gate_parser(sub) -> None:
    g = sub.add_parser("gate", help="checkpoint regression gate (exit 0 pass / 1 regression / 2 unusable input)",
                       description=GATE_HELP)
    g.add_argument("results", help="results JSON of the run (lm_eval --output_path), or a folder of them")
    g.add_argument("--baseline", required=True, help="baseline results JSON, or a folder of them")
    g.add_argument("--config", default=None, help="tolerances, JSON or YAML (see README: Regression gate)")
    g.add_argument("--z", type=float, default=None,
                   help="stderr multiplier (overrides the config's z; default 1.96)")
    g.add_argument("--ignore-setting", action="append", default=[], metavar="KEY",
                   help="dotted longctx_settings key not required to match (repeatable; adds to the config's)")
    g.add_argument("--summary", default=None, metavar="FILE",
                   help="also write the Markdown table here (e.g. $GITHUB_STEP_SUMMARY; appended to)")


def run_gate(args) -> int:
    from . import reporting

    config = reporting.load_gate_config(args.config) if args.config else reporting.GateConfig()
    if args.z is not None:
        if args.z < 0:
            raise reporting.UnusableInput("--z must be >= 0")
        config.z = args.z
    config.ignore_settings = list(config.ignore_settings) + list(args.ignore_setting)
    report = reporting.compare(reporting.load_run(args.results), reporting.load_run(args.baseline), config)
    text = report.markdown()
    print(text)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(text + "\n")
    return report.exit_code


def add_leaderboard_parser(sub) -> None:
    g = sub.add_parser("leaderboard", help="collect results JSONs into one table (Markdown and CSV)")
    g.add_argument("results", nargs="+", help="results JSON files or folders (one model per file; same model merged)")
    g.add_argument("--metric", action="append", default=[], metavar="PATTERN",
                   help="only columns matching this 'task/metric' pattern (fnmatch; repeatable)")
    g.add_argument("--csv", default=None, help="write the CSV table here")
    g.add_argument("--markdown", default=None, help="write the Markdown table here (it is printed anyway)")


def run_leaderboard(args) -> int:
    from . import reporting

    board = reporting.build_leaderboard(args.results, args.metric)
    md = board.markdown()
    print(md)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            f.write(board.csv())
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    return 0


def add_correlate_parser(sub) -> None:
    g = sub.add_parser("correlate", help="correlate a metric with a downstream benchmark; write a submission JSON")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", nargs="+", help="results JSONs / folders, one model each (use with --metric)")
    src.add_argument("--scores", help="CSV with a 'model' column and the metric's column (e.g. a leaderboard CSV)")
    g.add_argument("--metric", default=None,
                   help="'task/metric' to take from --results, or the column of --scores (default: its only one)")
    g.add_argument("--benchmark", required=True, help="CSV of downstream scores with a 'model' column")
    g.add_argument("--benchmark-column", default=None, help="column of --benchmark (default: its only one)")
    g.add_argument("--model-column", default="model", help="name of the model column in the CSVs")
    g.add_argument("--n-resamples", type=int, default=5000, help="bootstrap resamples (default 5000)")
    g.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    g.add_argument("--out", default=None, help="write the submission JSON here")


def run_correlate(args) -> int:
    import json

    from . import reporting

    if args.results:
        if not args.metric:
            raise reporting.UnusableInput("--metric task/metric is required with --results")
        board = reporting.build_leaderboard(args.results, [args.metric])
        if args.metric not in board.metrics:
            raise reporting.UnusableInput(f"no metric {args.metric!r} in the results (found {board.metrics})")
        scores = board.column(args.metric)
    else:
        scores = reporting.read_score_csv(args.scores, args.metric, args.model_column)
    bench = reporting.read_score_csv(args.benchmark, args.benchmark_column, args.model_column)
    if args.n_resamples < 1:
        raise reporting.UnusableInput("--n-resamples must be >= 1")
    res = reporting.correlate(scores, bench, n_resamples=args.n_resamples, seed=args.seed)
    res = {"metric": args.metric, "benchmark": args.benchmark_column or Path(args.benchmark).stem, **res}
    ci, sk = res["spearman_bootstrap_ci"], res["skipped_spearman"]
    print(f"models: {res['n_models']}")
    print(f"Pearson r = {res['pearson']['r']:+.4f} (p = {res['pearson']['p']:.3g})")
    print(f"Spearman rho = {res['spearman']['rho']:+.4f} (p = {res['spearman']['p']:.3g})")
    print(f"skipped Spearman rho = {sk['rho']:+.4f} (p = {sk['p']:.3g}; removed {sk['n_removed']}: {sk['removed']})")
    print(f"Spearman {ci['level']:.0%} bootstrap CI = [{ci['low']:+.4f}, {ci['high']:+.4f}] "
          f"({ci['n_resamples']} resamples, seed {ci['seed']})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
