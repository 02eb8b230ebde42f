"""The RULER cross-check beside the audit: lm-eval's own RULER needle tasks run at the audit's lengths, scored by
RULER's own ``process_results``, with RULER's and NoLiMa's effective lengths.

The three RULER tasks that download nothing (``niah_single_1``, a repeated-sentence haystack; ``niah_multikey_2``
and ``niah_multikey_3``, haystacks of distractor needles) run through ``lm_eval`` as a user runs them: one run per
length L (``--metadata '{"max_seq_lengths": [L]}'``, so each length has its own command, files and wall time),
``--limit`` samples of each task, ``max_length=L`` so that lm-eval never cuts a prompt, and ``--log_samples``.

Lengths below 4,096, which RULER's YAMLs name no metric for, are scored from the samples: RULER's
``process_results`` logs each sample's score under the key of its length (``"1024": 1.0``), and the score at L is
their mean x 100, every task weighted equally, as RULER reports it (lm-eval's results file holds the same mean per
task, under ``"1024,none"``, by its mean fallback). The interval resamples the sample indices, each carrying one
sample of every task.

A length where a task cannot make its samples (RULER sizes a prompt to L minus 128 answer tokens: the template and
a needle must fit; a tokenizer RULER cannot use) is left out, every task's reason named. It is asked of RULER's own
builder before the run loads the model (``harness.lm_eval_tasks``); a task that built at a shorter length is not
asked again, as a longer length leaves it more room, and a run that fails is asked again in full.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import errors
from ..metrics import bootstrap
from .stage_files import record_files
from .stages import command_text, lm_eval_argv

TASKS = ("niah_single_1", "niah_multikey_2", "niah_multikey_3")
TASK_FOLDER = "ruler"
# RULER's answers are short (a 7-digit number, a 36-character UUID): generation stops at this many tokens instead
# of RULER's 128, which the prompts still leave room for
ANSWER_TOKENS = 48
# RULER: a length is effective when the score exceeds Llama-2-7B's at 4K
RULER_THRESHOLD = 85.6
# NoLiMa: when the score keeps this fraction of the model's own score at the shortest length
NOLIMA_FRACTION = 0.85
PACKAGES = ("wonderwords", "nltk")
# RULER's data builder refuses an older nltk
NLTK_AT_LEAST = "3.9.1"
INSTALL = "pip install 'lm_eval_longctx[ruler]'"


class RulerError(ValueError):
    """The cross-check cannot run (a package missing) or its runs cannot be read."""


def check_packages() -> None:
    """Refuse, naming them, the packages RULER's needle tasks need and this Python lacks."""
    from importlib import metadata

    from packaging.version import Version

    missing = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise RulerError(f"the RULER cross-check needs {' and '.join(missing)}: {INSTALL}")
    nltk_version = metadata.version("nltk")
    if Version(nltk_version) < Version(NLTK_AT_LEAST):
        raise RulerError(f"the RULER cross-check needs nltk >= {NLTK_AT_LEAST} (this is {nltk_version}): {INSTALL}")


def effective_lengths(
    scores: dict[int, float], threshold: float = RULER_THRESHOLD, fraction: float = NOLIMA_FRACTION
) -> dict:
    """The effective length by RULER's rule (the score above ``threshold``) and by NoLiMa's (at least ``fraction``
    of the score at the shortest length): the longest length that passes with every shorter one, None when the
    shortest fails. NoLiMa's rule has no base when the shortest length scores 0.

    Args:
        scores: length -> score (0-100).
        threshold: RULER's absolute threshold.
        fraction: NoLiMa's fraction of the base score.

    Returns:
        ``{"ruler": {"length", "threshold", "needed"}, "nolima": {"length", "threshold", "base_length",
        "base_score", "needed"}}``; ``needed``: the lengths that decide the rule, every one up to the first that
        fails (all when none fails).

    Example:
        >>> from lm_eval_longctx.audit.ruler import effective_lengths
        >>> rules = effective_lengths({1024: 95.0, 2048: 90.0, 4096: 84.0, 8192: 88.0})
        >>> rules["ruler"]["length"], rules["ruler"]["needed"]
        (2048, [1024, 2048, 4096])
        >>> rules["nolima"]["length"], rules["nolima"]["threshold"]
        (8192, 80.75)
    """
    lengths = sorted(scores)

    def longest_passing(passes: Callable[[float], bool]) -> tuple[int | None, list[int]]:
        found = None
        for i, length in enumerate(lengths):
            if not passes(scores[length]):
                return found, lengths[: i + 1]
            found = length
        return found, lengths

    ruler_length, ruler_needed = longest_passing(lambda s: s > threshold)
    ruler = {"length": ruler_length, "threshold": threshold, "needed": ruler_needed}
    base = scores[lengths[0]] if lengths else None
    nolima: dict = {"length": None, "threshold": None, "base_length": lengths[0] if lengths else None,
                    "base_score": base, "needed": lengths[:1]}  # fmt: skip
    if base:
        cut = round(fraction * base, 6)
        nolima["length"], nolima["needed"] = longest_passing(lambda s: s >= cut)
        nolima["threshold"] = cut
    return {"ruler": ruler, "nolima": nolima}


def claim_answer(window: int, tested: list[int], effective: int | None) -> str:
    """What an effective length says of a claimed window ``window``, given the lengths tested: ``used`` (it reaches
    W), ``refuted`` (a tested length within W is beyond it), else ``undecided`` (W was not tested).

    Example:
        >>> from lm_eval_longctx.audit.ruler import claim_answer
        >>> claim_answer(8192, [1024, 2048, 4096, 8192], 8192), claim_answer(8192, [1024, 2048, 4096], 1024)
        ('used', 'refuted')
        >>> claim_answer(8192, [1024, 2048], 2048)
        'undecided'
    """
    reach = effective or 0
    if reach >= window:
        return "used"
    if any(reach < length <= window for length in tested):
        return "refuted"
    return "undecided"


def agreement(window: int, audit_tested: list[int], audit_effective: int, record: dict) -> dict:
    """The audit beside RULER on one checkpoint: each one's answer on the claim (``claim_answer``) and effective
    length, by RULER's rule and by NoLiMa's, whether they agree on the claim and lie within one rung of the ladder
    (the lengths both tested; no effective length counts as the rung below the shortest)."""
    ruler_tested = sorted(r["length"] for r in record["lengths"])
    ladder = sorted(set(audit_tested) | set(ruler_tested))
    audit_claim = claim_answer(window, audit_tested, audit_effective)

    def rung(length) -> int:
        return ladder.index(length) if length in ladder else -1

    out: dict = {"window": window, "audit": {"effective_length": audit_effective, "claim": audit_claim}}
    for rule in ("ruler", "nolima"):
        effective = record["effective_length"][rule]["length"]
        claim = claim_answer(window, ruler_tested, effective)
        out[rule] = {
            "effective_length": effective,
            "claim": claim,
            "agree_on_claim": claim == audit_claim,
            "within_one_rung": abs(rung(effective or 0) - rung(audit_effective or 0)) <= 1,
        }
    # each task alone by RULER's rule: a task a model fails at every length says nothing of its reach
    by_task: dict = {}
    for row in record["lengths"]:
        for task, found in (row.get("tasks") or {}).items():
            by_task.setdefault(task, {})[row["length"]] = found["score"]
    out["by_task"] = {}
    for task, scores in sorted(by_task.items()):
        effective = effective_lengths(scores)["ruler"]["length"]
        claim = claim_answer(window, sorted(scores), effective)
        out["by_task"][task] = {"effective_length": effective, "claim": claim, "agree_on_claim": claim == audit_claim}
    return out


def agreement_text(found: dict) -> str:
    a = found["audit"]
    lines = [f"the audit: effective {a['effective_length'] or 0} of claimed {found['window']}: claim {a['claim']}"]
    for rule, name in (("ruler", "RULER's rule (score > 85.6)"), ("nolima", "NoLiMa's rule (>= 0.85 x the shortest)")):
        r = found[rule]
        lines.append(
            f"RULER by {name}: effective {_length(r['effective_length'])}: claim {r['claim']}; "
            f"{'agrees' if r['agree_on_claim'] else 'DISAGREES'} with the audit on the claim, "
            f"{'within' if r['within_one_rung'] else 'more than'} one rung of its effective length"
        )
    for task, r in (found.get("by_task") or {}).items():
        lines.append(
            f"  {task} alone by RULER's rule: effective {_length(r['effective_length'])}: claim {r['claim']} "
            f"({'agrees' if r['agree_on_claim'] else 'disagrees'})"
        )
    return "\n".join(lines)


def run_argv(
    model_dir: Path, extra: dict, length: int, samples: int, device: str, batch_size, out: Path,
    answer_tokens: int = ANSWER_TOKENS,
) -> list:  # fmt: skip
    """The ``lm_eval`` arguments of the run at ``length``."""
    # lm-eval cuts a prompt longer than max_length from the left; RULER's prompt of ``length`` tokens is read whole
    model_args = {**extra, "max_length": length}
    more = ("--limit", str(samples), "--gen_kwargs", f"max_gen_toks={answer_tokens}")
    return lm_eval_argv(TASKS, model_dir, model_args, {"max_seq_lengths": [length]}, out, device, batch_size, *more)


def cannot_build(model_dir: Path, extra: dict, length: int, tasks) -> dict[str, str]:
    """``{task: why}`` for each of ``tasks`` that RULER's builder cannot make samples of at ``length``."""
    from ..harness.lm_eval_tasks import document_count

    metadata = {"pretrained": str(model_dir), **extra, "max_seq_lengths": [length]}
    found = {}
    for task in tasks:
        try:
            if document_count(TASK_FOLDER, task, metadata) == 0:
                found[task] = "RULER made no samples"
        except Exception as err:  # noqa: BLE001  (RULER's builders raise ValueError, AssertionError, OSError...)
            found[task] = errors.first_line(err)
    return found


def _tokenizer(model_dir: Path, extra: dict):
    from transformers import AutoTokenizer

    trust = str(extra.get("trust_remote_code", "false")).lower() in ("1", "true", "yes")
    return AutoTokenizer.from_pretrained(extra.get("tokenizer", str(model_dir)), trust_remote_code=trust)


def read_run(results_file: Path, length: int, tokenizer, answer_tokens: int = ANSWER_TOKENS) -> dict:
    """The per-length record of one run: RULER's per-sample scores (the key ``str(length)`` of each logged sample)
    and the tokens read and written, from the samples files beside ``results_file``. A prompt's tokens are counted
    as lm-eval's hf backend encodes it by default; an answer's by encoding its text again, at most
    ``answer_tokens`` (text that is not whole characters encodes to more tokens than were generated). The score and
    its interval count the first n samples of every task, n the fewest a task made (RULER skips a sample that does
    not fit)."""
    stamp = results_file.stem[len("results_") :]
    results = json.loads(results_file.read_text(encoding="utf-8"))["results"]
    per_task, columns = {}, []
    forwarded = generated = 0
    for task in TASKS:
        path = results_file.parent / f"samples_{task}_{stamp}.jsonl"
        try:
            lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        except (OSError, json.JSONDecodeError) as err:
            raise RulerError(f"{path}: the run's samples cannot be read ({errors.first_line(err)})") from None
        lines.sort(key=lambda x: x["doc_id"])
        key = str(length)
        if not lines or any(not isinstance(x.get("doc"), dict) or x["doc"].get("max_length") != length or key not in x
                            for x in lines):  # fmt: skip
            raise RulerError(f"{path}: not RULER's samples of length {length}; run the cross-check again")
        column = [float(x[key]) for x in lines]
        for x in lines:
            forwarded += len(tokenizer(x["arguments"]["gen_args_0"]["arg_0"]).input_ids)
            generated += min(len(tokenizer(x["resps"][0][0], add_special_tokens=False).input_ids), answer_tokens)
        harness = results.get(task, {}).get(f"{key},none")
        per_task[task] = {
            "score": round(100 * float(np.mean(column)), 4),
            "lm_eval_score": round(100 * harness, 4) if isinstance(harness, (int, float)) else None,
            "samples": len(column),
        }
        columns.append(column)
    n = min(len(c) for c in columns)
    matrix = np.array([c[:n] for c in columns]).T  # [sample index, task]
    ci = bootstrap.interval(lambda i: 100 * matrix[i].mean(axis=(-2, -1)), n)
    return {
        "length": length,
        "score": round(ci["value"], 4),
        "low": None if ci["low"] is None else round(ci["low"], 4),
        "high": None if ci["high"] is None else round(ci["high"], 4),
        "level": ci["level"],
        "samples": n,
        "tasks": per_task,
        "tokens_forwarded": forwarded,
        "tokens_generated": generated,
    }


def _cost(lengths: list[int], by_length: dict[int, dict]) -> dict:
    rows = [by_length[x] for x in lengths]
    return {
        "tokens_forwarded": sum(r["tokens_forwarded"] for r in rows),
        "tokens_generated": sum(r["tokens_generated"] for r in rows),
        "wall_seconds": round(sum(r["wall_seconds"] for r in rows), 1),
    }


def cross_check(
    model_dir,
    extra: dict,
    lengths,
    samples: int,
    device: str,
    batch_size,
    out_folder,
    runner: Callable[[list[str]], Path] | None = None,
    say: Callable[[str], None] = print,
    answer_tokens: int = ANSWER_TOKENS,
) -> dict:
    """Run RULER's needle tasks at ``lengths`` on the checkpoint ``model_dir`` (``extra``: more model arguments),
    ``samples`` of each task per length, each length's run in its own folder under ``out_folder``, answers cut at
    ``answer_tokens``; ``runner(argv) -> results file`` runs lm_eval (default: lm-eval's own command line, in this
    process). Returns the record: a row per length, the lengths left out and why, the two effective lengths and what
    deciding each cost."""
    check_packages()
    if runner is None:
        from ..harness.evaluation import run_cli

        runner = run_cli
    started = time.perf_counter()
    model_dir, out_folder = Path(model_dir), Path(out_folder)
    tokenizer = _tokenizer(model_dir, extra)
    wanted = sorted({int(x) for x in lengths})
    say(
        f"RULER cross-check: {', '.join(TASKS)} at {', '.join(map(str, wanted))} tokens, {samples} samples of each "
        f"task per length, answers cut at {answer_tokens} tokens"
    )
    rows, left_out = [], []
    built: set[str] = set()
    for length in wanted:
        unbuilt = cannot_build(model_dir, extra, length, [t for t in TASKS if t not in built])
        built |= set(TASKS) - set(unbuilt)
        folder = out_folder / f"L{length:07d}"
        argv = run_argv(model_dir, extra, length, samples, device, batch_size, folder, answer_tokens)
        results, wall = None, 0.0
        if not unbuilt:
            say(command_text(argv))
            t0 = time.perf_counter()
            try:
                results = Path(runner(argv))
            except Exception:
                # a failed run is left out only when RULER's builder fails at this length
                unbuilt = cannot_build(model_dir, extra, length, TASKS)
                if not unbuilt:
                    raise
            wall = time.perf_counter() - t0
        if results is None:
            left_out.append({"length": length, "tasks": unbuilt})
            say(f"{length}: left out: " + "; ".join(f"{t}: {why}" for t, why in unbuilt.items()))
            continue
        row = read_run(results, length, tokenizer, answer_tokens)
        row["wall_seconds"] = round(wall, 1)
        row["command"] = command_text(argv)
        row["results_file"] = results.resolve().relative_to(out_folder.resolve()).as_posix()
        row["files"] = record_files(out_folder, results)
        rows.append(row)
        say(f"{length}: RULER score {row['score']:.1f} [{_bound(row['low'])}, {_bound(row['high'])}] ({wall:.0f} s)")
    by_length = {r["length"]: r for r in rows}
    rules = effective_lengths({r["length"]: r["score"] for r in rows})
    for rule in rules.values():
        rule.update(_cost(rule["needed"], by_length))
    from importlib import metadata

    return {
        "benchmark": "RULER",
        "tasks": list(TASKS),
        "lm_eval": metadata.version("lm_eval"),
        "model": str(model_dir),
        "model_args": dict(extra),
        "samples_per_length": samples,
        "max_gen_toks": answer_tokens,
        "lengths": rows,
        "left_out": left_out,
        "effective_length": rules,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def _bound(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _length(value) -> str:
    return "none" if value is None else str(value)


def table(record: dict) -> str:
    """The cross-check as Markdown: a row per length (the lengths left out with their reasons), then the two
    effective lengths and what deciding each cost."""
    lines = [
        "| length | RULER score | 95% interval | samples per task | tokens forwarded | tokens generated | wall s |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    rows = [(r["length"], r) for r in record["lengths"]] + [(x["length"], x) for x in record["left_out"]]
    for length, r in sorted(rows, key=lambda x: x[0]):
        if "tasks" in r and "score" not in r:
            why = "; ".join(f"{t}: {w}" for t, w in r["tasks"].items()).replace("|", "/")
            lines.append(f"| {length} | left out: {why} | | | | | |")
            continue
        lines.append(
            f"| {length} | {r['score']:.1f} | {_bound(r['low'])} - {_bound(r['high'])} | {r['samples']} | "
            f"{r['tokens_forwarded']} | {r['tokens_generated']} | {r['wall_seconds']:.1f} |"
        )
    ruler, nolima = record["effective_length"]["ruler"], record["effective_length"]["nolima"]
    lines += [
        "",
        f"RULER's effective length (score above {ruler['threshold']} there and at every shorter length): "
        f"{_length(ruler['length'])}, deciding it cost {ruler['tokens_forwarded']} tokens forwarded, "
        f"{ruler['tokens_generated']} generated, {ruler['wall_seconds']} s.",
    ]
    if nolima["threshold"] is None:
        lines.append("NoLiMa's effective length: none (no base: the shortest length scores 0 or was not run).")
    else:
        lines.append(
            f"NoLiMa's effective length (score at least {NOLIMA_FRACTION} x {nolima['base_score']:.1f}, the score at "
            f"{nolima['base_length']}, = {nolima['threshold']:.1f}): {_length(nolima['length'])}, deciding it cost "
            f"{nolima['tokens_forwarded']} tokens forwarded, {nolima['tokens_generated']} generated, "
            f"{nolima['wall_seconds']} s."
        )
    return "\n".join(lines) + "\n"
