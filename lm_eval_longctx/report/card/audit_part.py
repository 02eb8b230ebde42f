"""The report card's audit section: per audited model the window its config claims beside the one it uses (RULER's
claimed / effective layout), the verdict, the gain at each tested length and the audit's picture."""

from __future__ import annotations

import io

from ..audits import AuditSummary
from ..text import esc
from .page import png_img, table


def _number(x) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if isinstance(x, float) and abs(x) < 100 else str(int(x))


def _lengths_table(a: AuditSummary) -> str:
    labels = ("length L", "of W", "mean gain (nats)", "95% CI", "weakest depth's gain", "copy acc", "LM acc")
    head = "".join(f"<th>{h}</th>" for h in labels)
    rows = []
    for r in a.judged.get("per_length", []):
        low, high = (r.get("gain_ci") or [None, None])[:2]
        ci = "n/a" if low is None else f"[{_number(low)}, {_number(high)}]"
        cells = [str(r["length"]), f"{r['length'] / a.claimed:.3g}", _number(r["gain"]), ci]
        weakest = f"{_number(r['weakest_gain'])} (depth {r['weakest_depth']})" if "weakest_gain" in r else "n/a"
        cells += [weakest, _number(r.get("copy_acc")), _number(r.get("lm_acc"))]
        rows.append("<tr>" + "".join(f'<td class="num">{esc(c)}</td>' for c in cells) + "</tr>")
    return table(head, "".join(rows))


def _picture(a: AuditSummary) -> str:
    try:
        from ..pictures.audit import audit_figure
    except ImportError:
        return ""
    try:
        fig = audit_figure(a.judged, title=f"{a.model}: {a.verdict}", cross_check=a.cross_check)
    except ImportError:  # matplotlib is optional: the table says it all
        return ""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return png_img(buf.getvalue(), f"audit of {a.model}: gain by context length against the claimed window", "wide")


def _ruler_table(a: AuditSummary) -> str:
    """RULER's score by length beside the audit, its effective lengths and whether they agree on the claim."""
    if not a.cross_check:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("length", "RULER score", "95% CI", "samples per task", "tokens forwarded",
                                             "tokens generated", "wall s"))  # fmt: skip
    rows = []
    for r in sorted(a.cross_check.get("lengths", []), key=lambda r: r["length"]):
        ci = "n/a" if r.get("low") is None else f"[{r['low']:.1f}, {r['high']:.1f}]"
        cells = [r["length"], f"{r['score']:.1f}", ci, r.get("samples", ""), r.get("tokens_forwarded", ""),
                 r.get("tokens_generated", ""), r.get("wall_seconds", "")]  # fmt: skip
        rows.append("<tr>" + "".join(f'<td class="num">{esc(str(c))}</td>' for c in cells) + "</tr>")
    for x in a.cross_check.get("left_out", []):
        why = "; ".join(f"{t}: {w}" for t, w in (x.get("tasks") or {}).items())
        rows.append(
            f'<tr><td class="num">{esc(str(x.get("length")))}</td><td colspan="6">left out: {esc(why)}</td></tr>'
        )
    parts = ["<h4>RULER beside the audit</h4>", table(head, "".join(rows))]
    if a.agreement:
        lines = []
        for rule, name in (("ruler", "RULER's rule (score above 85.6)"), ("nolima", "NoLiMa's rule (0.85 x shortest)")):
            r = a.agreement.get(rule) or {}
            effective = r.get("effective_length") or "none"
            agree = "agrees" if r.get("agree_on_claim") else "disagrees"
            lines.append(f"{name}: effective {effective}, claim {r.get('claim')}: {agree} with the audit "
                         f"({a.agreement.get('audit', {}).get('claim')})")  # fmt: skip
        parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
    return "".join(parts)


def audit_section(audits: list[AuditSummary]) -> str:
    head = "".join(
        f"<th>{h}</th>" for h in ("model", "claimed", "effective ↑ [95% CI]", "by the other rule", "verdict")
    )
    rows = []
    for a in audits:
        other = "absolute" if a.rule == "relative" else "relative"
        cells = [
            f"<code>{esc(a.model)}</code>",
            f'{a.claimed} <span class="muted">({esc(a.claimed_source)})</span>',
            f"{esc(a.effective_text())} ({esc(a.rule)} rule)",
            f"{a.effective_other} ({esc(other)})",
            esc(a.sentence),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts = [
        '<section class="card" id="audit"><h2>Claimed vs effective context</h2>'
        '<p class="lead">The window each config claims and the longest context length the model uses: the '
        "retrieval-gain map's effective length, with its 95% bootstrap interval over documents "
        "(<code>lm-eval-longctx audit</code>, docs/audit.md).</p>",
        table(head, "".join(rows)),
    ]
    for a in audits:
        parts.append(f"<h3>{esc(a.model)}</h3>")
        parts.append(_lengths_table(a))
        parts.append(_ruler_table(a))
        parts.append(_picture(a))
    parts.append("</section>")
    return "".join(parts)
