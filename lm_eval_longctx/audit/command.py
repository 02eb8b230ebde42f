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
import shutil
import sys
import time
from pathlib import Path

from .. import errors, output_dirs, profiles
from ..data import embedded_corpus
from ..engine.window import ClaimedWindow, WindowError, WindowFieldError, claimed_window
from . import inputs as checking
from . import plan as planning
from . import stage_files, stages, verdict

log = logging.getLogger("lm_eval_longctx")

CORPUS_FILE = "corpus.jsonl"
PICTURE = "audit.png"
DOCUMENT_SOURCES = ("embedded", "govreport")
PURPOSE = "audit"
# where the RULER cross-check's runs go inside OUT
CROSS_CHECK_FOLDER = "ruler"
# the exit status of a run stopped by Ctrl-C, as a shell reports SIGINT
INTERRUPTED_EXIT = 130


class AuditError(ValueError):
    """An audit that cannot run: the message names the flag or file and the way out."""


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


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
    path = Path(source)
    if source != "govreport" and not path.is_file():
        raise AuditError(
            f"--documents {source}: no such file; give a JSONL/JSON/Parquet file of rows with a 'text' field, "
            f"or one of {list(DOCUMENT_SOURCES)}"
        )
    try:
        if source == "govreport":
            loaded = documents.load_govreport()
        else:
            loaded = documents.load_govreport(data_files=str(path), num_docs=10**6, min_tokens=1, max_tokens=10**9)
    except (errors.ResourceUnavailableError, ValueError, OSError) as err:
        # the data layer's ways out name the tasks' --metadata, which the audit does not take
        message = str(err).replace(documents.DATA_WAYS_OUT, AUDIT_DATA_WAYS_OUT)
        raise AuditError(f"--documents {source}: {message}") from None
    if len(loaded.texts) < docs:
        raise AuditError(f"--documents {source}: {len(loaded.texts)} documents, fewer than the {docs} asked (--docs)")
    return list(loaded.texts), dict(loaded.provenance)


AUDIT_DATA_WAYS_OUT = (
    "Ways out: a local copy as --documents docs.jsonl (rows with a 'text' field; json, jsonl or parquet), a "
    "reachable hub (unset HF_HUB_OFFLINE / HF_DATASETS_OFFLINE, log in for gated data), or the embedded documents "
    "(--documents embedded, the default)."
)


def choose_documents(texts: list[str], tokenizer, docs: int) -> tuple[list[str], list[int]]:
    """The ``docs`` longest documents in the model's tokens (ties in file order), in file order, and their tokens."""
    counts = [len(tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"]) for t in texts]
    chosen = sorted(sorted(range(len(texts)), key=lambda i: (-counts[i], i))[:docs])
    return [texts[i] for i in chosen], [counts[i] for i in chosen]


# ------------------------------------------------------------------ the model


def load_config_and_tokenizer(model: str, extra: dict):
    """The model's config (as transformers builds it, class defaults filled in), the config as its file states it
    (the claim is read from what the file says, never from a default) and its tokenizer."""
    from transformers import AutoConfig, AutoTokenizer, PretrainedConfig

    trust = str(extra.get("trust_remote_code", "false")).lower() in ("1", "true", "yes")
    revision = extra.get("revision")
    try:
        stated, _ = PretrainedConfig.get_config_dict(model, revision=revision)
    except (OSError, ValueError) as err:
        raise AuditError(f"--model {model}: cannot read its config.json ({errors.first_line(err)})") from None
    check_window_fields(stated, model)
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust, revision=revision)
    except Exception as err:  # noqa: BLE001  (transformers and the hub raise many kinds for one bad config)
        raise AuditError(f"--model {model}: transformers cannot build its config ({errors.first_line(err)})") from None
    source = extra.get("tokenizer", model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust)
    except (OSError, ValueError, KeyError, TypeError) as err:
        where = "--model-args tokenizer" if "tokenizer" in extra else "--model"
        raise AuditError(f"{where} {source}: cannot load its tokenizer ({errors.first_line(err)})") from None
    return config, stated, tokenizer


def check_window_fields(stated: dict, model: str = "") -> None:
    """Refuse a config whose window fields hold values no model is built with, naming the field."""
    try:
        claimed_window(stated)
    except WindowFieldError as err:
        raise AuditError(f"--model {model}: {err}".replace("  ", " ")) from None
    except WindowError:  # a config that states no window: --window or a profile gives it
        pass


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
    try:
        loaded = AutoModelForCausalLM.from_pretrained(model, **kwargs)
        return loaded.to(device).eval()  # type: ignore[arg-type]
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
        raise AuditError(
            f"--model {model}: cannot load it{' with --model-args ' + checking_text(extra) if extra else ''} "
            f"({errors.first_line(err)})"
        ) from None


def checking_text(extra: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in extra.items())


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


def plan_text(
    plan: planning.Plan,
    estimates: list[float],
    tokens: list[int],
    time_model: planning.TimeModel | None,
    device: str,
    reused: dict[int, Path] | None = None,
) -> str:
    """The plan as printed: a row per stage (``reused``: the stages, by index, an earlier audit's files serve, which
    forward nothing and count in no total), the totals of the stages that will run, and where the estimates come
    from (``time_model`` is None when no stage runs)."""
    reused = reused or {}
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
        cost = f"0 | reused from {reused[i - 1]}" if i - 1 in reused else f"{n:,} | {_duration(s)}"
        lines.append(
            f"| {i} | {rung.length}{beyond} | {rung.fraction:.3g} | {rung.context_length} | {rung.copy_length} | "
            f"{cost} |"
        )
    to_run = [i for i in range(len(plan.rungs)) if i not in reused]
    lines.append(
        f"| all | | | | | {sum(tokens[i] for i in to_run):,} | {_duration(sum(estimates[i] for i in to_run))} |"
    )
    for x in plan.left_out:
        lines.append(f"left out: {x['length']}: {x['why']}")
    if reused:
        lines.append(f"{len(reused)} of {len(plan.rungs)} stages reused (--reuse): the totals count the others")
    if time_model is None:
        lines.append("every stage is reused: nothing is forwarded, no probe was run")
    else:
        probe = ", ".join(f"{n} tokens {s:.3g} s" for n, s in time_model.measured)
        lines.append(
            f"estimates from a probe of the engine's long pass on {device} ({probe}), t(n) = a n + b n^2; stages "
            "stop early once the claim is refuted"
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


# what a verdict says of the claim, in the words of a profile's expect.claim
CLAIM_BY_VERDICT = {verdict.USES: "used", verdict.BELOW: "refuted", verdict.NONE: "refuted"}


def expectations(profile: profiles.Profile | None, judged: dict, agreement: dict | None = None) -> list[dict]:
    """The profile's expectations, each with what was found and whether it holds (RULER's only where the audit ran
    the cross-check: ``agreement``)."""
    if profile is None:
        return []
    out = []
    if "ruler" in profile.expect and agreement is not None:
        found = agreement["ruler"]["claim"]
        out.append(
            {
                "expectation": f"RULER (score > 85.6): claim {profile.expect['ruler']}",
                "found": found,
                "holds": found == profile.expect["ruler"],
            }
        )
    if "claim" in profile.expect:
        found = CLAIM_BY_VERDICT.get(judged["verdict"], "undecided")
        out.append(
            {
                "expectation": f"the claim {profile.expect['claim']}",
                "found": found,
                "holds": found == profile.expect["claim"],
            }
        )
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
    ``lm_eval`` arguments (default: lm-eval's own command line, in this process). Every input is checked before
    the model loads; OUT is written only once the plan is made, and only under its lock."""
    given = checking.check(args)
    if given.from_run:
        raise AuditError("--from-run judges an earlier audit: call rejudge")
    out = given.out
    with output_dirs.locked(out, "audit of this folder"):
        created = not out.exists()
        try:
            return _run_audit(args, given, out_print, runner)
        except BaseException:
            # a refusal or an interruption before any stage finished leaves no half-made folder behind
            if created and out.is_dir() and not (out / verdict.AUDIT_JSON).exists():
                shutil.rmtree(out, ignore_errors=True)
            raise


def _run_audit(args, given: checking.AuditInputs, out_print, runner) -> dict:
    if runner is None:
        from ..harness.evaluation import run_cli

        runner = run_cli
    extra, model, device = given.model_args, str(given.model), given.device
    profile = profiles.load(args.profile) if args.profile else None
    budget = planning.budget_named(given.budget)
    if given.docs is not None:
        budget = planning.Budget(**{**budget.record(), "docs": given.docs, "fractions": budget.fractions,
                                    "beyond": budget.beyond, "depths": budget.depths})  # fmt: skip
    rules = verdict.RuleSet(args.fraction, args.threshold, args.rule, args.decides)
    config, stated, tokenizer = load_config_and_tokenizer(model, extra)
    window = _window(stated, given.window, profile)
    earlier = stages.earlier_stages(given.reuse) if given.reuse else {}
    texts, provenance = load_documents(given.documents, budget.docs)
    texts, doc_tokens = choose_documents(texts, tokenizer, budget.docs)
    stream_tokens = sum(doc_tokens)
    t0 = time.perf_counter()
    loaded = load_model(model, extra, device)
    load_seconds = time.perf_counter() - t0
    from ..data.retrieval_cases import lead_token_ids
    from ..engine import scoring

    position_table = scoring.learned_position_table(loaded)
    plan = planning.plan_audit(
        window,
        budget,
        doc_tokens,
        stream_tokens,
        model_max_length(config, extra),
        position_table,
        beyond=args.beyond,
        lead_tokens=len(lead_token_ids(tokenizer, "auto")),
    )
    plan.shares_prefix = scoring.shares_prefix_cache(loaded)
    out_dir = given.out.resolve()
    corpus = out_dir / CORPUS_FILE
    texts_sha256 = embedded_corpus.provenance(texts)["texts_sha256"]
    fingerprint = stages.model_fingerprint(Path(model)) if Path(model).is_dir() else {"hub": model, **extra}
    keys = [
        stages.stage_key(fingerprint, stages.stage_metadata(r, plan, corpus, rules), texts_sha256, extra, device)
        for r in plan.rungs
    ]
    reused = {i: earlier[k][0].parent for i, k in enumerate(keys) if k in earlier}
    tokens = [planning.stage_tokens(r, plan) for r in plan.rungs]
    time_model = None
    estimates = [0.0] * len(plan.rungs)
    if len(reused) < len(plan.rungs):
        # the probe reads no position a learned table lacks: the lengths past it are left out of the plan
        time_model = planning.probe(loaded, min(window.tokens, position_table or window.tokens))
        # every stage is an lm_eval call that loads the model again
        estimates = [
            0.0 if i in reused else planning.stage_seconds(r, plan, time_model) + load_seconds
            for i, r in enumerate(plan.rungs)
        ]
    del loaded
    out_print(plan_text(plan, estimates, tokens, time_model, device, reused))
    if time_model is not None:
        out_print(f"each stage also loads the model ({load_seconds:.1f} s here) and lm-eval's task index")
    out = output_dirs.claim(out_dir, "the audit")
    corpus_record = embedded_corpus.write_corpus(corpus, texts)
    record: dict = {
        "kind": verdict.KIND,
        "model": model,
        "model_args": extra,
        "device": device,
        "profile": profile.name if profile else None,
        "plan": plan.record(),
        "documents": {"file": CORPUS_FILE, **{k: v for k, v in corpus_record.items() if k != "path"}, **provenance},
        "time_model": time_model.record() if time_model else None,
        "rules": rules.record(),
        "stages": [],
    }
    done: list[stages.Stage] = []
    not_run = []
    for i, (rung, n, estimate) in enumerate(zip(plan.rungs, tokens, estimates), start=1):
        if done and not args.all_lengths:
            so_far = verdict.judge(measure_verified(out, [s.record() for s in done]), window.tokens, rules)
            interval = so_far["effective"][rules.decides]
            if verdict.refuted(window.tokens, so_far["tested_lengths"], interval, rules.rule):
                not_run = [
                    {"length": r.length, "why": f"not needed: {so_far['sentence']}"} for r in plan.rungs[i - 1 :]
                ]
                out_print(f"stopping before {rung.length}: {so_far['sentence']}")
                break
        metadata = stages.stage_metadata(rung, plan, corpus, rules)
        key = keys[i - 1]
        folder = out / stages.RUNS_FOLDER / rung.name
        argv = stages.harness_argv(Path(model), extra, metadata, folder, device, given.batch_size)
        command = stages.command_text(argv)
        if key in earlier:
            source, _ = earlier[key]
            copied = stages.copy_stage(source, folder)
            out_print(f"stage {i}/{len(plan.rungs)}: context length {rung.length}: reused from {source.parent}")
            done.append(
                stages.Stage(rung, key, _inside(out, copied), command, 0.0, 0.0, estimate, n, str(source),
                             stage_files.record_files(out, copied))
            )  # fmt: skip
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
                stages.Stage(rung, key, _inside(out, results), command, round(wall, 1), round(cpu, 1),
                             round(estimate, 1), n, None, stage_files.record_files(out, results))
            )  # fmt: skip
        record["stages"] = [s.record() for s in done]
        output_dirs.write_atomically(out / verdict.AUDIT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    record["plan"]["not_run"] = not_run
    if given.cross_check == "ruler":
        from . import ruler

        record["cross_check"] = ruler.cross_check(
            Path(model), extra, [s.rung.length for s in done], given.ruler_samples, device, given.batch_size,
            out / CROSS_CHECK_FOLDER, runner, out_print,
        )  # fmt: skip
        output_dirs.write_atomically(out / verdict.AUDIT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    return finish(out, record, window, rules, profile, out_print)


def _inside(out: Path, path: Path) -> str:
    """``path`` relative to the audit folder ``out``; a stage's output elsewhere is an error."""
    try:
        return Path(path).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        raise AuditError(f"{path}: a stage's results were written outside the audit folder {out}") from None


def measure_verified(out: Path, stage_records: list) -> verdict.Measured:
    """What the stages measured, read only from their files as audit.json records them (``stage_files``)."""
    where = str(out / verdict.AUDIT_JSON)
    files = [(stage_files.verify_stage(out, s, where), int(s["length"])) for s in stage_records]
    try:
        return verdict.measure(files)
    except verdict.AuditRecordError:
        raise
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise verdict.AuditRecordError(
            f"{out}: the stages' files cannot be judged ({errors.first_line(err)}); run the audit again into a new "
            "folder"
        ) from None


def _window(stated: dict, given: int | None, profile: profiles.Profile | None) -> ClaimedWindow:
    """The claimed window: ``--window``, else the profile's, else what the config file states (its fields are
    checked whichever decides)."""
    try:
        from_config = claimed_window(stated)
    except WindowError:
        from_config = None
    if given is not None:
        return claimed_window(stated, given)
    if profile is not None:
        fields = from_config.fields if from_config else {}
        notes = (f"the config claims {from_config.tokens} ({from_config.source})",) if from_config else ()
        return ClaimedWindow(profile.window, f"profile {profile.name}: {profile.window_source}", fields, notes)
    if from_config is None:
        raise AuditError(
            "--model: its config.json states no window (none of max_position_embeddings, n_positions, "
            "max_seq_len, ..., and no RoPE scaling with a factor); give the claimed window with --window N"
        )
    return from_config


def finish(out: Path, record: dict, window: ClaimedWindow, rules, profile, out_print=say) -> dict:
    judged = verdict.judge(measure_verified(out, record["stages"]), window.tokens, rules)
    results_file = stage_files.inside(out, record["stages"][0]["results_file"], "audit.json")
    record.update(
        {
            "window": window.record(),
            "rules": rules.record(),
            "verdict": judged,
            "expectations": expectations(profile, judged),
            "commands": [s.get("command", "") for s in record["stages"]],
        }
    )
    if isinstance(record.get("cross_check"), dict):
        from . import ruler

        record["agreement"] = ruler.agreement(
            window.tokens, judged["tested_lengths"], int(judged["effective_length"]), record["cross_check"]
        )
        record["expectations"] = expectations(profile, judged, record["agreement"])
    record["results_model"] = _results_model(results_file)
    picture = _draw(out, judged, record.get("cross_check"))
    record["picture"] = picture
    output_dirs.write_atomically(out / verdict.AUDIT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    text = verdict_text(judged, record["plan"], record["model"])
    if "agreement" in record:
        from . import ruler

        text += "\n\nRULER beside the audit\n\n" + ruler.table(record["cross_check"]) + "\n"
        text += ruler.agreement_text(record["agreement"])
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


def _draw(out: Path, judged: dict, cross_check: dict | None = None) -> str | None:
    try:
        from ..report.pictures.audit import draw_audit
    except ImportError:
        return None
    draw_audit(judged, out / PICTURE, cross_check=cross_check)
    return PICTURE


def checked_record(out: Path) -> dict:
    """An earlier audit's record with the keys a verdict reads, each present and of its type."""
    path = out / verdict.AUDIT_JSON
    record = verdict.read_audit(path)
    plan = record.get("plan")
    if not isinstance(plan, dict):
        raise verdict.AuditRecordError(f'{path}: no "plan" object; run the audit again into a new folder')
    window = record.get("window", plan.get("window"))
    if not isinstance(window, dict) or not isinstance(window.get("tokens"), int) or window["tokens"] < 1:
        raise verdict.AuditRecordError(f'{path}: no claimed window ("window": {{"tokens": N}}); give --window N')
    if not isinstance(record.get("stages"), list) or not isinstance(record.get("model", ""), str):
        raise verdict.AuditRecordError(f'{path}: "stages" is not a list; run the audit again into a new folder')
    return record


def rejudge(args, out_print=say) -> dict:
    """Judge the stages already in OUT again (another --window, rule or threshold); the runs stay as they are,
    each file verified against the hash audit.json records for it."""
    given = checking.check(args)
    out = given.out
    with output_dirs.locked(out, "audit of this folder"):
        record = checked_record(out)
        if not record["stages"]:
            raise AuditError(f"{out}: no stage has finished; run the audit without --from-run")
        w = record["window"] if "window" in record else record["plan"]["window"]
        window = ClaimedWindow(int(w["tokens"]), str(w.get("source", "")), dict(w.get("fields", {})),
                               tuple(w.get("notes", ())))  # fmt: skip
        if given.window is not None:
            window = ClaimedWindow(given.window, "--window", window.fields, (f"the audit claimed {w['tokens']}",))
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
    p.add_argument("--budget", choices=sorted(planning.BUDGETS), default=None, help="ci (default) or full")
    p.add_argument("--docs", type=int, default=None, help="documents per length (default: the budget's)")
    p.add_argument("--beyond", action="store_true", help="also test lengths beyond W (the budget's beyond fractions)")
    p.add_argument("--all-lengths", action="store_true", help="run every length even after the claim is refuted")
    p.add_argument("--documents", default=None,
                   help="embedded (default: the embedded corpus), govreport (the hub dataset) or a local file of "
                        "'text' rows")  # fmt: skip
    p.add_argument("--decides", choices=("relative", "absolute"), default="relative",
                   help="the effective-length rule that decides the verdict (both are reported)")  # fmt: skip
    p.add_argument("--fraction", type=float, default=0.5, help="relative rule: share of the shortest length's gain")
    p.add_argument("--threshold", type=float, default=0.5, help="the gain in nats every depth must clear at a length "
                   "(the absolute rule; the relative rule's floor)")  # fmt: skip
    p.add_argument("--rule", choices=("contiguous", "largest"), default="contiguous",
                   help="contiguous: every shorter length passes too (default); largest")  # fmt: skip
    p.add_argument("--reuse", metavar="DIR", default=None,
                   help="an earlier audit folder whose stages with identical scoring are copied, not run")  # fmt: skip
    p.add_argument("--from-run", action="store_true", help="judge the stages already in OUT again")
    p.add_argument("--device", default=None, help="lm_eval --device (default: cuda when available, else cpu)")
    p.add_argument("--batch-size", default=None, help="lm_eval --batch_size: N, auto or auto:N (default 1)")
    p.add_argument("--cross-check", choices=checking.CROSS_CHECKS, default=None,
                   help="also run RULER's offline needle tasks (niah_single_1, niah_multikey_2/3) through lm_eval at "
                        "every length the audit tests, and put RULER's effective lengths beside the audit's")  # fmt: skip
    p.add_argument("--ruler-samples", type=int, default=None, metavar="N",
                   help="RULER samples of each task per length (default: 4 for the ci budget, 10 for full)")  # fmt: skip
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless the model uses its claimed window (and a profile's expectations hold)")  # fmt: skip


def run_from_args(args) -> int:
    """The command: exit 0 (judged), 1 (``--check`` and the claim not upheld), 2 (the audit cannot run: one line
    naming the flag, key or file), 130 (interrupted)."""
    from ..harness.evaluation import LmEvalRunError
    from ..report.run_samples import ValidationError

    try:
        record = rejudge(args) if args.from_run else run_audit(args)
    except (
        AuditError,
        checking.AuditInputError,
        stage_files.StageFileError,
        planning.AuditPlanError,
        verdict.AuditRecordError,
        profiles.ProfileError,
        WindowError,
        ValidationError,
        LmEvalRunError,
        output_dirs.ForeignFolderError,
        output_dirs.OutputBusyError,
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"interrupted (Ctrl-C): the audit of {args.out} stopped and judged nothing; the stages that finished "
            "stay in its audit.json (a folder it made with none is removed). Run the same command again to audit anew",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT
    return 1 if (args.check and record["failed"]) else 0
