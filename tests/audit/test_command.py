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
    assert reused == [256, 512] and sum("reused from" in line for line in lines) == 2
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
