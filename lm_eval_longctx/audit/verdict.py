"""An audit's verdict, from the logged samples of its stages: per context length the map's gain at each depth, its
mean and its weakest depth with intervals, the effective length by the relative and by the absolute rule with
bootstrap intervals over documents, the forgetting curve's fine and coarse memory lengths with intervals over sample
indices, and the verdict on the claim.

A length L counts as effective only when the model reaches across it:

* the map, at every depth (``gain_map.effective_length_by_depth``): each depth's gain (mean over documents) is above
  the threshold (``--threshold``), the floor of both rules; the relative rule also asks the mean over depths to keep
  ``--fraction`` of its value at the shortest length (as NoLiMa averages over needle positions). Depth 10 lies about
  0.9 L back: a mean over depths alone lets a near depth carry a length the model does not reach across;
* the forgetting curve, at a length where it was measured: its copy accuracy is above its LM accuracy by the coarse
  rule's margin (``per_token.copy_above_lm``; the curve's ``coarse`` settings). This gate is the curve's point
  estimate on all its samples, the same in every resample of documents; the curve's own uncertainty is the coarse
  memory length's interval over sample indices.

The verdict reads the deciding rule's interval [low, high] of the effective length E (documents resampled) against
the claimed window W:

* ``uses its claimed window``: low >= W (every resample keeps W, or more);
* ``effective below the claim`` ("effective E of claimed W"): high is below a length L <= W that was tested, so the
  claim is refuted whatever longer lengths would show (``contiguous`` rule: a length that fails ends the run of
  passing lengths);
* ``no effective context``: high is 0: no length passes, not even the shortest;
* ``not tested up to W``: the ladder stopped short of W and nothing was refuted;
* ``undecided at W``: W was tested and the interval still holds both W and less (more documents narrow it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..metrics import bootstrap, gain_map, per_token
from ..profiles import VERDICTS
from ..report import run_samples
from ..report.bounds import LOWER_BOUND_LEGEND, LOWER_BOUND_MARK, bound_text, is_lower_bound
from .plan import CURVE_TASK, MAP_TASK

AUDIT_JSON = "audit.json"
AUDIT_MD = "audit.md"
REPORT_HTML = "report.html"
# the audit's record in results it adds to (report card, leaderboard): a JSON file of this kind
KIND = "lm_eval_longctx.audit"
USES, BELOW, NONE, SHORT, UNDECIDED = VERDICTS


class AuditRecordError(ValueError):
    """An audit folder or record that cannot be read or judged."""


def read_audit(path: Path) -> dict:
    """An audit's JSON record, parsed as data; a file that is not one is an error naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise AuditRecordError(f"{path}: not a readable audit record ({err}); run the audit first") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise AuditRecordError(f'{path}: not an audit record (no "kind": "{KIND}")')
    return data


def _spec(task: str, field: str, kind: str) -> run_samples.MetricSpec:
    return run_samples.MetricSpec(field, field, task, field, kind, True, "not stated")


@dataclass
class Measured:
    """What the stages measured, paired across stages: ``gains`` [documents, lengths, depths] (the map's gain of each
    document at each context length and depth, ``depths`` in percent) and ``curve`` [samples, copy lengths, (copy,
    LM)] accuracies, copy length j filling length j."""

    lengths: np.ndarray
    doc_ids: list
    gains: np.ndarray
    copy_lengths: np.ndarray
    sample_ids: list
    curve: np.ndarray
    curve_params: dict  # "fine" and "coarse": each memory length's threshold (margin) and rule, the run's settings
    depths: list[int]


def _stage_units(results_file: Path) -> tuple[run_samples.Units, run_samples.Units, dict]:
    """A stage's map units, forgetting-curve units and the curve's memory-length rules (fine and coarse)."""
    run = run_samples.read_run(results_file)
    fine = run_samples.unit_data(_spec(CURVE_TASK, "fine_memory_length", "fine"), run)
    coarse = run_samples.unit_data(_spec(CURVE_TASK, "fine_memory_length", "coarse"), run)
    return (
        run_samples.unit_data(_spec(MAP_TASK, "effective_length", "effective"), run),
        fine,
        {"fine": dict(fine.params), "coarse": dict(coarse.params)},
    )


def measure(stage_files: list[tuple[Path, int]]) -> Measured:
    """Pair the stages' units (``stage_files``: each stage's results file and its length in tokens read): a document
    is kept when every stage scored it with the same content (its hash), a forgetting-curve sample index when every
    stage has it. The lengths are the stages' (the map's sequences, context with query and answer)."""
    if not stage_files:
        raise AuditRecordError("no stage has run")
    results_files = [Path(f) for f, _ in stage_files]
    maps, curves, params = zip(*(_stage_units(f) for f in results_files))
    for u, f in zip(maps, results_files):
        if len(u.lengths) != 1:
            raise AuditRecordError(f"{f}: a stage holds one context length, this one {list(u.lengths)}")
    lengths = np.asarray([length for _, length in stage_files], dtype=np.int64)
    if len(set(lengths.tolist())) != len(lengths):
        raise AuditRecordError(f"the stages repeat a context length: {sorted(lengths.tolist())}")
    docs = sorted(set.intersection(*(set(u.ids) for u in maps)))
    if not docs:
        raise AuditRecordError("no document was scored by every stage")
    taken = [u.take(docs) for u in maps]
    for u, f in zip(taken, results_files):
        if u.hashes != taken[0].hashes:
            raise AuditRecordError(f"{f}: its documents differ from the first stage's (another corpus?)")
        if u.params["depths"] != taken[0].params["depths"]:
            raise AuditRecordError(f"{f}: its depths {u.params['depths']} differ from the first stage's")
    gains = np.concatenate([u.values for u in taken], axis=1)
    samples = sorted(set.intersection(*(set(u.ids) for u in curves)))
    curve = np.concatenate([u.take(samples).values for u in curves], axis=1) if samples else np.zeros((0, 0, 2))
    copy_lengths = np.concatenate([u.lengths for u in curves]).astype(np.int64)
    order, corder = np.argsort(lengths), np.argsort(copy_lengths)
    return Measured(
        lengths[order],
        docs,
        gains[:, order],
        copy_lengths[corder],
        samples,
        curve[:, corder] if samples else curve,
        dict(params[0]),
        list(taken[0].params["depths"]),
    )


@dataclass(frozen=True)
class RuleSet:
    """The effective-length rules and thresholds (the map's settings), and which rule decides the verdict."""

    fraction: float = 0.5
    threshold: float = 0.5
    rule: str = "contiguous"
    decides: str = "relative"  # or "absolute"

    def metadata(self) -> dict:
        """The map's settings that give its own effective lengths these rules."""
        return {"effective_fraction": self.fraction, "effective_threshold": self.threshold, "effective_rule": self.rule}

    def record(self) -> dict:
        return {**self.metadata(), "decides": self.decides}


def curve_gate(m: Measured) -> np.ndarray:
    """bool [lengths]: whether each length passes the forgetting curve's part of the rule (module docstring): copy
    accuracy above LM accuracy by the coarse margin where the curve was measured; True where it was not."""
    gate = np.ones(len(m.lengths), dtype=bool)
    n = min(len(m.lengths), m.curve.shape[1]) if len(m.sample_ids) else 0
    if n:
        mean = m.curve[:, :n].mean(axis=0)  # [copy lengths, (copy, LM)]
        gate[:n] = per_token.copy_above_lm(mean[:, 0], mean[:, 1], m.curve_params["coarse"]["margin"])
    return gate


def effective_statistic(m: Measured, rules: RuleSet, which: str):
    """The effective length of the documents ``idx`` resample (last axis), as ``bootstrap.interval`` takes it: every
    depth's rule (``gain_map.effective_length_by_depth``) and the forgetting curve's gate (``curve_gate``)."""
    gate = curve_gate(m)
    if which == "relative":
        settings = {"fraction": rules.fraction, "base_minimum": rules.threshold}
    else:
        settings = {"threshold": rules.threshold}

    def statistic(idx: np.ndarray) -> np.ndarray:
        resampled = m.gains[idx]  # [..., documents, lengths, depths]
        flat = resampled.reshape(-1, *resampled.shape[-3:])
        out = [gain_map.effective_length_by_depth(m.lengths, g, rule=rules.rule, gate=gate, **settings) for g in flat]
        return np.asarray(out, dtype=np.float64).reshape(resampled.shape[:-3])

    return statistic


def memory_statistic(m: Measured, kind: str):
    def statistic(idx: np.ndarray) -> np.ndarray:
        curves = m.curve[idx].mean(axis=-3)  # [..., lengths, 2]
        flat = curves.reshape(-1, curves.shape[-2], 2)
        p = m.curve_params[kind]
        if kind == "fine":
            out = [per_token.fine_memory_length(m.copy_lengths, c[:, 0], p["threshold"], p["rule"]) for c in flat]
        else:
            out = [
                per_token.coarse_memory_length(m.copy_lengths, c[:, 0], c[:, 1], p["margin"], p["rule"]) for c in flat
            ]
        return np.asarray(out, dtype=np.float64).reshape(curves.shape[:-2])

    return statistic


def effective_intervals(m: Measured, rules: RuleSet) -> dict:
    return {
        which: bootstrap.interval(effective_statistic(m, rules, which), len(m.doc_ids))
        for which in ("relative", "absolute")
    }


def decide(window: int, tested: list[int], interval: dict) -> tuple[str, str]:
    """The verdict and its sentence from the deciding rule's interval of the effective length (module docstring)."""
    value = int(interval["value"])
    low = interval["low"] if interval["low"] is not None else interval["value"]
    high = interval["high"] if interval["high"] is not None else interval["value"]
    span = f"[{int(low)}, {int(high)}]"
    refuting = [x for x in tested if x <= window and high < x]
    if high <= 0:
        return NONE, (
            f"no effective context at any tested length (effective length 0, interval {span}): the gain at the "
            f"shortest length, {min(tested)} tokens, does not clear the rule"
        )
    if low >= window:
        shown = bound_text(str(value), is_lower_bound(value, tested))
        return USES, f"uses its claimed window: effective length {shown} {span} of claimed {window}"
    if refuting:
        return BELOW, (
            f"effective {value} of claimed {window}: the interval {span} ends below {min(refuting)}, a tested length "
            "within the claim"
        )
    if max(tested) < window:
        return SHORT, (
            f"not tested up to W: the longest tested length is {max(tested)} of claimed {window} and nothing "
            f"below it refutes the claim (effective length {value} {span})"
        )
    return UNDECIDED, (
        f"undecided at W: effective length {value}, interval {span} holds both {window} and less; more documents "
        "(--docs) narrow it"
    )


def refuted(window: int, tested: list[int], interval: dict, rule: str) -> bool:
    """Whether no longer length can change the verdict: under the contiguous rule a length that fails in every
    resample ends the run of passing lengths (and a verdict of no effective context stays)."""
    verdict, _ = decide(window, tested, interval)
    return rule == "contiguous" and verdict in (BELOW, NONE)


def per_length(m: Measured) -> list[dict]:
    """Each context length's mean gain over documents and depths with its interval, the gain of each depth and of the
    weakest one (with its interval: what the rules' floor reads), and the copy and LM accuracy at the copy length
    whose samples fill it, with whether the curve lets the length pass (``curve_gate``)."""
    rows = []
    gate = curve_gate(m)
    for j, length in enumerate(m.lengths.tolist()):

        def mean_gain(i, j=j):
            return m.gains[i, j].mean(axis=(-2, -1))

        def weakest_gain(i, j=j):
            return gain_map.weakest_depth_gain(m.gains[i][..., j : j + 1, :])[..., 0]

        ci = bootstrap.interval(mean_gain, len(m.doc_ids))
        weakest = bootstrap.interval(weakest_gain, len(m.doc_ids))
        by_depth = m.gains[:, j].mean(axis=0)
        row = {
            "length": length,
            "gain": ci["value"],
            "gain_ci": [ci["low"], ci["high"]],
            "gain_by_depth": {int(d): float(g) for d, g in zip(m.depths, by_depth)},
            "weakest_depth": int(m.depths[int(np.argmin(by_depth))]),
            "weakest_gain": weakest["value"],
            "weakest_gain_ci": [weakest["low"], weakest["high"]],
        }
        if len(m.sample_ids) and j < len(m.copy_lengths):
            row.update(
                copy_length=int(m.copy_lengths[j]),
                copy_acc=float(m.curve[:, j, 0].mean()),
                lm_acc=float(m.curve[:, j, 1].mean()),
                copy_above_lm=bool(gate[j]),
            )
        rows.append(row)
    return rows


def judge(m: Measured, window: int, rules: RuleSet) -> dict:
    """The verdict record: per length, both effective lengths with intervals, the memory lengths, the verdict."""
    effective = effective_intervals(m, rules)
    tested = m.lengths.tolist()
    verdict, sentence = decide(window, tested, effective[rules.decides])
    memory = {}
    if len(m.sample_ids):
        memory = {kind: bootstrap.interval(memory_statistic(m, kind), len(m.sample_ids)) for kind in ("fine", "coarse")}
    return {
        "window": window,
        "verdict": verdict,
        "sentence": sentence,
        "effective_length": effective[rules.decides]["value"],
        "effective": effective,
        "memory": memory,
        "per_length": per_length(m),
        "tested_lengths": tested,
        "documents": len(m.doc_ids),
        "curve_samples": len(m.sample_ids),
        "rules": {
            "fraction": rules.fraction,
            "threshold": rules.threshold,
            "rule": rules.rule,
            "decides": rules.decides,
        },
    }


# ------------------------------------------------------------------ the table


def _num(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and x == int(x) and abs(x) >= 100:
        return str(int(x))
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _ci(ci) -> str:
    if ci is None or ci[0] is None:
        return "n/a"
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _by_depth(row: dict) -> str:
    return " / ".join(f"{_num(g, 2)}" for g in row.get("gain_by_depth", {}).values())


def length_table(judged: dict) -> str:
    """Per length: the mean gain with its interval, the weakest depth's gain (what the rules' floor reads) with its
    interval, each depth's gain, and the forgetting curve at the copy length that fills the length."""
    rows = judged["per_length"]
    depths = "/".join(str(d) for d in rows[0].get("gain_by_depth", {})) if rows else ""
    lines = [
        "| length L (tokens read) | fraction of W | mean gain (nats) | 95% CI | weakest depth's gain | 95% CI | "
        f"gain at depths {depths} | copy length | copy acc | LM acc |",
        "|---:|---:|---:|---|---:|---|---|---:|---:|---:|",
    ]
    w = judged["window"]
    for row in rows:
        weakest = f"{_num(row.get('weakest_gain'))} (depth {row['weakest_depth']})" if "weakest_depth" in row else ""
        cells = [
            str(row["length"]),
            f"{row['length'] / w:.3g}",
            _num(row["gain"]),
            _ci(row["gain_ci"]),
            weakest,
            _ci(row.get("weakest_gain_ci")),
            _by_depth(row),
            str(row.get("copy_length", "")),
            _num(row.get("copy_acc")),
            _num(row.get("lm_acc")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(judged: dict) -> str:
    """The audit's headline table; a length that reaches the longest length tested is shown as a bound (``≥``)."""
    r = judged["rules"]
    e = judged["effective"]
    tested = judged.get("tested_lengths") or []
    copy_lengths = [row["copy_length"] for row in judged.get("per_length", []) if row.get("copy_length")]

    def shown(value, lengths) -> str:
        return bound_text(_num(value), isinstance(value, (int, float)) and is_lower_bound(value, lengths))

    lines = [
        "| | value | 95% CI |",
        "|---|---:|---|",
        f"| claimed window W | {judged['window']} | |",
        f"| effective length, relative rule (mean gain > {r['fraction']:g} x the shortest length's; every depth's > "
        f"{r['threshold']:g} nats; copy above LM accuracy) | {shown(e['relative']['value'], tested)} | "
        f"{_ci([e['relative']['low'], e['relative']['high']])} |",
        f"| effective length, absolute rule (every depth's gain > {r['threshold']:g} nats; copy above LM accuracy) | "
        f"{shown(e['absolute']['value'], tested)} | {_ci([e['absolute']['low'], e['absolute']['high']])} |",
    ]
    for kind, label in (("fine", "fine memory length (copy acc > 0.99)"), ("coarse", "coarse memory length")):
        if kind in judged["memory"]:
            m = judged["memory"][kind]
            lines.append(
                f"| forgetting curve: {label} | {shown(m['value'], copy_lengths)} | {_ci([m['low'], m['high']])} |"
            )
    if any(LOWER_BOUND_MARK in line for line in lines):
        lines += ["", LOWER_BOUND_LEGEND]
    return "\n".join(lines)
