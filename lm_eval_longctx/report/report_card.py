"""``lm-eval-longctx report RESULTS... -o report.html``: the long-context report card, one HTML page.

One self-contained page (inline CSS, pictures as base64 PNG data URIs, system fonts, no script of its own, nothing
fetched) from the results that ``lm_eval --output_path`` writes, read with :mod:`.results`:

* per task, the headline numbers with value ± 1.96·stderr where the harness gives a stderr, a sentence on what
  each means, and the settings that produced them (``configs.<task>.metadata.longctx_settings``);
* the pictures of :mod:`.pictures` (forgetting curve, retrieval-gain map, LongEval by size), several runs in one
  picture where the plot function takes several (a few to a picture, on shared scales);
* with several runs, the numbers side by side, and a visible box naming the settings that differ
  (:func:`.gate.settings_differences`); when the runs are checkpoints of one training run (:func:`checkpoint_steps`),
  each headline metric against the step and the regression gate's verdict between consecutive checkpoints;
* with ``--export DIR``, the key-token viewer (:func:`.viewer.build_page`) in an ``<iframe srcdoc>``.

Every metric value on the page carries ``data-run``, ``data-metric`` and ``data-value`` (``repr`` of the float read
from the results file), so that a test can read the numbers back. Every text from a file is escaped.

The page shell (:func:`html_page`) is shared with ``gate --html`` and ``leaderboard --html``.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import directions
from .gate import GateConfig, GateReport, compare, format_number, settings_differences
from .leaderboard import Leaderboard
from .paired import level_for_z
from .pictures.names import display_name
from .results import (
    DEFAULT_Z,
    Metric,
    Run,
    UnusableInput,
    find_results_files,
    flatten,
    load_results,
    load_run,
    model_name,
    split_name,
    write_text,
)

# ----------------------------------------------------------------------------------------------- what is shown

# task -> (title, what it measures): the sections in page order; longeval_lines stands for its two tasks
TASK_SECTIONS = {
    "longppl_govreport": (
        "LongPPL (longppl_govreport)",
        "Perplexity over the key tokens only: the tokens that an evaluator model predicts much better with the "
        "long context than with a truncated window of K tokens (LSD > α and LCL > β).",
    ),
    "forgetting_curve": (
        "Forgetting curve (forgetting_curve)",
        "Copy accuracy (the text S was read once before) against LM accuracy (unrelated text before) by copy "
        "length l: the model still holds S where copy accuracy stays above LM accuracy.",
    ),
    "retrieval_gain": (
        "Retrieval gain (retrieval_gain)",
        "How much reading the document lowers the NLL of a passage from it (a query Q, then its answer A): "
        "whether the model looks things up in its own context.",
    ),
    "retrieval_gain_map": (
        "Retrieval-gain map (retrieval_gain_map)",
        "The retrieval gain cell by cell over context length L and depth of the passage: up to which length, "
        "and from which depth, the model uses what it reads.",
    ),
    "longeval_lines": (
        "LongEval lines (longeval_lines_acc, longeval_lines_ppl)",
        "LongChat's line lookup: a prompt lists N lines and asks for the number in one of them; accuracy beside "
        "the perplexity of the answer's digits, by number of lines.",
    ),
}
LONGEVAL_TASKS = ("longeval_lines_acc", "longeval_lines_ppl")

# task -> (metric, what it means): the headline numbers, in table order
HEADLINES: dict[str, tuple[tuple[str, str], ...]] = {
    "longppl_govreport": (
        (
            "longppl",
            "perplexity on the key tokens; lower is better, and well below PPL when the model uses its context",
        ),
        ("ppl", "perplexity on every token of the same documents, for comparison; lower is better"),
        ("key_token_fraction", "share of the tokens that are key tokens (informational)"),
        ("n_key_tokens", "key tokens per document (informational)"),
        ("longppl_soft", "every token weighted by min(exp(LSD), γ) (soft_gamma); lower is better"),
    ),
    "forgetting_curve": (
        (
            "fine_memory_length",
            "longest copy length copied almost perfectly (copy accuracy above fine_threshold); higher is better, "
            "a lower bound when it equals the longest length tested",
        ),
        (
            "coarse_memory_length",
            "longest copy length at which copying still beats LM accuracy by coarse_margin; higher is better",
        ),
        ("n_failed_lengths", "copy lengths that could not run (the reason is in the log); 0 expected"),
    ),
    "retrieval_gain": (
        (
            "retrieval_gain",
            "nats per answer token that reading the document saves (nll_without − nll_with); higher is better, "
            "near 0 when the model does not look back",
        ),
        ("nll_with", "answer NLL (nats per token) with the document before the query; lower is better"),
        ("nll_without", "answer NLL without the document"),
    ),
    "retrieval_gain_map": (
        ("gain", "retrieval gain averaged over every cell (context length × depth); higher is better"),
        (
            "effective_length",
            "largest context length up to which the gain stays above effective_fraction of its value at the "
            "shortest length (relative rule); higher is better",
        ),
        (
            "effective_length_abs",
            "largest context length up to which the gain stays above effective_threshold nats (absolute rule)",
        ),
    ),
    "longeval_lines_acc": (
        ("acc", "share of the questions answered with the right number (greedy generation); higher is better"),
    ),
    "longeval_lines_ppl": (
        (
            "answer_ppl",
            "perplexity of the answer's digits in the reference response, read teacher-forced; near 1 when the "
            "model finds the line",
        ),
        ("non_answer_ppl", "perplexity of the response's other tokens, which need no lookup, for comparison"),
    ),
}

# task -> the longctx_settings keys (dotted) of the compact settings table; the keys that differ between runs
# and the number of documents and task version are added
SETTINGS_SHOWN = {
    "longppl_govreport": (
        "evaluator",
        "trunc_len",
        "sliding_window",
        "alpha",
        "beta",
        "key_spans_dir",
        "soft_gamma",
        "dataset_path",
        "data_files",
        "data.texts_sha256",
    ),
    "forgetting_curve": (
        "lengths",
        "spacing",
        "samples_per_length",
        "fine_threshold",
        "coarse_margin",
        "claimed_length",
        "tokenizer",
        "dataset_path",
        "data_files",
        "data.texts_sha256",
        "data.stream_sha256",
    ),
    "retrieval_gain": (
        "doc_tokens",
        "query_tokens",
        "answer_tokens",
        "n_queries",
        "with_context",
        "dataset_path",
        "data_files",
        "data.texts_sha256",
    ),
    "retrieval_gain_map": (
        "context_lengths",
        "depths",
        "query_tokens",
        "answer_tokens",
        "anchors_per_cell",
        "effective_fraction",
        "effective_threshold",
        "effective_rule",
        "data.texts_sha256",
    ),
    "longeval_lines_acc": ("num_lines", "num_cases", "seed", "over_length", "testcases", "data.prompts_sha256"),
    "longeval_lines_ppl": ("num_lines", "num_cases", "seed", "over_length", "testcases", "data.prompts_sha256"),
}
SETTING_NAMES = {"trunc_len": "K", "sliding_window": "d", "alpha": "α", "beta": "β"}
DOCS_KEY, VERSION_KEY = "<n-samples effective>", "<task version>"  # the keys gate.settings_differences uses

# per-length / per-size metric names: forgetting_curve copy_acc@00512, gain map gain@L01024, LongEval acc_0200
_PER_LENGTH = re.compile(r"^(copy_acc|lm_acc)@(\d+)$")
_PER_MAP_LENGTH = re.compile(r"^gain@L(\d+)$")
_PER_LINES = re.compile(r"^(acc|answer_ppl|non_answer_ppl|prompt_tokens)_(\d+)$")
# a training step in a model name or label: checkpoint-1200, step1200, global_step_1200, ckpt_1200, iter-1200
_STEP = re.compile(r"(?i)(?:checkpoint|ckpt|global[-_]?step|step|iter(?:ation)?)[-_=\s]?(\d+)")

RUNS_AS_COLUMNS = 4  # more runs than this: tables get a row per run
FORGETTING_CURVES_PER_PICTURE = 4  # legends of more runs no longer fit beside the axes
GAIN_MAPS_PER_PICTURE = 3  # panels side by side at a readable size
LONGEVAL_RUNS_PER_PICTURE = 3  # two legend entries a run, inside the axes


# ----------------------------------------------------------------------------------------------- runs


@dataclass
class CardRun:
    """One run on the page: a model's results (one folder or file), its label and, in a series, its step."""

    label: str  # what the page calls it: --label, else the model's display name (pictures.names.display_name)
    run: Run
    results: dict[str, dict]  # task -> the parsed results file its numbers came from (the pictures read these)
    source: str  # the folder or file the run was read from
    step: int | None = None
    notes: dict[str, str] = field(default_factory=dict)  # task -> the skipped_lengths note, when not "none"


def short_name(name: str) -> str:
    """A folder's last two parts (hub ids stay whole): what tells apart runs of one model read from two folders."""
    if name.startswith(("/", ".", "~")) or "\\" in name:
        return "/".join(Path(name).parts[-2:])
    return name


def step_of(name: str) -> int | None:
    """The training step in a model name or label (its last ``checkpoint-N`` / ``stepN`` / ...), or the label itself
    when it is a plain number."""
    matches = list(_STEP.finditer(name))
    if matches:
        return int(matches[-1].group(1))
    return int(name) if name.strip().isdigit() else None


def _without_step(name: str) -> str:
    m = list(_STEP.finditer(name))[-1]
    return name[: m.start(1)] + name[m.end(1) :]


def checkpoint_steps(labels: list[str]) -> list[int] | None:
    """The steps of the runs when they are checkpoints of one training run: two runs or more, each with a step
    (:func:`step_of`), the names equal once the step is taken out, and no step twice. Else None."""
    steps = [step_of(label) for label in labels]
    if len(labels) < 2 or any(s is None for s in steps) or len(set(steps)) < len(steps):
        return None
    stems = {"" if label.strip().isdigit() else _without_step(label) for label in labels}
    return [s for s in steps if s is not None] if len(stems) == 1 else None


def _run_folders(path) -> list[Path]:
    """What one RESULTS input holds, one entry per run: the file itself, or each folder that holds results files
    (lm-eval writes ``<output_path>/<model>/results_<date>.json``, so a folder of several models is several runs)."""
    p = Path(path)
    files = find_results_files(p)
    if p.is_file():
        return [p]
    folders = sorted({f.parent for f in files})
    out: list[Path] = []
    for folder in folders:
        if any(other != folder and folder in other.parents for other in folders):
            out += [f for f in files if f.parent == folder]  # results files above another run's folder: one each
        else:
            out.append(folder)
    return out


def _one_model(folder: Path) -> None:
    """Refuse a folder whose results files name several models, with a way out (``load_run``'s message is the
    gate's)."""
    if folder.is_file():
        return
    names: dict[str, list[str]] = {}
    for f in find_results_files(folder):
        names.setdefault(model_name(load_results(f)), []).append(f.name)
    named = {k: v for k, v in names.items() if k}
    if len(named) > 1:
        detail = "; ".join(f"{m!r} in {', '.join(fs[:2])}{' ...' if len(fs) > 2 else ''}" for m, fs in named.items())
        raise UnusableInput(
            f"{folder}: results of {len(named)} different models in one folder ({detail}); give each model's "
            "results file as its own input"
        )


def load_runs(paths, labels=()) -> list[CardRun]:
    """The runs of the RESULTS inputs, in order (a folder of several models gives one run per model folder); the
    labels, one per run, replace the model names. Checkpoints of one training run are sorted by step."""
    folders = [f for p in paths for f in _run_folders(p)]
    if not folders:
        raise UnusableInput("no results given")
    labels = list(labels)
    if labels and len(labels) != len(folders):
        found = ", ".join(str(f) for f in folders[:6]) + (" ..." if len(folders) > 6 else "")
        raise UnusableInput(
            f"{len(labels)} --label for {len(folders)} runs found ({found}); give one --label per run, in this order"
        )
    runs = []
    for i, folder in enumerate(folders):
        _one_model(folder)
        run = load_run(folder)
        parsed = {f: load_results(f) for f in sorted(set(run.sources.values()))}
        results = {task: parsed[f] for task, f in run.sources.items()}
        label = labels[i] if labels else display_name(run.model)
        notes = {}
        for task, data in results.items():
            note = (data["results"].get(task) or {}).get("skipped_lengths,none")
            if isinstance(note, str) and note != "none":
                notes[task] = note
        runs.append(CardRun(label, run, results, str(folder), notes=notes))
    _unique_labels(runs)
    steps = checkpoint_steps([r.label for r in runs])
    if steps is not None:
        for r, s in zip(runs, steps):
            r.step = s
        runs.sort(key=lambda r: r.step or 0)
    return runs


def _unique_labels(runs: list[CardRun]) -> None:
    """Runs of one model name are told apart by the folder they were read from (then by their place)."""
    for suffix in (lambda i, r: f" [{short_name(r.source)}]", lambda i, r: f" #{i + 1}"):
        labels = [r.label for r in runs]
        for i, r in enumerate(runs):
            if labels.count(r.label) > 1:
                r.label += suffix(i, r)


# ----------------------------------------------------------------------------------------------- formatting


def esc(x) -> str:
    """Text for HTML text and (double-quoted) attributes."""
    return html.escape(str(x), quote=True)


def fmt(value) -> str:
    """A number as the page shows it: whole numbers in full, others to 4 significant digits."""
    if value is None:
        return "—"
    v = float(value)
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def _setting_text(value) -> str:
    if isinstance(value, list):
        return ", ".join(_setting_text(v) for v in value) if value else "[]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _setting_value(value, missing: bool = False) -> str:
    """A setting's value as HTML: ``absent``, or the value in ``<code>`` (a content hash shortened, whole on hover)."""
    if missing:
        return '<span class="muted">absent</span>'
    text = _setting_text(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40,}", value):  # a content hash: its start tells apart
        return f'<code title="{esc(text)}">{esc(text[:12])}…</code>'
    return f"<code>{esc(text)}</code>"


def _settings_rows(rows: list[tuple[str, list[str], bool]], labels: list[str], css: str = "settings") -> str:
    """(name HTML, value HTML per run, differs) rows: a table with a column per run, or, for one run or runs that
    all agree, a grid of name-value pairs."""
    same = len(labels) > 1 and all(len(set(values)) == 1 for _, values, _ in rows)
    if len(labels) == 1 or same:
        items = "".join(
            f"<div{' class=differ' if differ else ''}><dt>{name}</dt><dd>{values[0]}</dd></div>"
            for name, values, differ in rows
        )
        note = f'<p class="muted">The same in all {len(labels)} runs:</p>' if same else ""
        return f'{note}<dl class="{css}">{items}</dl>'
    head = "<th>setting</th>" + "".join(f"<th>{esc(label)}</th>" for label in labels)
    body = "".join(
        f"<tr{' class=differ' if differ else ''}><th>{name}</th>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
        for name, values, differ in rows
    )
    return table(head, body, css)


def _marks(label: str, name: str, value: float, stderr: float | None) -> str:
    """The attributes that let a reader (or a test) take a shown number back: run, metric, value and stderr."""
    out = f'data-run="{esc(label)}" data-metric="{esc(name)}" data-value="{esc(repr(value))}"'
    return out + (f' data-stderr="{esc(repr(stderr))}"' if stderr is not None else "")


def metric_cell(label: str, name: str, m: Metric | None, z: float = DEFAULT_Z, ci_column: bool = False) -> str:
    """A metric's value (± z·stderr, or its CI in a column of its own), marked with the run, metric and value."""
    if m is None:
        return '<td class="absent" title="not in this run">—</td>' + ('<td class="absent"></td>' if ci_column else "")
    if m.invalid is not None:  # the results file holds null or a string here: shown as it is, not as a number
        attrs = f'data-run="{esc(label)}" data-metric="{esc(name)}" data-invalid="{esc(m.invalid)}"'
        cell = f'<td class="num bad" {attrs}>not a number: {esc(m.invalid)}</td>'
        return cell + ('<td class="absent"></td>' if ci_column else "")
    attrs = _marks(label, name, m.value, m.stderr)
    half = z * m.stderr if m.stderr is not None else None
    if ci_column:
        ci = (
            f"[{esc(fmt(m.value - half))}, {esc(fmt(m.value + half))}]"
            if half is not None and math.isfinite(m.value)
            else '<span class="muted">no stderr</span>'
        )
        return f'<td class="num" {attrs}>{esc(fmt(m.value))}</td><td class="num">{ci}</td>'
    pm = f' <span class="pm">± {esc(fmt(half))}</span>' if half is not None else ""
    return f'<td class="num" {attrs}>{esc(fmt(m.value))}{pm}</td>'


def _direction(m: Metric | None) -> str:
    if m is None or m.higher_is_better is None:
        return ""
    if m.higher_is_better:
        return ' <span class="dir" title="higher is better">↑</span>'
    return ' <span class="dir" title="lower is better">↓</span>'


def table(head: str, rows: str, css: str = "") -> str:
    """A table (head: ``<th>`` cells, rows: ``<tr>`` rows) that scrolls sideways when wider than the page."""
    cls = f' class="{css}"' if css else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def png_img(png: bytes, alt: str, cls: str = "", width_percent: float | None = None) -> str:
    """A PNG inline, as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    style = f' style="width:{width_percent:.1f}%"' if width_percent is not None else ""
    return f'<img class="{esc(cls)}"{style} alt="{esc(alt)}" src="data:image/png;base64,{data}">'


# ----------------------------------------------------------------------------------------------- the page shell

CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4d9;--bg:#f6f7f9;--card:#fff;--warn:#b3261e;--warnbg:#fdecea;
--ok:#1e7b34;--okbg:#e7f4ea;--accent:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--fg);background:var(--bg)}
header.top{background:#fff;border-bottom:1px solid var(--line);padding:18px 24px 12px}
header.top h1{margin:0 0 4px;font-size:24px}
header.top p{margin:0;color:var(--muted)}
main{max-width:1180px;margin:0 auto;padding:16px 24px 40px}
section.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:16px 0}
section.card h2{margin:0 0 6px;font-size:20px}
h3{font-size:16px;margin:18px 0 6px}
p.lead{margin:0 0 10px;color:var(--muted)}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:14px;margin:6px 0 10px}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.meaning{color:var(--muted);min-width:16em}
td.absent{color:var(--muted);text-align:center}
td.bad{color:var(--warn)}
.pm{color:var(--muted);font-size:12px}
.note{color:var(--muted);font-size:12px}
table.gate td{min-width:5em}
.dir{color:var(--muted)}
.muted{color:var(--muted)}
.nowrap{white-space:nowrap}
th code{white-space:nowrap;overflow-wrap:normal}
.task{font-weight:400;font-size:12px;color:var(--muted)}
dl.settings div.differ,tr.differ td{background:#fff4d6}
dl.meanings{margin:4px 0 10px;font-size:13px;color:var(--muted)}
dl.meanings div{display:flex;gap:8px}dl.meanings dt{flex:none}dl.meanings dd{margin:0}
dl.settings{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:4px 14px;margin:6px 0 10px}
dl.settings div{border-bottom:1px solid var(--line);padding:3px 0;display:flex;gap:8px;justify-content:space-between}
dl.settings dt{font-weight:600;font-size:13px;white-space:nowrap}
dl.settings dd{margin:0;text-align:right;min-width:0;overflow-wrap:anywhere}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
.box{border-radius:6px;padding:10px 14px;margin:10px 0}
.box.warn{background:var(--warnbg);border:2px solid var(--warn)}
.box.warn h2,.box.warn strong{color:var(--warn)}
.box.ok{background:var(--okbg);border:1px solid var(--ok)}
.box ul{margin:4px 0 0;padding-left:20px}
.verdict{font-weight:700;white-space:nowrap}
.verdict.fail{color:var(--warn)}
.verdict.pass{color:var(--ok)}
.verdict.none{color:var(--muted)}
img.picture{display:block;max-width:100%;height:auto;margin:8px 0;border:1px solid var(--line);border-radius:4px}
.trends{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.trends img{width:100%;height:auto;border:1px solid var(--line);border-radius:4px}
details{margin:6px 0}
summary{cursor:pointer;color:var(--accent);overflow-wrap:anywhere}
iframe.viewer{width:100%;min-width:820px;height:760px;border:1px solid var(--line);border-radius:4px;background:#fff}
footer{color:var(--muted);font-size:13px;max-width:1180px;margin:0 auto;padding:0 24px 30px}
.meaning-inline{display:none;font-weight:400;font-size:12px;color:var(--muted);white-space:normal;max-width:16em}
@media (max-width:600px){main{padding:8px 10px 30px}section.card{padding:12px}header.top{padding:14px 12px 10px}
header.top h1{font-size:20px}th,td{padding:4px 6px}iframe.viewer{height:640px}
td.meaning,th.meaning{display:none}.meaning-inline{display:block}
.scroll tbody th:first-child{position:sticky;left:0;z-index:1}
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block}table.stack thead{display:none}
table.stack tr{border-bottom:1px solid var(--line);padding:4px 0}table.stack td{border:0;padding:1px 4px}
table.stack td::before{content:attr(data-label) ": ";color:var(--muted)}}
"""


def html_page(title: str, body: str, subtitle: str = "", footer: str = "") -> str:
    """The page shell of the report card, ``gate --html`` and ``leaderboard --html``: ``title`` and ``subtitle``
    are text (escaped here), ``body`` and ``footer`` are HTML already escaped by the caller."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style></head>\n<body>\n"
        f'<header class="top"><h1>{esc(title)}</h1>' + (f"<p>{esc(subtitle)}</p>" if subtitle else "") + "</header>\n"
        f"<main>\n{body}\n</main>\n"
        f"<footer>{footer or 'Written by lm-eval-longctx (lm_eval_longctx.report).'}</footer>\n</body></html>\n"
    )


def write_page(path, text: str) -> None:
    """Write a page (its folder created when missing); any failure is :class:`UnusableInput` naming the file."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnusableInput(f"{path}: cannot create the folder of the HTML page: {e.strerror or e}") from e
    write_text(path, text, what="HTML page")


# ----------------------------------------------------------------------------------------------- gate and leaderboard


def gate_table(report: GateReport, run_label: str | None = None, base_label: str | None = None) -> str:
    """The gate's rows as an HTML table (the columns of :meth:`GateReport.markdown`); values marked as in the card."""
    run_label = report.run_model if run_label is None else run_label
    base_label = report.baseline_model if base_label is None else base_label
    columns = ("metric", "baseline", "current", "change", "tolerance", "test", "CI of change / z × stderr", "status")
    out = []
    for r in report.rows:
        arrow = " ↑" if r.higher_is_better else " ↓" if r.higher_is_better is False else ""
        arrow += " (declared)" if r.declared and arrow else ""
        delta = r.current - r.baseline if r.current is not None and r.baseline is not None else None
        change = f"{delta:+.4g}" if delta is not None and math.isfinite(delta) else ""
        if r.test == "paired" and r.ci is not None:
            test, band = "paired", f"[{r.ci[0] + 0.0:+.4g}, {r.ci[1] + 0.0:+.4g}]"
        elif r.test == "unpaired":
            test, band = "unpaired", f"±{r.noise:.4g}"
        else:
            test, band = "—", ""
        note = f'<br><span class="note">({esc(r.note)})</span>' if r.note and r.test else ""
        task, metric = r.metric.split("/", 1) if "/" in r.metric else ("", r.metric)
        cls = {"regressed": "fail", "improved": "pass"}.get(r.status, "none")
        cells = []
        for label, value, se in ((base_label, r.baseline, r.baseline_se), (run_label, r.current, r.current_se)):
            if value is None:
                cells.append('<td class="absent">—</td>')
            else:
                attrs = _marks(label, r.metric, value, se)
                cells.append(f'<td class="num" {attrs}>{esc(format_number(value, se))}</td>')
        out.append(
            f'<tr><th><span class="task">{esc(task)}</span><br><span class="nowrap"><code>{esc(metric)}</code>'
            f'{esc(arrow)}</span></th>{"".join(cells)}<td class="num">{esc(change)}</td>'
            f'<td class="num">{esc(f"{r.tolerance:.4g}")}</td><td>{esc(test)}{note}</td><td class="num">{esc(band)}</td>'
            f'<td class="verdict {cls}">{esc(r.status)}</td></tr>'
        )
    return table("".join(f"<th>{c}</th>" for c in columns), "".join(out), "gate")


def gate_verdict(report: GateReport) -> tuple[str, str]:
    """(verdict text, css class) of a gate report."""
    n_reg = sum(r.status == "regressed" for r in report.rows)
    return (f"FAIL: {n_reg} metric(s) regressed", "fail") if n_reg else ("PASS: no metric regressed", "pass")


def _gate_explanation(report: GateReport) -> str:
    level = level_for_z(report.z)
    return (
        f"Regressed: <em>paired</em> rows, the whole {level:.1%} CI of the change (bootstrap over the same documents "
        f"of both runs, {report.n_resamples} resamples, seed {report.seed}) is worse than the baseline by more than "
        f"the tolerance; <em>unpaired</em> rows, the change is worse by more than the tolerance and by more than "
        f"z = {report.z:g} × sqrt(se_run² + se_base²)."
    )


def gate_page(report: GateReport) -> str:
    """``lm-eval-longctx gate --html``: the gate's verdict and table as a page."""
    verdict, cls = gate_verdict(report)
    body = (
        f'<section class="card"><p class="verdict {cls}">{esc(verdict)}</p>'
        f"<p>Run <code>{esc(report.run_model)}</code> against baseline <code>{esc(report.baseline_model)}</code>. "
        f"{_gate_explanation(report)}</p>{gate_table(report)}"
    )
    if report.files_without_directions:
        body += (
            '<p class="muted">(declared): direction from the task declaration (lm_eval_longctx/metrics/directions.py);'
            f" the results file records none: {esc(', '.join(report.files_without_directions))}.</p>"
        )
    body += "</section>"
    return html_page("Regression gate", body, f"{report.run_model} vs baseline {report.baseline_model}")


def leaderboard_page(board: Leaderboard) -> str:
    """``lm-eval-longctx leaderboard --html``: one row per run, one column per metric (value ± stderr)."""
    head = []
    for m in board.metrics:
        first = next((r.cells[m] for r in board.rows if m in r.cells), None)
        head.append(f"<th>{_metric_heading(m, first, with_task=True)}</th>")
    rows = []
    for row in board.rows:
        cells = []
        for m in board.metrics:
            c = row.cells.get(m)
            if c is None:
                cells.append('<td class="absent">missing</td>')
            else:
                attrs = _marks(row.label, m, c.value, c.stderr)
                cells.append(f'<td class="num" {attrs}>{esc(format_number(c.value, c.stderr))}</td>')
        rows.append(f"<tr><th>{esc(row.label)}</th>{''.join(cells)}</tr>")
    body = (
        '<section class="card"><p class="lead">One row per run (model and settings); value ± the harness\'s stderr. '
        "Rows of one model under other settings are labelled by what differs.</p>"
        f"{table('<th>model</th>' + ''.join(head), ''.join(rows))}</section>"
    )
    return html_page("Leaderboard", body, f"{len(board.rows)} rows, {len(board.metrics)} metrics")


# ----------------------------------------------------------------------------------------------- pictures


def _matplotlib_missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "pictures need matplotlib: pip install 'lm_eval_longctx[plot]'"
    return None


def _drawn(draw, what: str) -> tuple[bytes | None, str]:
    """``draw(path)`` writes a PNG; (its bytes, "") or (None, why it was not drawn)."""
    missing = _matplotlib_missing()
    if missing:
        return None, missing
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "picture.png"
        try:
            draw(path)
        except (ValueError, KeyError, TypeError, IndexError) as e:  # data the plot cannot draw, a label it cannot set
            return None, f"no picture of the {what}: {e}"
        return path.read_bytes(), ""


def _chunks(items: list, size: int) -> list[list]:
    """``items`` in as few groups of at most ``size`` as possible, of near-equal sizes (10 by 3: 3, 3, 2, 2)."""
    n_groups = -(-len(items) // size)
    base, extra = divmod(len(items), n_groups) if n_groups else (0, 0)
    out, start = [], 0
    for k in range(n_groups):
        end = start + base + (k < extra)
        out.append(items[start:end])
        start = end
    return out


def _pictures(items: list, size: int, draw, what: str, width=None) -> str:
    """One or more pictures of ``items`` (``size`` at most in each); ``draw(chunk, path, title)``. ``width(n)``: the
    share of the page width a picture of n items takes, so that every picture is drawn at one scale."""
    out = []
    chunks = _chunks(items, size)
    start = 1
    for chunk in chunks:
        title = None if len(chunks) == 1 else f"{what}: runs {start}-{start + len(chunk) - 1} of {len(items)}"
        start += len(chunk)
        png, why = _drawn(lambda path, c=chunk, t=title: draw(c, path, t), what)
        if png is None:
            out.append(f'<p class="muted">{esc(why)}</p>')
            continue
        share = 100 * width(len(chunk)) if width is not None and len(chunks) > 1 else None
        out.append(png_img(png, title or what, "picture", share))
    if len(chunks) > 1:
        out.insert(0, f'<p class="muted">{len(items)} runs, at most {size} to a picture, on shared scales.</p>')
    return "".join(out)


def _built_per_run(runs: list[CardRun], task: str, build, what: str) -> list | str:
    """``build(results, task, label)`` for every run that has ``task``; or, when one run's results cannot be drawn,
    the page's note saying so."""
    built = []
    for r in runs:
        if task in r.results:
            try:
                built.append(build(r.results[task], task, r.label))
            except (ValueError, KeyError, TypeError) as e:
                return f'<p class="muted">no {what} of {esc(r.label)}: {esc(e)}</p>'
    return built


def forgetting_curve_pictures(runs: list[CardRun], task: str = "forgetting_curve") -> str:
    """The forgetting curves of the runs (``plot_forgetting_curves``), a few runs to a picture."""
    from .pictures.forgetting_curve import curve_from_results, plot_forgetting_curves

    curves = _built_per_run(runs, task, curve_from_results, "forgetting curve")
    if isinstance(curves, str):
        return curves
    if not curves:
        return ""
    # one x scale for every picture: geometric lengths are drawn on a log axis only when every run has them
    log_x = all(c.spacing == "geometric" for c in curves)
    single_title = None if len(curves) > 1 else f"Forgetting curve: {curves[0].label}"
    return _pictures(
        curves,
        FORGETTING_CURVES_PER_PICTURE,
        lambda chunk, path, title: plot_forgetting_curves(chunk, path, title=title or single_title, log_x=log_x),
        "forgetting curves",
    )


def gain_map_pictures(runs: list[CardRun], task: str = "retrieval_gain_map") -> str:
    """The retrieval-gain maps of the runs (``plot_gain_maps``) on one colour scale, a few panels to a picture."""
    from .pictures.gain_map import map_from_results, plot_gain_maps, shared_limit

    maps = _built_per_run(runs, task, map_from_results, "retrieval-gain map")
    if isinstance(maps, str):
        return maps
    if not maps:
        return ""
    limit = shared_limit(maps)  # one colour scale for every picture
    return _pictures(
        maps,
        GAIN_MAPS_PER_PICTURE,
        lambda chunk, path, title: plot_gain_maps(chunk, path, title=title, limit=limit),
        "retrieval-gain maps",
        width=lambda n: (5.0 * n + 1.6) / (5.0 * GAIN_MAPS_PER_PICTURE + 1.6),  # plot_gain_maps' figure width
    )


def longeval_pictures(runs: list[CardRun]) -> str:
    """LongEval accuracy beside answer and non-answer PPL by prompt length (``plot_runs``), a few runs to a picture."""
    from .pictures.longeval import curves_from_results, plot_runs

    per_run = []
    for r in runs:
        section = {t: r.results[t]["results"][t] for t in LONGEVAL_TASKS if t in r.results}
        if section:
            curves = curves_from_results({"results": section})
            if curves:
                per_run.append((r.label, curves))
    if not per_run:
        return ""
    limits = None
    if len(per_run) > LONGEVAL_RUNS_PER_PICTURE:  # several pictures: one perplexity range for all of them
        limits = {m: _shared_range([c[m] for _, c in per_run if m in c]) for m in ("answer_ppl", "non_answer_ppl")}
    return _pictures(
        per_run,
        LONGEVAL_RUNS_PER_PICTURE,
        lambda chunk, path, title: plot_runs(dict(chunk), path, title=title, ppl_limits=limits),
        "LongEval lines by size",
    )


def _shared_range(curves) -> tuple[float, float]:
    """The range (5% margin) that holds every point of ``curves`` with its error bar, as matplotlib would draw it."""
    ends = [
        v + sign * (e if math.isfinite(e) else 0.0)
        for c in curves
        for v, e in zip(c.value, c.stderr)
        if math.isfinite(v)
        for sign in (-1, 1)
    ]
    if not ends:
        return (0.0, 1.0)
    low, high = min(ends), max(ends)
    margin = 0.05 * (high - low) or 0.5
    return (low - margin, high + margin)


def trend_png(runs: list[CardRun], name: str, z: float = DEFAULT_Z) -> bytes | None:
    """A small line chart of one metric against the training step, error bars ± z·stderr."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [
        (r.step, m.value, m.stderr)
        for r in runs
        if r.step is not None and (m := r.run.metrics.get(name)) is not None and math.isfinite(m.value)
    ]
    if len(points) < 2:
        return None
    fig = Figure(figsize=(4.2, 2.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    errs = [z * p[2] if p[2] is not None and math.isfinite(p[2]) else 0.0 for p in points]
    ax.errorbar(xs, ys, yerr=errs if any(errs) else None, marker="o", ms=4, capsize=3, color="tab:blue")
    task, metric, _ = split_name(name)
    hib = directions.declared_direction(task, metric)
    if isinstance(hib, directions.UnknownMetric):  # another suite's metric: the direction its results record
        hib = next((r.run.metrics[name].higher_is_better for r in runs if name in r.run.metrics), None)
    arrow = " (higher is better)" if hib else " (lower is better)" if hib is False else ""
    ax.set_title(f"{task}\n{metric}{arrow}", fontsize=9)
    ax.set_xlabel("training step", fontsize=8)
    if len(xs) <= 12:
        ax.set_xticks(xs)  # the checkpoints themselves, not fractional steps between them
    ax.set_ylabel(metric, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------- sections


def _tasks_of(runs: list[CardRun]) -> list[str]:
    seen: list[str] = []
    for r in runs:
        for name in r.run.metrics:
            task = split_name(name)[0]
            if task not in seen:
                seen.append(task)
    return seen


def _section_tasks(runs: list[CardRun]) -> list[tuple[str, list[str]]]:
    """(section key, its tasks) in page order: the suite's sections, then any other task with metrics."""
    tasks = _tasks_of(runs)
    out = []
    for key in TASK_SECTIONS:
        members = [t for t in (LONGEVAL_TASKS if key == "longeval_lines" else (key,)) if t in tasks]
        if members:
            out.append((key, members))
    known = {t for _, ms in out for t in ms}
    out += [(t, [t]) for t in sorted(tasks) if t not in known]
    return out


def _metrics_of_task(runs: list[CardRun], task: str) -> list[str]:
    names: list[str] = []
    for r in runs:
        for name in r.run.metrics:
            if split_name(name)[0] == task and name not in names:
                names.append(name)
    return sorted(names)


def _headline_names(runs: list[CardRun], task: str) -> list[tuple[str, str]]:
    """("task/metric", meaning) of the task's headline metrics that some run has; for a task of another suite,
    its metrics that are not per length or size."""
    present = set(_metrics_of_task(runs, task))
    if task in HEADLINES:
        return [(f"{task}/{m}", meaning) for m, meaning in HEADLINES[task] if f"{task}/{m}" in present]
    return [(n, "") for n in sorted(present)]


def headline_table(
    runs: list[CardRun], names: list[tuple[str, str]], z: float = DEFAULT_Z, with_task: bool = False
) -> str:
    """Rows of metrics (with what each means), a column per run; one run: its value and CI in two columns; more runs
    than fit side by side (:data:`RUNS_AS_COLUMNS`): a row per run, the meanings below."""
    if not names:
        return ""
    if len(runs) > RUNS_AS_COLUMNS:
        return _headline_rows_per_run(runs, names, z, with_task)
    single = len(runs) == 1
    level = f"{level_for_z(z):.0%}"
    if single:
        head = f"<th>metric</th><th>value</th><th>{esc(level)} CI (± {z:g}·stderr)</th>"
        head += '<th class="meaning">what it means</th>'
    else:
        head = "<th>metric</th>" + "".join(f"<th>{esc(r.label)}</th>" for r in runs)
        head += '<th class="meaning">what it means</th>'
    rows = []
    for name, meaning in names:
        first = next((r.run.metrics[name] for r in runs if name in r.run.metrics), None)
        cells = "".join(metric_cell(r.label, name, r.run.metrics.get(name), z, ci_column=single) for r in runs)
        inline = f'<span class="meaning-inline" aria-hidden="true">{esc(meaning)}</span>' if meaning else ""
        rows.append(
            f"<tr><th>{_metric_heading(name, first, with_task)}{inline}</th>{cells}"
            f'<td class="meaning">{esc(meaning)}</td></tr>'
        )
    return table(head, "".join(rows), "headline")


def _metric_heading(name: str, first: Metric | None, with_task: bool) -> str:
    task, metric, _ = split_name(name)
    shown = f'<span class="nowrap"><code>{esc(metric)}</code>{_direction(first)}</span>'
    return f'<span class="task">{esc(task)}</span><br>{shown}' if with_task else shown


def _headline_rows_per_run(runs: list[CardRun], names: list[tuple[str, str]], z: float, with_task: bool) -> str:
    firsts = {n: next((r.run.metrics[n] for r in runs if n in r.run.metrics), None) for n, _ in names}
    head = "<th>run</th>" + "".join(f"<th>{_metric_heading(n, firsts[n], with_task)}</th>" for n, _ in names)
    rows = "".join(
        f"<tr><th>{esc(r.label)}</th>"
        + "".join(metric_cell(r.label, n, r.run.metrics.get(n), z) for n, _ in names)
        + "</tr>"
        for r in runs
    )
    meanings = "".join(
        f"<div><dt><code>{esc(split_name(n)[1])}</code></dt><dd>{esc(meaning)}</dd></div>"
        for n, meaning in names
        if meaning
    )
    return f'{table(head, rows, "headline")}<dl class="meanings">{meanings}</dl>'


def all_metrics_table(runs: list[CardRun], task: str, z: float = DEFAULT_Z) -> str:
    """Every metric of the task, per-length ones included, in a closed ``<details>``."""
    names = _metrics_of_task(runs, task)
    if not names:
        return ""
    head = "<th>metric</th>" + "".join(f"<th>{esc(r.label)}</th>" for r in runs)
    rows = "".join(
        f"<tr><th><code>{esc(split_name(n)[1])}</code></th>"
        + "".join(metric_cell(r.label, n, r.run.metrics.get(n), z) for r in runs)
        + "</tr>"
        for n in names
    )
    return f"<details><summary>all {len(names)} metrics of {esc(task)}</summary>{table(head, rows)}</details>"


def longeval_by_size_table(runs: list[CardRun], z: float = DEFAULT_Z) -> str:
    """Per number of lines N: prompt tokens, accuracy, answer and non-answer PPL (one row per N and run)."""
    sizes: set[int] = set()
    for r in runs:
        for name in r.run.metrics:
            task, metric, filt = split_name(name)
            m = _PER_LINES.match(metric)
            if task in LONGEVAL_TASKS and m and filt == "none":
                sizes.add(int(m.group(2)))
    if not sizes:
        return ""
    columns = (
        ("longeval_lines_ppl", "prompt_tokens", "prompt tokens"),
        ("longeval_lines_acc", "acc", "accuracy ↑"),
        ("longeval_lines_ppl", "answer_ppl", "answer-token PPL ↓"),
        ("longeval_lines_ppl", "non_answer_ppl", "non-answer PPL ↓"),
    )
    width = max(len(m.group(2)) for r in runs for n in r.run.metrics if (m := _PER_LINES.match(split_name(n)[1])))
    multi = len(runs) > 1
    head = "<th>lines N</th>" + ("<th>run</th>" if multi else "") + "".join(f"<th>{esc(c[2])}</th>" for c in columns)
    rows = []
    for n in sorted(sizes):
        for r in runs:
            names = [f"{task}/{metric}_{n:0{width}d}" for task, metric, _ in columns]
            if not any(name in r.run.metrics for name in names):
                continue
            cells = "".join(metric_cell(r.label, name, r.run.metrics.get(name), z) for name in names)
            run_cell = f"<td>{esc(r.label)}</td>" if multi else ""
            rows.append(f"<tr><th>{n}</th>{run_cell}{cells}</tr>")
    return f"<h3>By number of lines</h3>{table(head, ''.join(rows))}"


def settings_table(runs: list[CardRun], task: str, differing: set[str]) -> str:
    """The compact settings of one task, one column per run (rows that differ between runs highlighted), and all
    recorded settings in a closed ``<details>``."""
    have = [r for r in runs if task in r.run.settings or task in r.run.versions]
    if not have:
        return ""
    flat = [flatten(r.run.settings.get(task) or {}) for r in have]
    keys = [k for k in SETTINGS_SHOWN.get(task, ()) if any(k in f for f in flat)]
    keys += sorted(k for k in differing if k not in keys and k not in (DOCS_KEY, VERSION_KEY))
    rows = []
    for key in keys:
        name = f"<code>{esc(key)}</code>" + (f" ({esc(SETTING_NAMES[key])})" if key in SETTING_NAMES else "")
        rows.append((name, [_setting_value(f.get(key), key not in f) for f in flat], key in differing))
    rows.append(("documents scored", [_setting_value(r.run.n_samples.get(task)) for r in have], DOCS_KEY in differing))
    rows.append(("task version", [_setting_value(r.run.versions.get(task)) for r in have], VERSION_KEY in differing))
    full_keys = sorted({k for f in flat for k in f})
    full = [(f"<code>{esc(k)}</code>", [_setting_value(f.get(k), k not in f) for f in flat], False) for k in full_keys]
    labels = [r.label for r in have]
    return (
        f"<h3>Settings of {esc(task)}</h3>{_settings_rows(rows, labels)}"
        f"<details><summary>all {len(full_keys)} recorded settings of {esc(task)} "
        f"(configs.{esc(task)}.metadata.longctx_settings)</summary>{_settings_rows(full, labels, 'settings all')}"
        "</details>"
    )


def task_section(runs: list[CardRun], key: str, tasks: list[str], diffs: dict, z: float = DEFAULT_Z) -> str:
    """One task's section (LongEval: its two tasks): headline numbers, pictures, every metric, the settings."""
    title, lead = TASK_SECTIONS.get(key, (key, "A task of another suite: its metrics as the results file gives them."))
    parts = [f'<section class="card" id="task-{esc(key)}"><h2>{esc(title)}</h2><p class="lead">{esc(lead)}</p>']
    differing = {t: sorted({k for pair in diffs.values() for k in pair.get(t, ())}) for t in tasks}
    for t in tasks:
        if differing[t]:
            parts.append(
                f'<div class="box warn"><strong>Settings differ</strong> for {esc(t)} between the runs: '
                f"{esc(', '.join(differing[t]))}. Their numbers are not measured the same way.</div>"
            )
    missing = [r.label for r in runs if not any(t in r.run.settings or t in r.results for t in tasks)]
    if missing and len(runs) > 1:
        parts.append(f'<p class="muted">Not in these runs: {esc(", ".join(missing))}.</p>')
    names = [n for t in tasks for n in _headline_names(runs, t)]
    parts.append(headline_table(runs, names, z))
    for r in runs:
        for t in tasks:
            if t in r.notes:
                parts.append(f'<p class="box warn">{esc(r.label)}: skipped lengths: {esc(r.notes[t])}</p>')
    if key == "forgetting_curve":
        parts.append(forgetting_curve_pictures(runs))
    elif key == "retrieval_gain_map":
        parts.append(gain_map_pictures(runs))
    elif key == "longeval_lines":
        parts.append(longeval_pictures(runs))
        parts.append(longeval_by_size_table(runs, z))
    for t in tasks:
        parts.append(all_metrics_table(runs, t, z))
    for t in tasks:
        parts.append(settings_table(runs, t, set(differing[t])))
    parts.append("</section>")
    return "".join(parts)


def settings_differ_box(runs: list[CardRun], diffs: dict) -> str:
    """The visible box naming what differs between each run and the first one (or, for checkpoints, the one
    before), with the values."""
    if len(runs) < 2:
        return ""
    if not diffs:
        return (
            '<div class="box ok">Same settings in every run for the tasks they share (longctx_settings, task '
            "version, documents scored; paths identified by equal content hashes and runtime settings are not "
            "compared).</div>"
        )
    items = []
    for (run_label, base_label), per_task in diffs.items():
        run = next(r for r in runs if r.label == run_label)
        base = next(r for r in runs if r.label == base_label)
        for task, keys in per_task.items():
            shown = []
            a, b = flatten(run.run.settings.get(task) or {}), flatten(base.run.settings.get(task) or {})
            for k in keys:
                if k == DOCS_KEY:
                    va, vb = run.run.n_samples.get(task), base.run.n_samples.get(task)
                elif k == VERSION_KEY:
                    va, vb = run.run.versions.get(task), base.run.versions.get(task)
                else:
                    va, vb = a.get(k, "absent"), b.get(k, "absent")
                shown.append(
                    f"<code>{esc(k)}</code>: <code>{esc(_setting_text(vb)[:80])}</code> → "
                    f"<code>{esc(_setting_text(va)[:80])}</code>"
                )
            items.append(
                f"<li><strong>{esc(task)}</strong>, {esc(base_label)} → {esc(run_label)}: {'; '.join(shown)}</li>"
            )
    return (
        '<div class="box warn" id="settings-differ"><h2>Settings differ</h2><p>These runs were not measured the '
        "same way: their numbers below are shown side by side but do not compare directly.</p>"
        f"<ul>{''.join(items)}</ul></div>"
    )


def settings_diffs(runs: list[CardRun]) -> dict:
    """(run label, compared-with label) -> {task: differing keys}: each run against the first run, or in a
    checkpoint series against the checkpoint before."""
    out = {}
    series = runs[0].step is not None
    for i, r in enumerate(runs[1:], start=1):
        base = runs[i - 1] if series else runs[0]
        common = sorted(set(_tasks_of([r])) & set(_tasks_of([base])))
        diffs = settings_differences(r.run, base.run, common)
        if diffs:
            out[(r.label, base.label)] = diffs
    return out


def runs_table(runs: list[CardRun]) -> str:
    """One row per run: label, step, model, tasks, the files read (a block per run on a narrow screen)."""
    series = runs[0].step is not None
    columns = ["#", "run", *(["step"] if series else []), "model", "tasks", "read from"]
    rows = []
    for i, r in enumerate(runs, start=1):
        tasks = ", ".join(t for _, ts in _section_tasks([r]) for t in ts)
        files = "<br>".join(f"<code>{esc(f)}</code>" for f in sorted(set(r.run.sources.values())))
        cells = [str(i), esc(r.label), *([str(r.step)] if series else []), f"<code>{esc(r.run.model)}</code>"]
        cells += [esc(tasks), files]
        rows.append("<tr>" + "".join(f'<td data-label="{c}">{v}</td>' for c, v in zip(columns, cells)) + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in columns)
    return table(head, "".join(rows), "stack")


def checkpoint_section(runs: list[CardRun], z: float = DEFAULT_Z) -> str:
    """The gate between consecutive checkpoints, and each headline metric against the step."""
    parts = [
        '<section class="card" id="checkpoints"><h2>Across checkpoints</h2><p class="lead">The runs are checkpoints '
        f"of one training run (steps {esc(', '.join(str(r.step) for r in runs))}).</p>"
        '<h3>Regression gate between consecutive checkpoints</h3><p class="muted">Each checkpoint against the one '
        "before (<code>lm-eval-longctx gate</code> with the default tolerances): a paired per-document test where "
        "both runs have <code>--log_samples</code> files, else the stderr band.</p>"
    ]
    rows, details = [], []
    for base, run in zip(runs, runs[1:]):
        pair = f"{esc(base.step)} → {esc(run.step)}"
        try:
            report = compare(run.run, base.run, GateConfig(z=z))
        except UnusableInput as e:
            rows.append(
                f'<tr><td data-label="steps">{pair}</td><td class="verdict none" colspan="4" data-label="verdict">'
                f"not compared: {esc(e)}</td></tr>"
            )
            continue
        verdict, cls = gate_verdict(report)
        regressed = [r.metric for r in report.rows if r.status == "regressed"]
        improved = [r.metric for r in report.rows if r.status == "improved"]
        n_paired = sum(r.test == "paired" for r in report.rows)
        n_unpaired = sum(r.test == "unpaired" for r in report.rows)
        rows.append(
            f'<tr><td data-label="steps">{pair}</td><td class="verdict {cls}" data-label="verdict">{esc(verdict)}</td>'
            f'<td data-label="regressed">{esc(", ".join(regressed) or "—")}</td>'
            f'<td data-label="improved">{esc(", ".join(improved) or "—")}</td>'
            f'<td data-label="tests">{n_paired} paired, {n_unpaired} unpaired</td></tr>'
        )
        details.append(
            f"<details><summary>gate table, step {pair}</summary>{gate_table(report, run.label, base.label)}</details>"
        )
    head = "".join(f"<th>{c}</th>" for c in ("steps", "verdict", "regressed", "improved", "tests"))
    parts.append(table(head, "".join(rows), "stack") + "".join(details))
    parts.append(f'<h3>Headline metrics against the step</h3><p class="muted">Error bars: ± {z:g} × stderr.</p>')
    missing = _matplotlib_missing()
    charts = []
    for _, tasks in [] if missing else _section_tasks(runs):
        for t in tasks:
            for name, _meaning in _headline_names(runs, t):
                png = trend_png(runs, name, z)
                if png:
                    charts.append(png_img(png, f"{name} against the training step"))
    parts.append(f'<div class="trends">{"".join(charts)}</div>' if charts else f'<p class="muted">{esc(missing)}</p>')
    parts.append("</section>")
    return "".join(parts)


def at_a_glance(runs: list[CardRun], z: float = DEFAULT_Z) -> str:
    """The first headline metric of every task, one table."""
    names = []
    for _, tasks in _section_tasks(runs):
        for t in tasks:
            names += _headline_names(runs, t)[:1]
    if not names:
        return '<section class="card"><h2>At a glance</h2><p>No metrics in these results.</p></section>'
    return (
        '<section class="card" id="glance"><h2>At a glance</h2><p class="lead">The first headline number of each '
        f"task (± {z:g} × the harness's stderr, a {level_for_z(z):.0%} normal interval; none where it gives "
        "N/A); the sections below give the rest, the pictures and the settings.</p>"
        f"{headline_table(runs, names, z, with_task=True)}"
        "</section>"
    )


# ----------------------------------------------------------------------------------------------- viewer


def _export_owner(runs: list[CardRun], export: Path) -> CardRun | None:
    """The run whose settings record this folder as its ``export_tokens``."""
    targets = {export.resolve(), export.resolve().parent}
    for r in runs:
        for settings in r.run.settings.values():
            for key, value in flatten(settings or {}).items():
                if key.split(".")[-1] == "export_tokens" and isinstance(value, str) and value:
                    if Path(value).expanduser().resolve() in targets:
                        return r
    return None


def viewer_section(runs: list[CardRun], exports) -> str:
    """The key-token viewer of each export in an ``<iframe srcdoc>`` (sandboxed: scripts only, no access to this
    page), its HTML attribute-escaped."""
    from ..data.export_files import ExportFormatError
    from .viewer import ViewerError, build_page

    frames = []
    for export in exports:
        path = Path(export)
        owner = _export_owner(runs, path)
        title = f"Key tokens of {owner.label}" if owner else f"Key tokens of the export {path}"
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "viewer.html"
            try:
                info = build_page([path], page, title=title)
            except (ViewerError, ExportFormatError, FileNotFoundError) as e:
                raise UnusableInput(
                    f"--export {path}: {e}; give the folder that export_tokens wrote (with "
                    "longppl_govreport/manifest.json in it), or leave --export out"
                ) from e
            except OSError as e:
                raise UnusableInput(f"--export {path}: cannot read the export: {e.strerror or e}") from e
            text = page.read_text(encoding="utf-8")
        frames.append(
            f'<h3>{esc(title)}</h3><p class="muted">{info["n_docs"]} documents, {sum(info["n_tokens"])} tokens, '
            f"{sum(info['n_key'])} key tokens: pick a document on the left, hover a token for its numbers.</p>"
            f'<div class="scroll"><iframe class="viewer" sandbox="allow-scripts" title="{esc(title)}" '
            f'srcdoc="{esc(text)}"></iframe></div>'
        )
    return (
        '<section class="card" id="viewer"><h2>Key tokens (longppl_govreport)</h2><p class="lead">Every token '
        "shaded by the evaluator's LSD, key tokens outlined (the page of <code>lm-eval-longctx view</code>).</p>"
        + "".join(frames)
        + "</section>"
    )


# ----------------------------------------------------------------------------------------------- the report card


def report_card_html(runs: list[CardRun], exports=(), title: str | None = None, z: float = DEFAULT_Z) -> str:
    """The report card of ``runs`` (see the module docstring) as one HTML page."""
    if not runs:
        raise UnusableInput("no runs to report")
    single = len(runs) == 1
    title = title or (
        f"Long-context report card: {runs[0].label}" if single else f"Long-context report card: {len(runs)} runs"
    )
    if single:
        subtitle = f"model {runs[0].run.model}"
    elif runs[0].step is not None:
        subtitle = f"{len(runs)} checkpoints, steps {runs[0].step} to {runs[-1].step}"
    else:
        subtitle = ", ".join(r.label for r in runs)
    diffs = settings_diffs(runs)
    body = [
        '<section class="card" id="runs"><h2>' + ("Run" if single else "Runs") + "</h2>" + runs_table(runs),
        settings_differ_box(runs, diffs),
        "</section>",
        at_a_glance(runs, z),
    ]
    if runs[0].step is not None:
        body.append(checkpoint_section(runs, z))
    for key, tasks in _section_tasks(runs):
        body.append(task_section(runs, key, tasks, diffs, z))
    if exports:
        body.append(viewer_section(runs, exports))
    footer = (
        f"± and CIs: {z:g} × the stderr lm-eval reports (a {level_for_z(z):.0%} normal interval), none where it "
        "reports N/A. Written by <code>lm-eval-longctx report</code>; docs/tools/report-card.md."
    )
    return html_page(title, "\n".join(b for b in body if b), subtitle, footer)


def build_report_card(paths, out_path, labels=(), exports=(), title: str | None = None) -> dict:
    """Read the RESULTS inputs, write the report card to ``out_path``; return what was written."""
    runs = load_runs(paths, labels)
    page = report_card_html(runs, exports, title)
    write_page(out_path, page)
    return {
        "path": str(out_path),
        "bytes": len(page.encode("utf-8")),
        "runs": [r.label for r in runs],
        "checkpoints": runs[0].step is not None,
        "settings_differ": bool(settings_diffs(runs)),
    }
