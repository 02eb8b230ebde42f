"""The audit's picture: the map's mean gain per length with its 95% interval, the claimed window W and the effective
length marked, the rules' bars drawn; beside it the forgetting curve's copy and LM accuracy at the copy lengths whose
samples fill each length, and, when the audit ran the cross-check, RULER's needle score at the same lengths with
RULER's bar and its effective length.

matplotlib is an optional dependency (``pip install lm_eval_longctx[plot]``), imported when a picture is drawn.
"""

from __future__ import annotations

from pathlib import Path

from ... import output_dirs
from .names import plain_text


def _tokens(n: float) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _length_axis(ax, lengths: list[int], label: str) -> None:
    """A log-2 axis ticked at the tested lengths, in tokens (1k = 1024)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([_tokens(x) for x in lengths])
    ax.minorticks_off()
    ax.set_xlabel(label)


def _legend_below(ax) -> None:
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


TASK_STYLES = (("#6a9f3a", "^"), ("#b5651d", "s"), ("#8e44ad", "D"), ("#555555", "x"))


def _finish_panel(ax, lengths: list[int], length_label: str, ylabel: str, title: str) -> None:
    """What every panel ends with: the length axis, its labels and title, a light grid, the legend below."""
    _length_axis(ax, lengths, length_label)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    _legend_below(ax)


def _ruler_panel(ax, cross_check: dict, window: int) -> None:
    rows = sorted(cross_check.get("lengths", []), key=lambda r: r["length"])
    x = [r["length"] for r in rows]
    score = [r["score"] for r in rows]
    # an interval stored to fewer digits than its score can sit a rounding inside it: no negative bar
    low = [max(0.0, r["score"] - r["low"]) if r.get("low") is not None else 0.0 for r in rows]
    high = [max(0.0, r["high"] - r["score"]) if r.get("high") is not None else 0.0 for r in rows]
    ax.errorbar(x, score, yerr=[low, high], marker="o", capsize=4, color="#1f5fa8", label="RULER needle score, 95% CI")
    # each task alone: a task failed at every length (capability) reads apart from one that falls with length (reach)
    tasks = sorted({t for r in rows for t in (r.get("tasks") or {})})
    for task, (color, marker) in zip(tasks, TASK_STYLES, strict=False):
        points = [(r["length"], r["tasks"][task]["score"]) for r in rows if task in (r.get("tasks") or {})]
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, marker=marker, linestyle=":",
                linewidth=1, markersize=5, label=f"{task} alone")  # fmt: skip
    effective = (cross_check.get("effective_length") or {}).get("ruler") or {}
    threshold = effective.get("threshold", 85.6)
    ax.axhline(threshold, color="#c77c00", linestyle=":", label=f"RULER's bar: {threshold:g}")
    ax.axvline(window, color="#b22222", linewidth=1.5, label=f"claimed window W = {window}")
    if effective.get("length"):
        ax.axvline(effective["length"], color="#2e8b57", linewidth=1.5, linestyle="-.",
                   label=f"RULER's effective length = {int(effective['length'])}")  # fmt: skip
    ax.set_ylim(-3, 103)
    length_label = "length L: tokens of the prompt (log scale)"
    _finish_panel(
        ax,
        sorted({*x, window}),
        length_label,
        "score (0-100): needles recalled",
        "RULER's needle tasks at the same lengths",
    )


@plain_text
def audit_figure(judged: dict, title: str | None = None, cross_check: dict | None = None):
    """The figure (matplotlib ``Figure``) of an audit's verdict record (``audit.verdict.judge``), with RULER's panel
    when ``cross_check`` (the audit's RULER record) holds a length."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("plotting needs matplotlib: pip install 'lm_eval_longctx[plot]'") from err
    rows = judged["per_length"]
    lengths = [r["length"] for r in rows]
    gains = [r["gain"] for r in rows]
    below = [max(0.0, r["gain"] - r["gain_ci"][0]) if r["gain_ci"][0] is not None else 0.0 for r in rows]
    above = [max(0.0, r["gain_ci"][1] - r["gain"]) if r["gain_ci"][1] is not None else 0.0 for r in rows]
    w = judged["window"]
    rules = judged["rules"]
    decided = judged["effective"][rules["decides"]]
    curve = [r for r in rows if "copy_acc" in r]
    ruler = bool(cross_check and cross_check.get("lengths"))
    panels = 1 + bool(curve) + ruler
    fig = Figure(figsize=(0.5 + 5.5 * panels, 5.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    ax = axes[0]
    ax.errorbar(lengths, gains, yerr=[below, above], marker="o", capsize=4, color="#1f5fa8", label="mean gain, 95% CI")
    # every depth must clear the absolute threshold (audit/verdict.py): the weakest depth's gain, where recorded
    weakest = [r.get("weakest_gain") for r in rows]
    if rows and all(g is not None for g in weakest):
        ax.plot(
            lengths,
            weakest,
            marker="v",
            color="#1f5fa8",
            linestyle="--",
            label="weakest depth's gain (every depth must clear the threshold)",
        )
    ax.axhline(0.0, color="#888888", linewidth=0.8)
    ax.axhline(rules["threshold"], color="#c77c00", linestyle=":", label=f"absolute rule: {rules['threshold']:g} nats")
    if gains and gains[0] > 0:
        ax.axhline(
            rules["fraction"] * gains[0],
            color="#7a3fa0",
            linestyle="--",
            label=f"relative rule: {rules['fraction']:g} x gain at {_tokens(lengths[0])}",
        )
    ax.axvline(w, color="#b22222", linewidth=1.5, label=f"claimed window W = {w}")
    if decided["value"] > 0:
        ax.axvline(
            decided["value"],
            color="#2e8b57",
            linewidth=1.5,
            linestyle="-.",
            label=f"effective ({rules['decides']} rule) = {int(decided['value'])}",
        )
    length_label = "length L: tokens the model reads (log scale)"
    _finish_panel(
        ax, sorted({*lengths, w}), length_label, "retrieval gain (nats per answer token)", "Retrieval gain by length"
    )
    if curve:
        ax2 = axes[1]
        x = [r["length"] for r in curve]
        ax2.plot(x, [r["copy_acc"] for r in curve], marker="o", color="#1f5fa8", label="copy accuracy")
        ax2.plot(x, [r["lm_acc"] for r in curve], marker="s", color="#888888", label="LM accuracy (no copy)")
        ax2.axvline(w, color="#b22222", linewidth=1.5, label=f"claimed window W = {w}")
        ax2.set_ylim(-0.02, 1.02)
        length_label = "length L (the copy length l fills it: 2l + 3 <= L; log scale)"
        accuracy_label, panel_title = "greedy accuracy on the copied half", "Forgetting curve at the same lengths"
        _finish_panel(ax2, sorted({*x, w}), length_label, accuracy_label, panel_title)
    if ruler and cross_check is not None:
        _ruler_panel(axes[-1], cross_check, w)
    fig.suptitle(title or f"Audit: {judged['verdict']} (claimed W = {w})", fontsize=11)
    return fig


def draw_audit(judged: dict, out_path, title: str | None = None, cross_check: dict | None = None) -> Path:
    """Write the audit's picture as a PNG, whole or not at all."""
    fig = audit_figure(judged, title, cross_check)
    out_path = Path(out_path)
    with output_dirs.atomic_file(out_path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    return out_path
