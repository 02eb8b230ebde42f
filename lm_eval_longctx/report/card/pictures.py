"""The report card's pictures: the drawers a task's declaration names in its ``pictures`` (each drawer takes the
runs and the tasks of one section), and the small chart of a metric against the training step.

Drawers are looked up by their function's name, which is the name the declarations use. A run's results that a
drawer cannot build its picture from (a length beyond any integer, a setting that is not a number) are an
:class:`~..results.UnusableInput` naming the file and the task; a picture that cannot be drawn from sound data is a
note on the page."""

from __future__ import annotations

import io
import math
import re
import tempfile
from pathlib import Path

from ..intervals import interval
from ..results import DEFAULT_Z, UnusableInput, split_name
from ..text import esc
from .card_runs import CardRun
from .page import png_img, table
from .tables import metric_cell

CURVES_PER_PICTURE = 4  # forgetting curves: legends of more runs no longer fit beside the axes
MAPS_PER_PICTURE = 3  # gain maps: panels side by side at a readable size
LINES_RUNS_PER_PICTURE = 3  # LongEval curves: two legend entries a run, inside the axes
# a per-size metric: its stem and the size (acc_0200, answer_ppl_0200, prompt_tokens_0200)
PER_SIZE = re.compile(r"^(.+)_(\d+)$")
_BUILD_ERRORS = (ValueError, KeyError, TypeError, IndexError, OverflowError)


def matplotlib_missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "pictures need matplotlib: pip install 'lm_eval_longctx[plot]'"
    return None


def _drawn(draw, what: str) -> tuple[bytes | None, str]:
    """``draw(path)`` writes a PNG; (its bytes, "") or (None, why it was not drawn)."""
    missing = matplotlib_missing()
    if missing:
        return None, missing
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "picture.png"
        try:
            draw(path)
        except _BUILD_ERRORS as e:  # data the plot cannot draw, a label it cannot set
            return None, f"no picture of the {what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
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


def _built_per_run(runs: list[CardRun], task: str, build, what: str) -> list:
    """``build(results, task, label)`` for every run that has ``task``; results it cannot be built from are refused,
    naming the file."""
    built = []
    for r in runs:
        if task in r.results:
            try:
                built.append(build(r.results[task], task, r.label))
            except _BUILD_ERRORS as e:
                detail = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise UnusableInput(
                    f"{r.run.sources.get(task, r.source)}: no {what} can be drawn from {task}'s results "
                    f"({type(e).__name__}: {detail}); correct or remove the value"
                ) from e
    return built


def _each_task(runs: list[CardRun], tasks: list[str], build, what: str, pictures) -> str:
    """``pictures(built)`` for each task some run has, ``built`` its runs' ``build`` (``_built_per_run``)."""
    return "".join(pictures(built) for task in tasks if (built := _built_per_run(runs, task, build, what)))


def forgetting_curve(runs: list[CardRun], tasks: list[str], z: float = DEFAULT_Z) -> str:
    """The forgetting curves of the runs (copy and LM accuracy by copy length), a few runs to a picture."""
    from ..pictures.forgetting_curve_plot import curve_from_results, plot_forgetting_curves

    def pictures(curves) -> str:
        # one x scale for every picture: geometric lengths are drawn on a log axis only when every run has them
        log_x = all(c.spacing == "geometric" for c in curves)
        single_title = None if len(curves) > 1 else f"Forgetting curve: {curves[0].label}"
        return _pictures(
            curves,
            CURVES_PER_PICTURE,
            lambda chunk, path, title: plot_forgetting_curves(chunk, path, title=title or single_title, log_x=log_x),
            "forgetting curves",
        )

    return _each_task(runs, tasks, curve_from_results, "forgetting curve", pictures)


def gain_map(runs: list[CardRun], tasks: list[str], z: float = DEFAULT_Z) -> str:
    """The retrieval-gain maps of the runs on one colour scale, a few panels to a picture."""
    from ..pictures.gain_map_plot import map_from_results, plot_gain_maps, shared_limit

    def pictures(maps) -> str:
        limit = shared_limit(maps)  # one colour scale for every picture
        return _pictures(
            maps,
            MAPS_PER_PICTURE,
            lambda chunk, path, title: plot_gain_maps(chunk, path, title=title, limit=limit),
            "retrieval-gain maps",
            width=lambda n: (5.0 * n + 1.6) / (5.0 * MAPS_PER_PICTURE + 1.6),  # plot_gain_maps' figure width
        )

    return _each_task(runs, tasks, map_from_results, "retrieval-gain map", pictures)


def longeval_curves(runs: list[CardRun], tasks: list[str], z: float = DEFAULT_Z) -> str:
    """Accuracy beside answer and non-answer PPL by prompt length, the section's tasks of each run together, a few
    runs to a picture."""
    from ..pictures.longeval_plot import curves_from_results, plot_runs

    per_run = []
    for r in runs:
        section = {t: r.results[t]["results"][t] for t in tasks if t in r.results}
        if section:
            try:
                curves = curves_from_results({"results": section})
            except _BUILD_ERRORS as e:
                raise UnusableInput(
                    f"{', '.join(sorted({r.run.sources[t] for t in section}))}: no LongEval curves can be drawn from "
                    f"{', '.join(section)} ({type(e).__name__}: {e}); correct or remove the value"
                ) from e
            if curves:
                per_run.append((r.label, curves))
    if not per_run:
        return ""
    limits = None
    if len(per_run) > LINES_RUNS_PER_PICTURE:  # several pictures: one perplexity range for all of them
        limits = {m: _shared_range([c[m] for _, c in per_run if m in c]) for m in ("answer_ppl", "non_answer_ppl")}
    return _pictures(
        per_run,
        LINES_RUNS_PER_PICTURE,
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


def longeval_by_size(runs: list[CardRun], tasks: list[str], z: float = DEFAULT_Z) -> str:
    """A table per size: every per-size metric of the section's tasks (``stem_NNNN``), one row per size and run;
    informational metrics (no direction) first."""
    named: dict[tuple[str, str], dict[int, str]] = {}  # (task, stem) -> size -> "task/stem_NNNN"
    hib: dict[tuple[str, str], bool | None] = {}
    for r in runs:
        for name, m in r.run.metrics.items():
            task, metric, filt = split_name(name)
            match = PER_SIZE.match(metric)
            if task in tasks and match and filt == "none":
                key = (task, match.group(1))
                named.setdefault(key, {})[int(match.group(2))] = name
                hib.setdefault(key, m.higher_is_better)
    if not named:
        return ""
    columns = sorted(named, key=lambda c: (hib[c] is not None, tasks.index(c[0]), c[1]))
    stems = [stem for _, stem in columns]
    sizes = sorted({n for per_size in named.values() for n in per_size})
    multi = len(runs) > 1

    def heading(key: tuple[str, str]) -> str:
        task, stem = key
        arrow = " ↑" if hib[key] else " ↓" if hib[key] is False else ""
        where = f' <span class="task">{esc(task)}</span>' if stems.count(stem) > 1 else ""
        return f"<th><code>{esc(stem)}</code>{arrow}{where}</th>"

    head = "<th>size</th>" + ("<th>run</th>" if multi else "") + "".join(heading(c) for c in columns)
    rows = []
    for n in sizes:
        for r in runs:
            names = [named[c].get(n, "") for c in columns]
            if not any(name in r.run.metrics for name in names):
                continue
            cells = "".join(metric_cell(r.label, name, r.run.metrics.get(name), z) for name in names)
            run_cell = f"<td>{esc(r.label)}</td>" if multi else ""
            rows.append(f"<tr><th>{n}</th>{run_cell}{cells}</tr>")
    return f"<h3>By size</h3>{table(head, ''.join(rows))}"


DRAWERS = {f.__name__: f for f in (forgetting_curve, gain_map, longeval_curves, longeval_by_size)}


def draw(name: str, runs: list[CardRun], tasks: list[str], z: float = DEFAULT_Z) -> str:
    """The drawer ``name`` of a section's declaration; a name this version does not know is a note on the page."""
    drawer = DRAWERS.get(name)
    if drawer is None:
        return (
            f'<p class="muted">no drawer named {esc(name)} in this version of lm_eval_longctx (known: '
            f"{esc(', '.join(sorted(DRAWERS)))})</p>"
        )
    return drawer(runs, tasks, z)


def trend_png(runs: list[CardRun], name: str, z: float = DEFAULT_Z) -> bytes | None:
    """A small line chart of one metric against the training step, error bars ± z·stderr."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [
        (r.step, m.value, m.stderr)
        for r in runs
        if r.step is not None and (m := r.run.metrics.get(name)) is not None and math.isfinite(m.value)
    ]
    if len(points) < 2:
        return None
    with matplotlib.rc_context({"text.parse_math": False}):  # names from files are text, never mathtext
        fig = Figure(figsize=(4.2, 2.8), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        bounds = [interval(name, p[1], p[2], z) or (p[1], p[1]) for p in points]
        errs = [[p[1] - b[0] for p, b in zip(points, bounds)], [b[1] - p[1] for p, b in zip(points, bounds)]]
        ax.errorbar(xs, ys, yerr=errs if any(map(any, errs)) else None, marker="o", ms=4, capsize=3, color="tab:blue")
        task, metric, _ = split_name(name)
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
