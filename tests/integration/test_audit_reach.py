"""The audit of a model whose reach is bounded by its attention window, not by its positions: the demo's `long`
variant (untrained copy circuit, copies across 1,024 tokens) with every layer limited to the last 256 positions
(``tiny.sliding_window_twin``). At a claim of 1,024 tokens its near depth still finds the passage at every length,
so a mean over depths clears the rules; the audit must read every depth, and the forgetting curve, and refute it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lm_eval_longctx.audit import command, plan, verdict
from lm_eval_longctx.data import embedded_corpus
from lm_eval_longctx.metrics import gain_map
from tests import tiny
from tests.harness_utils import lm_eval_in_process, write_docs

pytestmark = pytest.mark.integration
W = 1024  # ladder 256, 512, 1024 tokens
SLIDING_WINDOW = 256  # every depth of the 256-token rung lies within it; depth 10 of the 512-token rung does not


@pytest.fixture(autouse=True)
def quick_probe(monkeypatch):
    """The probe's forwards cost seconds on these models; its fit is tested in tests/audit/test_plan.py."""
    monkeypatch.setattr(plan, "probe", lambda model, window: plan.fit_time_model([(256, 0.1), (512, 0.2)]))


def audit(out: Path, model: str, documents: str, *extra: str) -> dict:
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    args = p.parse_args([str(out), "--model", model, "--documents", documents, "--model-args", "dtype=float32",
                         "--device", "cpu", *extra])  # fmt: skip
    return command.run_audit(args, out_print=lambda *_: None, runner=lm_eval_in_process)


def test_a_sliding_window_model_is_refuted_where_a_mean_over_depths_would_pass(copy_only_variants, tmp_path):
    documents = write_docs(tmp_path / "docs.jsonl", embedded_corpus.embedded_documents(6000, 3))
    twin = tiny.sliding_window_twin(copy_only_variants / "long", tmp_path / "twin", SLIDING_WINDOW)
    out = tmp_path / "out"
    record = audit(out, twin, documents, "--window", str(W), "--decides", "absolute", "--all-lengths")
    judged = record["verdict"]
    assert judged["verdict"] == verdict.BELOW and judged["effective_length"] == 256, judged["sentence"]
    assert judged["effective"]["relative"]["value"] == 256 and record["failed"]
    assert max(judged["effective"][rule]["high"] for rule in ("relative", "absolute")) < W
    rows = {r["length"]: {**r, "gain_by_depth": {int(d): g for d, g in r["gain_by_depth"].items()}}
            for r in judged["per_length"]}  # fmt: skip
    # within the window every depth finds its passage; at 1024 only depth 90 (about 140 tokens back) does
    assert min(rows[256]["gain_by_depth"].values()) > 2.0
    assert rows[1024]["gain_by_depth"][90] > 2.0 and max(rows[1024]["gain_by_depth"][d] for d in (10, 50)) < 0.5
    assert rows[1024]["weakest_depth"] in (10, 50) and rows[1024]["weakest_gain"] < 0.5
    # the forgetting curve copies 510 tokens (beyond the window) no better than the LM predicts
    assert rows[256]["copy_above_lm"] and not rows[1024]["copy_above_lm"]
    # what a mean over depths reads from the same runs: every length clears the absolute rule, the claim would hold
    measured = verdict.measure([(out / s["results_file"], s["length"]) for s in record["stages"]])
    mean = measured.gains.mean(axis=(0, 2))
    assert gain_map.effective_length(measured.lengths, mean, threshold=0.5) == W
    assert "weakest depth's gain" in (out / verdict.AUDIT_MD).read_text()
