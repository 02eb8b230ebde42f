"""``lm-eval-longctx audit OUT --model DIR``: does the checkpoint use the context window its config claims?

Before any stage runs it prints the claimed window (the field it was taken from and what the others say), the ladder
of context lengths relative to it, the lengths left out and why, the tokens each stage forwards and an estimate of
its time from a short probe on this machine. Each stage then runs through ``lm_eval`` (its progress bars shown),
shortest first, until the claim is refuted or the ladder ends. The verdict is printed as a table and written as
``audit.json``, ``audit.md``, a picture and the report card. docs/audit.md says what it measures and what not.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import sys
import time
from pathlib import Path

from .. import output_dirs, profiles
from ..data import embedded_corpus
from ..engine.window import ClaimedWindow, WindowError, claimed_window
from . import plan as planning
from . import stages, verdict

log = logging.getLogger("lm_eval_longctx")

CORPUS_FILE = "corpus.jsonl"
PICTURE = "audit.png"
DOCUMENT_SOURCES = ("embedded", "govreport")


class AuditError(ValueError):
    """An audit that cannot run: the message names the flag or file and the way out."""


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parse_model_args(text: str | None) -> dict:
    """``--model-args k=v,k=v`` as lm-eval's --model_args takes them (``pretrained`` comes from --model)."""
    out: dict = {}
    for item in filter(None, (text or "").split(",")):
        if "=" not in item:
            raise AuditError(f"--model-args {text!r}: {item!r} is not key=value")
        key, value = item.split("=", 1)
        if key.strip() == "pretrained":
            raise AuditError("--model-args: give the model with --model, not pretrained=")
        out[key.strip()] = value.strip()
    return out


# ------------------------------------------------------------------ documents


def load_documents(source: str, docs: int) -> tuple[list[str], dict]:
    """The documents the audit reads and their provenance: the embedded corpus cut into ``docs`` documents of about
    equal length (the same texts whatever the model's window, so two audits share stages), GovReport from the hub
    (``govreport``, the tasks' own selection), or a local file's ``text`` rows."""
    from ..data import documents

    if source == "embedded":
        stream = embedded_corpus.topics_stream()
        texts = embedded_corpus.embedded_documents(int(len(stream) / docs * 0.97), docs)
        return texts, {"source": "embedded", **embedded_corpus.provenance(texts)}
    if source == "govreport":
        loaded = documents.load_govreport()
    else:
        path = Path(source)
        if not path.is_file():
            raise AuditError(
                f"--documents {source}: no such file; give a JSONL/JSON/Parquet file of rows with a 'text' field, "
                f"or one of {list(DOCUMENT_SOURCES)}"
            )
        loaded = documents.load_govreport(data_files=str(path), num_docs=10**6, min_tokens=1, max_tokens=10**9)
    if len(loaded.texts) < docs:
        raise AuditError(f"--documents {source}: {len(loaded.texts)} documents, fewer than the {docs} asked (--docs)")
    return list(loaded.texts), dict(loaded.provenance)


def choose_documents(texts: list[str], tokenizer, docs: int) -> tuple[list[str], list[int]]:
    """The ``docs`` longest documents in the model's tokens (ties in file order), in file order, and their tokens."""
    counts = [len(tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"]) for t in texts]
    chosen = sorted(sorted(range(len(texts)), key=lambda i: (-counts[i], i))[:docs])
    return [texts[i] for i in chosen], [counts[i] for i in chosen]


# ------------------------------------------------------------------ the model


def load_config_and_tokenizer(model: str, extra: dict):
    from transformers import AutoConfig, AutoTokenizer

    trust = str(extra.get("trust_remote_code", "false")).lower() in ("1", "true", "yes")
    revision = extra.get("revision")
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(extra.get("tokenizer", model), trust_remote_code=trust)
    except (OSError, ValueError) as err:
        raise AuditError(f"--model {model}: cannot load its config and tokenizer ({err})") from None
    return config, tokenizer


def load_model(model: str, extra: dict, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = extra.get("dtype", "auto")
    kwargs = {
        "dtype": dtype if dtype == "auto" else getattr(torch, str(dtype).replace("torch.", "")),
        "trust_remote_code": str(extra.get("trust_remote_code", "false")).lower() in ("1", "true", "yes"),
    }
    if extra.get("revision"):
        kwargs["revision"] = extra["revision"]
    return AutoModelForCausalLM.from_pretrained(model, **kwargs).to(device).eval()


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def model_max_length(config, extra: dict) -> int | None:
    """The maximum length lm-eval's HFLM gives the model: --model-args max_length, else the config's positions."""
    if extra.get("max_length"):
        return int(extra["max_length"])
    cfg = getattr(config, "text_config", None) or config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


# ------------------------------------------------------------------ printing


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def plan_text(plan: planning.Plan, estimates: list[float], tokens: list[int], time_model, device: str) -> str:
    w = plan.window
    lines = [f"claimed window W = {w.tokens} tokens, from {w.source}"]
    lines += [f"  {name}: {value}" for name, value in w.fields.items() if name != w.source]
    lines += [f"  note: {n}" for n in w.notes]
    lines.append(
        f"budget {plan.budget.name}: {plan.docs} documents ({min(plan.doc_tokens)}-{max(plan.doc_tokens)} tokens), "
        f"map depths {list(plan.budget.depths)} x {plan.budget.anchors_per_cell} anchor(s), forgetting curve "
        f"{plan.budget.samples_per_length} samples per length"
    )
    lines.append("| stage | length L | of W | map context | copy length | tokens forwarded | estimated time |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|")
    for i, (rung, n, s) in enumerate(zip(plan.rungs, tokens, estimates), start=1):
        beyond = " (beyond the model's max_length: allowed)" if rung.beyond_max_length else ""
        lines.append(
            f"| {i} | {rung.length}{beyond} | {rung.fraction:.3g} | {rung.context_length} | {rung.copy_length} | "
            f"{n:,} | {_duration(s)} |"
        )
    lines.append(f"| all | | | | | {sum(tokens):,} | {_duration(sum(estimates))} |")
    for x in plan.left_out:
        lines.append(f"left out: {x['length']}: {x['why']}")
    probe = ", ".join(f"{n} tokens {s:.3g} s" for n, s in time_model.measured)
    lines.append(
        f"estimates from a probe of the engine's long pass on {device} ({probe}), t(n) = a n + b n^2; stages stop "
        "early once the claim is refuted"
    )
    return "\n".join(lines)


def verdict_text(judged: dict, plan_record: dict, model: str) -> str:
    lines = [
        f"audit of {model}",
        verdict.summary_table(judged),
        "",
        verdict.length_table(judged),
        "",
    ]
    for x in plan_record.get("left_out", []):
        lines.append(f"left out: {x['length']}: {x['why']}")
    for x in plan_record.get("not_run", []):
        lines.append(f"not run: {x['length']}: {x['why']}")
    lines.append(f"verdict: {judged['sentence']}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the audit


def expectations(profile: profiles.Profile | None, judged: dict) -> list[dict]:
    """The profile's expectations, each with what was found and whether it holds."""
    if profile is None:
        return []
    out = []
    if "verdict" in profile.expect:
        out.append(
            {
                "expectation": f"verdict: {profile.expect['verdict']}",
                "found": judged["verdict"],
                "holds": judged["verdict"] == profile.expect["verdict"],
            }
        )
    if "effective_length" in profile.expect:
        found = int(judged["effective_length"])
        out.append(
            {
                "expectation": f"effective length {profile.expect['effective_length']}",
                "found": found,
                "holds": found == profile.expect["effective_length"],
            }
        )
    return out


def say(text: str) -> None:
    """A line of the audit's own output, flushed at once: the plan must be seen before the stages run, also when
    the output goes to a file or a CI log."""
    print(text, flush=True)


def run_audit(args, out_print=say, runner=None) -> dict:
    """Plan, run and judge an audit (``args``: the command line's); ``runner(argv) -> results file`` runs one stage's
    ``lm_eval`` arguments (default: lm-eval's own command line, in this process)."""
    if runner is None:
        from ..demo.run import run_harness

        runner = run_harness
    extra = parse_model_args(args.model_args)
    profile = profiles.load(args.profile) if args.profile else None
    model = str(Path(args.model).resolve()) if Path(args.model).is_dir() else args.model
    if any(c in model for c in ",="):
        raise AuditError(f"--model {model}: a path with ',' or '=' cannot travel in lm-eval's --model_args")
    budget = planning.budget_named(args.budget)
    if args.docs is not None:
        if args.docs < 2:
            raise AuditError("--docs must be at least 2: the intervals resample documents")
        budget = planning.Budget(**{**budget.record(), "docs": args.docs, "fractions": budget.fractions,
                                    "beyond": budget.beyond, "depths": budget.depths})  # fmt: skip
    rules = verdict.RuleSet(args.fraction, args.threshold, args.rule, args.decides)
    device = args.device or default_device()
    config, tokenizer = load_config_and_tokenizer(model, extra)
    window = _window(config, args.window, profile)
    out = output_dirs.claim(Path(args.out).resolve(), "the audit")
    texts, provenance = load_documents(args.documents, budget.docs)
    texts, doc_tokens = choose_documents(texts, tokenizer, budget.docs)
    corpus = out / CORPUS_FILE
    corpus_record = embedded_corpus.write_corpus(corpus, texts)
    stream_tokens = sum(doc_tokens)
    t0 = time.perf_counter()
    loaded = load_model(model, extra, device)
    load_seconds = time.perf_counter() - t0
    from ..engine import scoring
    from ..tasks.base import lead_token_ids

    plan = planning.plan_audit(
        window,
        budget,
        doc_tokens,
        stream_tokens,
        model_max_length(config, extra),
        scoring.learned_position_table(loaded),
        beyond=args.beyond,
        lead_tokens=len(lead_token_ids(tokenizer, "auto")),
    )
    plan.shares_prefix = scoring.shares_prefix_cache(loaded)
    time_model = planning.probe(loaded, window.tokens)
    del loaded
    tokens = [planning.stage_tokens(r, plan) for r in plan.rungs]
    # every stage is an lm_eval call that loads the model again
    estimates = [planning.stage_seconds(r, plan, time_model) + load_seconds for r in plan.rungs]
    out_print(plan_text(plan, estimates, tokens, time_model, device))
    out_print(f"each stage also loads the model ({load_seconds:.1f} s here) and lm-eval's task index")
    earlier = stages.earlier_stages(Path(args.reuse)) if args.reuse else {}
    fingerprint = stages.model_fingerprint(Path(model)) if Path(model).is_dir() else {"hub": model, **extra}
    record = {
        "kind": verdict.KIND,
        "model": model,
        "model_args": extra,
        "device": device,
        "profile": profile.name if profile else None,
        "plan": plan.record(),
        "documents": {"file": CORPUS_FILE, **{k: v for k, v in corpus_record.items() if k != "path"}, **provenance},
        "time_model": time_model.record(),
        "rules": rules.record(),
        "stages": [],
    }
    done: list[stages.Stage] = []
    not_run = []
    for i, (rung, n, estimate) in enumerate(zip(plan.rungs, tokens, estimates), start=1):
        if done and not args.all_lengths:
            measured = verdict.measure([(out / s.results_file, s.rung.length) for s in done])
            so_far = verdict.judge(measured, window.tokens, rules)
            interval = so_far["effective"][rules.decides]
            if verdict.refuted(window.tokens, so_far["tested_lengths"], interval, rules.rule):
                not_run = [
                    {"length": r.length, "why": f"not needed: {so_far['sentence']}"} for r in plan.rungs[i - 1 :]
                ]
                out_print(f"stopping before {rung.length}: {so_far['sentence']}")
                break
        metadata = stages.stage_metadata(rung, plan, corpus, rules)
        key = stages.stage_key(fingerprint, metadata, corpus_record["texts_sha256"], extra, device)
        folder = out / stages.RUNS_FOLDER / rung.name
        argv = stages.harness_argv(Path(model), extra, metadata, folder, device, str(args.batch_size))
        command = stages.command_text(argv)
        if key in earlier:
            source, _ = earlier[key]
            copied = stages.copy_stage(source, folder)
            out_print(f"stage {i}/{len(plan.rungs)}: context length {rung.length}: reused from {source.parent}")
            done.append(
                stages.Stage(rung, key, str(copied.relative_to(out)), command, 0.0, 0.0, estimate, n, str(source))
            )
        else:
            out_print(f"stage {i}/{len(plan.rungs)}: context length {rung.length} (estimated {_duration(estimate)})")
            out_print(command)
            t0, c0 = time.perf_counter(), _cpu_seconds()
            results = runner(argv)
            wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
            ran = [x for x in done if x.reused_from is None]
            measured_ratio = (sum(x.wall_seconds for x in ran) + wall) / (
                sum(x.estimated_seconds for x in ran) + estimate
            )
            left = sum(estimates[i:]) * measured_ratio
            out_print(
                f"stage {i}: {_duration(wall)} wall (estimated {_duration(estimate)}); the stages left: about "
                f"{_duration(left)} (the estimates x {measured_ratio:.2g}, this run's measured / estimated so far)"
            )
            done.append(
                stages.Stage(rung, key, str(results.resolve().relative_to(out)), command, round(wall, 1), round(cpu, 1),
                             round(estimate, 1), n)
            )  # fmt: skip
        record["stages"] = [s.record() for s in done]
        output_dirs.write_atomically(out / verdict.AUDIT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    record["plan"]["not_run"] = not_run
    return finish(out, record, window, rules, profile, out_print)


def _window(config, given: int | None, profile: profiles.Profile | None) -> ClaimedWindow:
    try:
        from_config = claimed_window(config)
    except WindowError:
        from_config = None
    if given is not None:
        try:
            return claimed_window(config, given)
        except WindowError as err:
            raise AuditError(str(err)) from None
    if profile is not None:
        fields = from_config.fields if from_config else {}
        notes = (f"the config claims {from_config.tokens} ({from_config.source})",) if from_config else ()
        return ClaimedWindow(profile.window, f"profile {profile.name}: {profile.window_source}", fields, notes)
    if from_config is None:
        raise AuditError("the model's config states no window; give it with --window N")
    return from_config


def finish(out: Path, record: dict, window: ClaimedWindow, rules, profile, out_print=say) -> dict:
    files = [out / s["results_file"] for s in record["stages"]]
    judged = verdict.judge(verdict.measure([(out / s["results_file"], s["length"]) for s in record["stages"]]),
                           window.tokens, rules)  # fmt: skip
    record.update(
        {
            "window": window.record(),
            "rules": rules.record(),
            "verdict": judged,
            "expectations": expectations(profile, judged),
            "commands": [s["command"] for s in record["stages"]],
        }
    )
    record["results_model"] = _results_model(files[0])
    picture = _draw(out, judged)
    record["picture"] = picture
    output_dirs.write_atomically(out / verdict.AUDIT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    text = verdict_text(judged, record["plan"], record["model"])
    held = [e for e in record["expectations"] if not e["holds"]]
    if record["expectations"]:
        text += "\n" + "\n".join(
            f"profile {record['profile']}: {e['expectation']}: found {e['found']}: {'holds' if e['holds'] else 'FAILS'}"
            for e in record["expectations"]
        )
    output_dirs.write_atomically(out / verdict.AUDIT_MD, "# Audit\n\n" + text + "\n")
    out_print(text)
    record["failed"] = bool(held) or judged["verdict"] != verdict.USES
    return record


def _results_model(results_file: Path) -> str:
    from ..report.runs import ResultsFile

    try:
        return ResultsFile.read(results_file).model or ""
    except Exception:  # noqa: BLE001  (the name is a convenience for the leaderboard; the verdict stands without it)
        return ""


def _draw(out: Path, judged: dict) -> str | None:
    try:
        from ..report.pictures.audit import draw_audit
    except ImportError:
        return None
    draw_audit(judged, out / PICTURE)
    return PICTURE


def rejudge(args, out_print=say) -> dict:
    """Judge the stages already in OUT again (another --window, rule or threshold); the runs stay as they are."""
    out = Path(args.out)
    record = verdict.read_audit(out / verdict.AUDIT_JSON)
    if not record.get("stages"):
        raise AuditError(f"{out}: no stage has finished; run the audit without --from-run")
    w = record["window"] if "window" in record else record["plan"]["window"]
    window = ClaimedWindow(int(w["tokens"]), w["source"], dict(w.get("fields", {})), tuple(w.get("notes", ())))
    if args.window is not None:
        window = ClaimedWindow(int(args.window), "--window", window.fields, (f"the audit claimed {w['tokens']}",))
    rules = verdict.RuleSet(args.fraction, args.threshold, args.rule, args.decides)
    profile = profiles.load(args.profile) if args.profile else None
    return finish(out, record, window, rules, profile, out_print)


# ------------------------------------------------------------------ command line


def add_arguments(p) -> None:
    p.add_argument("out", metavar="OUT", help="output folder: corpus, runs/<stage>/, audit.json, audit.md, picture")
    p.add_argument("--model", metavar="DIR", help="the checkpoint (a folder --model hf loads); not with --from-run")
    p.add_argument("--model-args", default=None, metavar="K=V,...",
                   help="more lm-eval --model_args (dtype, revision, trust_remote_code, max_length, ...)")  # fmt: skip
    p.add_argument("--window", type=int, default=None, help="the claimed window in tokens (default: from the config)")
    p.add_argument("--profile", choices=profiles.names(), default=None,
                   help="a known checkpoint: its card's window and what the audit must find")  # fmt: skip
    p.add_argument("--budget", choices=sorted(planning.BUDGETS), default="ci", help="ci (default) or full")
    p.add_argument("--docs", type=int, default=None, help="documents per length (default: the budget's)")
    p.add_argument("--beyond", action="store_true", help="also test lengths beyond W (the budget's beyond fractions)")
    p.add_argument("--all-lengths", action="store_true", help="run every length even after the claim is refuted")
    p.add_argument("--documents", default="embedded",
                   help="embedded (default: the embedded corpus), govreport (the hub dataset) or a local file of "
                        "'text' rows")  # fmt: skip
    p.add_argument("--decides", choices=("relative", "absolute"), default="relative",
                   help="the effective-length rule that decides the verdict (both are reported)")  # fmt: skip
    p.add_argument("--fraction", type=float, default=0.5, help="relative rule: share of the shortest length's gain")
    p.add_argument("--threshold", type=float, default=0.5, help="absolute rule: gain in nats (and the relative "
                   "rule's floor)")  # fmt: skip
    p.add_argument("--rule", choices=("contiguous", "largest"), default="contiguous",
                   help="contiguous: every shorter length passes too (default); largest")  # fmt: skip
    p.add_argument("--reuse", metavar="DIR", default=None,
                   help="an earlier audit folder whose stages with identical scoring are copied, not run")  # fmt: skip
    p.add_argument("--from-run", action="store_true", help="judge the stages already in OUT again")
    p.add_argument("--device", default=None, help="lm_eval --device (default: cuda when available, else cpu)")
    p.add_argument("--batch-size", default="1", help="lm_eval --batch_size (default 1)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless the model uses its claimed window (and a profile's expectations hold)")  # fmt: skip


def run_from_args(args) -> int:
    from ..demo.known_answer import ValidationError
    from ..demo.run import DemoError

    if not 0 <= args.fraction <= 1 or args.threshold < 0:
        print("error: --fraction must lie in [0, 1] and --threshold be >= 0", file=sys.stderr)
        return 2
    try:
        if args.from_run:
            record = rejudge(args)
        else:
            if not args.model:
                print("error: --model DIR is required (or --from-run to judge an earlier audit)", file=sys.stderr)
                return 2
            record = run_audit(args)
    except (
        AuditError,
        planning.AuditPlanError,
        verdict.AuditRecordError,
        profiles.ProfileError,
        WindowError,
        ValidationError,
        DemoError,
        output_dirs.ForeignFolderError,
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1 if (args.check and record["failed"]) else 0
