"""The audit end to end on models whose reach is known by construction (the demo's known-answer variants, untrained:
the copy circuit alone) and on a tiny random model, each stage run as lm-eval runs it (in this process, without
lm-eval's index of its own tasks); a twin checkpoint reusing stages; the verdict judged again from a moved folder."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from lm_eval_longctx.audit import command, plan, verdict
from lm_eval_longctx.data import embedded_corpus
from tests import tiny
from tests.harness_utils import lm_eval_in_process, write_docs

# the engine's probe itself, before the fixture below replaces it
REAL_PROBE = plan.probe
W = 1024  # ladder 256, 512, 1024 tokens: the short variant's gain falls below half by 1024, the long one's does not


def parse(*argv: str):
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.fixture(autouse=True)
def quick_probe(monkeypatch):
    """The probe's forwards cost seconds on these models; its fit is tested in test_plan.py."""
    monkeypatch.setattr(plan, "probe", lambda model, window: plan.fit_time_model([(256, 0.1), (512, 0.2)]))


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return write_docs(tmp_path_factory.mktemp("docs") / "docs.jsonl", embedded_corpus.embedded_documents(6000, 3))


def audit(out: Path, model: str, documents: str, *extra: str, lines=None) -> dict:
    args = parse(str(out), "--model", model, "--documents", documents, "--model-args", "dtype=float32",
                 "--device", "cpu", *extra)  # fmt: skip
    return command.run_audit(args, out_print=(lines.append if lines is not None else lambda *_: None),
                             runner=lm_eval_in_process)  # fmt: skip


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    from lm_eval_longctx.demo import model

    root = tmp_path_factory.mktemp("variants")
    recipe, known = model.DEMO_RECIPE, model.VARIANTS
    model.DEMO_RECIPE = model.COPY_ONLY_RECIPE  # rope_theta 1e6 / 1e4: a sharp copy reach
    model.VARIANTS = model.variants_for(model.COPY_ONLY_RECIPE)
    try:
        for name in model.VARIANT_ORDER:
            model.build_variant(name, root / name, steps=0, log=lambda *a: None)
    finally:
        model.DEMO_RECIPE, model.VARIANTS = recipe, known
    return root


@pytest.mark.parametrize(
    ("variant", "expected", "effective"),
    [("long", verdict.USES, {1024}), ("short", verdict.BELOW, {256, 512}), ("none", verdict.NONE, {0})],
)
def test_the_audit_finds_each_constructed_reach(variant, expected, effective, variants, documents, tmp_path):
    lines: list[str] = []
    record = audit(tmp_path / "out", str(variants / variant), documents, "--window", str(W), lines=lines)
    judged = record["verdict"]
    assert judged["verdict"] == expected and judged["effective_length"] in effective, judged["sentence"]
    if variant == "none":  # refuted at the first length: nothing longer runs
        assert [s["length"] for s in record["stages"]] == [256]
    assert record["failed"] == (expected != verdict.USES)
    # the plan and its cost come before the first stage runs; every stage's lm_eval command is recorded
    first_stage = next(i for i, line in enumerate(lines) if line.startswith("stage 1/"))
    assert lines[0].startswith(f"claimed window W = {W} tokens, from --window") and "| all |" in "\n".join(
        lines[:first_stage]
    )
    assert all(
        s["command"].startswith("lm_eval run --tasks retrieval_gain_map,forgetting_curve") for s in record["stages"]
    )
    out = tmp_path / "out"
    assert json.loads((out / verdict.AUDIT_JSON).read_text())["verdict"]["verdict"] == expected
    assert judged["sentence"] in (out / verdict.AUDIT_MD).read_text()


@pytest.fixture(scope="module")
def random_model(tmp_path_factory, corpus_texts):
    return tiny.save_tiny_model(tmp_path_factory.mktemp("random") / "model", corpus_texts, vocab_size=300, seed=3)


def test_a_random_model_has_no_effective_context_said_as_such(random_model, documents, tmp_path):
    record = audit(tmp_path / "out", random_model, documents, "--window", str(W))
    assert record["verdict"]["verdict"] == verdict.NONE and record["failed"]
    assert "no effective context at any tested length" in record["verdict"]["sentence"]


def test_a_twin_that_only_claims_more_reuses_the_stages_and_is_refuted(variants, documents, tmp_path):
    first = audit(tmp_path / "short", str(variants / "short"), documents, "--window", "256", "--beyond")
    assert [s["length"] for s in first["stages"]] == [256, 512]
    twin = tmp_path / "twin"
    shutil.copytree(variants / "short", twin)
    config = json.loads((twin / "config.json").read_text())
    config["max_position_embeddings"] *= 2  # a config that claims more; default RoPE does not read the field
    (twin / "config.json").write_text(json.dumps(config))
    lines: list[str] = []
    record = audit(tmp_path / "twin_out", str(twin), documents, "--window", "2048", "--reuse", str(tmp_path / "short"),
                   lines=lines)  # fmt: skip
    # ladder 256, 512, 1024, 2048: the first two come from the short variant's audit, with its numbers
    reused = [s["length"] for s in record["stages"] if s.get("reused_from")]
    assert reused == [256, 512] and sum(line.startswith("stage ") and "reused from" in line for line in lines) == 2
    # the plan marks the two stages it copies and counts only the others
    plan_lines = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("stage 1/"))]).split("\n")
    rows = [line for line in plan_lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and all("| 0 | reused from" in row for row in rows)
    n_stages = len(record["plan"]["lengths"])
    assert f"2 of {n_stages} stages reused (--reuse): the totals count the others" in "\n".join(plan_lines)
    assert record["verdict"]["per_length"][:2] == first["verdict"]["per_length"]
    assert record["verdict"]["verdict"] == verdict.BELOW and 2048 not in record["verdict"]["tested_lengths"]
    named = record["plan"]["left_out"] + record["plan"]["not_run"]
    assert 2048 in [x["length"] for x in named]  # left out (short documents) or not run (refuted): said either way


def test_a_moved_audit_folder_is_judged_on_its_own_files(variants, documents, tmp_path):
    audit(tmp_path / "out", str(variants / "long"), documents, "--window", str(W))
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "out", moved)
    again = command.rejudge(parse(str(moved), "--from-run", "--window", "2048"), out_print=lambda *_: None)
    assert again["verdict"]["verdict"] == verdict.SHORT and again["window"]["tokens"] == 2048
    assert all(not Path(s["results_file"]).is_absolute() for s in again["stages"])


@pytest.fixture(scope="module")
def none_audit(variants, documents, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("none") / "audit"
    audit(out, str(variants / "none"), documents, "--window", str(W))
    return out


def test_an_audit_whose_every_stage_is_reused_runs_no_probe(variants, documents, tmp_path, monkeypatch):
    short = ("--window", "512", "--all-lengths")  # a short ladder, every stage run
    first = audit(tmp_path / "first", str(variants / "none"), documents, *short)

    def no_probe(model, window):
        raise AssertionError("the probe ran though every stage is reused")

    monkeypatch.setattr(plan, "probe", no_probe)
    lines: list[str] = []
    record = audit(tmp_path / "again", str(variants / "none"), documents, *short, "--reuse", str(tmp_path / "first"),
                   lines=lines)  # fmt: skip
    assert all(s.get("reused_from") for s in record["stages"]) and len(record["stages"]) == len(first["stages"])
    text = "\n".join(lines)
    assert "| all | | | | | 0 | 0 s |" in text and "every stage is reused: nothing is forwarded, no probe" in text
    assert record["time_model"] is None and record["verdict"] == first["verdict"]


def test_leaderboard_and_report_card_show_claimed_and_effective(none_audit, tmp_path):
    from lm_eval_longctx.report.card.report import build_report_card
    from lm_eval_longctx.report.leaderboard import build_leaderboard

    record = json.loads((none_audit / verdict.AUDIT_JSON).read_text())
    results = none_audit / record["stages"][0]["results_file"]
    board = build_leaderboard([results], audits=[none_audit])
    md = board.markdown()
    assert md.splitlines()[0].startswith("| model | claimed | effective ↑ |")
    assert f"| {W} | 0 [0, 0] |" in md
    assert board.csv().splitlines()[0].startswith("model,claimed_window,effective_length,")
    plain = build_leaderboard([results]).markdown()  # no audit given: no such columns, no guess
    assert "claimed" not in plain and "effective ↑" not in plain
    page = tmp_path / "card.html"
    build_report_card([results], page, audits=[none_audit])
    html = page.read_text()
    assert "Claimed vs effective context" in html and "no effective context at any tested length" in html
    assert html.count("data:image/png;base64") >= 2  # the audit's picture beside the task's own


# ------------------------------------------------------------------ only its own, verified files; every input checked


def copy_of(audit_dir: Path, to: Path) -> Path:
    shutil.copytree(audit_dir, to)
    return to


def edit_record(out: Path, edit) -> None:
    record = json.loads((out / verdict.AUDIT_JSON).read_text())
    edit(record)
    (out / verdict.AUDIT_JSON).write_text(json.dumps(record))


def exit_and_error(args, capsys) -> tuple[int, str]:
    """The command's exit status and its last line on stderr (the message; loading bars may come before it)."""
    code = command.run_from_args(args)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return code, err.splitlines()[-1] if err else ""


def test_from_run_never_follows_a_results_file_outside_its_folder(none_audit, tmp_path, capsys):
    out = copy_of(none_audit, tmp_path / "copy")
    edit_record(out, lambda r: r["stages"][0].update(results_file=str(none_audit / r["stages"][0]["results_file"])))
    code, err = exit_and_error(parse(str(out), "--from-run"), capsys)
    assert code == 2 and "is not inside the audit folder" in err


@pytest.mark.parametrize("change", ["gains edited", "samples cut", "plan missing", "results_file missing"])
def test_from_run_and_reuse_refuse_files_the_audit_did_not_write(change, none_audit, random_model, tmp_path, capsys):
    out = copy_of(none_audit, tmp_path / "earlier")
    record = json.loads((out / verdict.AUDIT_JSON).read_text())
    samples = next((out / record["stages"][0]["results_file"]).parent.glob("samples_retrieval_gain_map_*.jsonl"))
    text = samples.read_text()
    if change == "gains edited":
        samples.write_text(text.replace('"gain": ', '"gain": 5 + '))
    elif change == "samples cut":
        samples.write_text(text[: len(text) // 2])
    elif change == "plan missing":
        edit_record(out, lambda r: r.pop("plan"))
    else:
        edit_record(out, lambda r: r["stages"][0].pop("results_file"))
    code, err = exit_and_error(parse(str(out), "--from-run"), capsys)
    named = {"plan missing": 'no "plan" object', "results_file missing": 'no "results_file" key'}
    assert code == 2 and named.get(change, samples.name) in err
    if change == "plan missing":
        return
    again = tmp_path / "again"
    code, err = exit_and_error(parse(str(again), "--model", random_model, "--reuse", str(out), "--window", str(W),
                                     "--device", "cpu"), capsys)  # fmt: skip
    assert code == 2 and "--reuse" in err and not again.exists()


def test_a_refusal_leaves_no_half_made_folder_and_ctrl_c_exits_130(random_model, documents, monkeypatch, tmp_path,
                                                                   capsys):  # fmt: skip
    out = tmp_path / "out"
    # documents far too short for the ladder: refused after the model loaded, before any stage
    code, err = exit_and_error(parse(str(out), "--model", random_model, "--documents", documents, "--window",
                                     "10000000", "--device", "cpu"), capsys)  # fmt: skip
    assert code == 2 and "no context length of the ladder can be tested" in err and not out.exists()

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr("lm_eval_longctx.harness.evaluation.run_cli", interrupted)
    code, err = exit_and_error(parse(str(out), "--model", random_model, "--documents", documents, "--window", str(W),
                                     "--device", "cpu"), capsys)  # fmt: skip
    assert code == command.INTERRUPTED_EXIT and err.startswith("interrupted (Ctrl-C)")
    assert not out.exists()


def test_two_audits_of_one_folder_do_not_race(random_model, documents, tmp_path, capsys):
    from lm_eval_longctx import output_dirs

    out = tmp_path / "out"
    with output_dirs.locked(out, "audit of this folder"):
        code, err = exit_and_error(parse(str(out), "--model", random_model, "--documents", documents, "--window",
                                         str(W), "--device", "cpu"), capsys)  # fmt: skip
    assert code == 2 and "another audit of this folder is writing it now" in err and not out.exists()


def test_a_config_that_states_no_window_asks_for_it(random_model, documents, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(random_model, twin)
    config = json.loads((twin / "config.json").read_text())
    del config["max_position_embeddings"]  # transformers' class default (2048) is no claim
    (twin / "config.json").write_text(json.dumps(config))
    with pytest.raises(command.AuditError, match="config.json states no window.*give the claimed window with --window"):
        audit(tmp_path / "out", str(twin), documents)
    assert not (tmp_path / "out").exists()


def test_lengths_past_a_learned_position_table_are_left_out_and_named(random_model, documents, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    model_dir = tmp_path / "gpt2"
    tokenizer = AutoTokenizer.from_pretrained(random_model)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    probed = []

    def probe(model, window):
        probed.append(window)
        return REAL_PROBE(model, window, repeats=1)

    monkeypatch.setattr(plan, "probe", probe)
    # the probe and the stages read no position past the table: nothing refuses the audit
    record = audit(tmp_path / "out", str(model_dir), documents, "--window", "1024")
    left_out = {x["length"]: x["why"] for x in record["plan"]["left_out"]}
    assert sorted(left_out) == [512, 1024] and "learned position table holds 256 positions" in left_out[1024]
    assert [s["length"] for s in record["stages"]] == [256] and probed == [256]


def test_govreport_unreachable_names_the_audits_way_out(monkeypatch):
    from lm_eval_longctx import errors
    from lm_eval_longctx.data import documents

    def offline(*args, **kwargs):
        raise errors.ResourceUnavailableError(f"the GovReport dataset cannot be loaded here. {documents.DATA_WAYS_OUT}")

    monkeypatch.setattr(documents, "load_govreport", offline)
    with pytest.raises(command.AuditError) as caught:
        command.load_documents("govreport", 3)
    assert "--documents docs.jsonl" in str(caught.value) and "--metadata" not in str(caught.value)


def test_the_ruler_cross_check_stands_beside_the_verdict(random_model, documents, monkeypatch, tmp_path):
    from lm_eval_longctx.audit import ruler

    asked = {}

    def cross_check(model_dir, extra, lengths, samples, device, batch_size, out_folder, runner, say):
        asked.update(lengths=lengths, samples=samples, out_folder=out_folder)
        scores = {length: 0.0 for length in lengths}  # a random model finds no needle
        rules = ruler.effective_lengths(scores)
        for rule in rules.values():
            rule.update(tokens_forwarded=sum(lengths), tokens_generated=48, wall_seconds=1.0)
        return {"lengths": [{"length": k, "score": v, "low": 0.0, "high": 0.0, "samples": samples,
                             "tokens_forwarded": k, "tokens_generated": 48, "wall_seconds": 1.0} for k, v in
                            scores.items()],
                "left_out": [], "effective_length": rules}  # fmt: skip

    monkeypatch.setattr(ruler, "check_packages", lambda: None)
    monkeypatch.setattr(ruler, "cross_check", cross_check)
    out = tmp_path / "out"
    record = audit(out, random_model, documents, "--window", str(W), "--cross-check", "ruler")
    assert asked == {"lengths": [256], "samples": 4, "out_folder": out.resolve() / "ruler"}
    assert record["agreement"]["ruler"]["claim"] == record["agreement"]["audit"]["claim"] == "refuted"
    text = (out / verdict.AUDIT_MD).read_text()
    assert "RULER beside the audit" in text and "agrees with the audit on the claim" in text
    # --from-run keeps the cross-check and judges the agreement again
    again = command.rejudge(parse(str(out), "--from-run", "--window", "512"), out_print=lambda *_: None)
    assert again["agreement"]["window"] == 512 and "cross_check" in json.loads((out / verdict.AUDIT_JSON).read_text())
    # the report card shows RULER's table and the agreement beside the audit's
    from lm_eval_longctx.report.card.report import build_report_card

    page = tmp_path / "card.html"
    build_report_card([out / record["stages"][0]["results_file"]], page, audits=[out])
    html = page.read_text()
    assert "RULER beside the audit" in html and "RULER&#x27;s rule (score above 85.6)" in html


def test_a_profile_may_expect_only_that_the_claim_is_refuted():
    from lm_eval_longctx import profiles

    profile = profiles.load("smollm2-135m-instruct-sliding-512")
    for found, holds in ((verdict.NONE, True), (verdict.BELOW, True), (verdict.USES, False), (verdict.SHORT, False)):
        (claim,) = [e for e in command.expectations(profile, {"verdict": found}) if e["expectation"].startswith("the")]
        assert claim["holds"] == holds, found
