"""The context-use measurement inside training (``training/context_use.py``): its numbers are the
``retrieval_gain_map`` task's through lm_eval on the same model and documents; the callback measures on the main
process every N steps, logs ``longctx/...``, restores the model's state, says the cost once, refuses a measurement
over its budget, and writes a series the report tools read as checkpoints of one run."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from lm_eval_longctx.training import context_use
from tests.harness_utils import run_task, write_docs
from tests.tiny import load

SETTINGS = context_use.MapSettings(lengths=(60, 120, 240), depths=(0, 50, 100), query_tokens=6, answer_tokens=5)


def test_a_ladder_must_increase():
    with pytest.raises(ValueError, match="increasing"):
        context_use.MapSettings(lengths=(240, 60))


@pytest.mark.integration
def test_a_measurement_equals_the_task_through_lm_eval(model_dirs, corpus_texts, tmp_path):
    texts = corpus_texts[:3]
    model, tok = load(model_dirs["a"])
    model.train()
    model.config.use_cache = False  # as under gradient checkpointing
    use = context_use.measure(model, tok, texts, SETTINGS, step=7)
    assert model.training and model.config.use_cache is False  # restored, untouched
    assert all(p.grad is None for p in model.parameters())  # measured under no_grad
    metadata = {**SETTINGS.task_metadata(), "data_files": write_docs(tmp_path / "docs.jsonl", texts), "num_docs": 3}
    res = run_task("retrieval_gain_map", model_dirs["a"], metadata)["results"]["retrieval_gain_map"]
    metrics = use.metrics()
    assert len(metrics) == 3 * 3 + 3 + 3
    for name, value in metrics.items():
        assert value == pytest.approx(res[f"{name},none"], abs=1e-5, rel=1e-5), name
    assert np.abs(use.gains).max() > 1e-3  # the context changes the numbers: not a vacuous comparison
    assert use.tokens > 0 and use.step == 7


@pytest.mark.integration
def test_the_callback_logs_every_n_steps_and_writes_a_series(model_dirs, corpus_texts, tmp_path, caplog):
    from transformers import Trainer, TrainingArguments

    from lm_eval_longctx.report.card.card_runs import load_runs

    model, tok = load(model_dirs["a"])
    ids = tok(" ".join(corpus_texts), add_special_tokens=False)["input_ids"][: 8 * 64]
    blocks = [{"input_ids": ids[i : i + 64], "labels": ids[i : i + 64]} for i in range(0, len(ids), 64)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "train"),
        max_steps=4,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=100,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=blocks)
    callback = context_use.LongContextCallback(
        tok, SETTINGS, every_steps=2, texts=corpus_texts[:2], output_dir=tmp_path / "series", model_name="tiny"
    ).attach(trainer)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        trainer.train()
    assert [u.step for u in callback.measurements] == [2, 4]
    logged = [h for h in trainer.state.log_history if "longctx/gain" in h]
    assert [h["step"] for h in logged] == [2, 4]
    assert set(logged[0]) >= {"longctx/gain@L00060", "longctx/effective_length", "longctx/effective_length_abs"}
    assert sum("one context-use measurement runs" in r.message for r in caplog.records) == 1  # the cost, once
    # the weights changed between the measurements: the series is not one number repeated
    assert callback.series()[0]["gain"] != callback.series()[1]["gain"]
    files = sorted((tmp_path / "series").glob("checkpoint-*/results_*.json"))
    assert [f.parent.name for f in files] == ["checkpoint-2", "checkpoint-4"]
    record = json.loads(files[0].read_text())
    assert record["results"]["retrieval_gain_map"]["gain,none"] == pytest.approx(callback.series()[0]["gain"])
    loaded = load_runs([str(f.parent) for f in files])
    assert [r.step for r in loaded.runs] == [2, 4]


@pytest.mark.integration
def test_a_measurement_over_its_budget_is_refused_before_any_forward(model_dirs, corpus_texts):
    model, tok = load(model_dirs["a"])
    callback = context_use.LongContextCallback(tok, SETTINGS, every_steps=1, texts=corpus_texts[:2], max_tokens=100)

    class State:
        global_step = 1
        is_world_process_zero = True
        log_history: list = []

    with pytest.raises(ValueError, match="over max_tokens 100"):
        callback.on_step_end(None, State(), None, model=model)
    # at each evaluation, when asked
    at_eval = context_use.LongContextCallback(tok, SETTINGS, at_evaluate=True, texts=corpus_texts[:2])
    at_eval.on_step_end(None, State(), None, model=model)
    assert at_eval.measurements == []
    at_eval.on_evaluate(None, State(), None, model=model)
    assert [u.step for u in at_eval.measurements] == [1] and State.log_history[-1]["step"] == 1
    # not the main process: nothing is measured
    State.is_world_process_zero = False
    callback.on_step_end(None, State(), None, model=torch.nn.Linear(1, 1))
    assert callback.measurements == []


@pytest.mark.integration
def test_a_model_learning_to_copy_is_seen_learning(tmp_path):
    """Known answer (scripts/context_use_known_answer.py): the demo model with every write of its copy heads into the
    readout zeroed does not copy (gain near 0, effective length 0); trained on documents that repeat their own
    passages, it learns those writes back, and the callback sees the gain rise and the effective length grow."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "context_use_known_answer.py"
    spec = importlib.util.spec_from_file_location("context_use_known_answer", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    series = script.run(tmp_path, steps=30, every=10).series()
    assert [m["step"] for m in series] == [0, 10, 20, 30]
    assert abs(series[0]["gain"]) < 0.5 and series[0]["effective_length"] == 0
    assert series[-1]["gain"] > series[0]["gain"] + 2.0
    assert series[-1]["effective_length"] > series[0]["effective_length"]
    assert series[-1]["effective_length_abs"] == 512
    written = sorted(p.parent.name for p in (tmp_path / "context_use").glob("checkpoint-*/results_*.json"))
    assert written == ["checkpoint-0", "checkpoint-10", "checkpoint-20", "checkpoint-30"]


@pytest.mark.integration
def test_two_measurements_are_paired_by_the_gate(model_dirs, tmp_path, capsys):
    """Each measurement's samples file holds every document's values: the gate pairs the documents of two steps and
    reproduces every reported value from them (no row falls back to the unpaired test)."""
    from lm_eval_longctx.cli import main
    from tests import tiny

    texts = tiny.corpus_texts(10, 400, seed=3)
    model, tok = load(model_dirs["a"])
    first = context_use.measure(model, tok, texts, SETTINGS, step=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.1)  # another checkpoint
    second = context_use.measure(model, tok, texts, SETTINGS, step=1)
    paths = [context_use.write_results(u, tmp_path, "tiny") for u in (first, second)]
    assert all(len(list(p.parent.glob("samples_retrieval_gain_map_*.jsonl"))) == 1 for p in paths)
    code = main(["gate", str(paths[1]), "--baseline", str(paths[0])])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| `retrieval_gain_map/")]
    assert code in (0, 1) and len(rows) == len(first.metrics())  # a verdict, whichever it is
    assert all("paired (10 docs" in row for row in rows), rows
