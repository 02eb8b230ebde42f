"""report/card/card_runs.py: the runs on a report card: found by report/runs.py's rule, labelled (--label, else the
model's display name, told apart when two are equal), their text notes, and checkpoints of one training run
ordered by step."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.card import card_runs
from lm_eval_longctx.report.results import UnusableInput
from tests.report_fixtures import suite_results_json, write_results


def test_step_of_and_the_checkpoint_rule():
    assert card_runs.step_of("org/run/checkpoint-1200") == 1200
    assert card_runs.step_of("step1200") == 1200 and card_runs.step_of("global_step_300") == 300
    assert card_runs.step_of("1200") == 1200 and card_runs.step_of("org/llama-7b") is None
    assert card_runs.checkpoint_steps(["a/checkpoint-200", "a/checkpoint-100"]) == [200, 100]
    assert card_runs.checkpoint_steps(["a/checkpoint-200", "b/checkpoint-100"]) is None  # other training runs
    assert card_runs.checkpoint_steps(["a/checkpoint-200", "a/checkpoint-200"]) is None
    assert card_runs.checkpoint_steps(["a/checkpoint-200"]) is None
    assert card_runs.checkpoint_steps(["100", "200"]) == [100, 200]


def test_checkpoints_of_one_training_run_are_ordered_by_step(tmp_path):
    folders = [tmp_path / f"c{k}" for k in range(3)]
    for folder, step in zip(folders, (2400, 1200, 3600)):  # given out of step order
        write_results(folder, suite_results_json(f"org/run/checkpoint-{step}", tasks=["retrieval_gain"]))
    loaded = card_runs.load_runs(folders)
    assert [r.step for r in loaded.runs] == [1200, 2400, 3600]
    assert [r.source for r in loaded.runs] == [str(folders[1]), str(folders[0]), str(folders[2])]
    assert loaded.order[-1] == "checkpoints of one training run, shown by step: 1200, 2400, 3600"
    # the order printed before the sort: the inputs as given
    assert [line.split(":", 1)[0].strip() for line in loaded.order[1:4]] == [
        "1. org/run/checkpoint-2400",
        "2. org/run/checkpoint-1200",
        "3. org/run/checkpoint-3600",
    ]
    assert sorted(loaded.files) == sorted(str(next(f.glob("results_*.json"))) for f in folders)


def test_labels_replace_the_model_names_one_per_run(tmp_path):
    folders = [tmp_path / "a", tmp_path / "b"]
    write_results(folders[0], suite_results_json("org/x", tasks=["retrieval_gain"]))
    write_results(folders[1], suite_results_json("org/y", tasks=["retrieval_gain"]))
    loaded = card_runs.load_runs(folders, labels=["base", "tuned"])
    assert [(r.label, r.run.model) for r in loaded.runs] == [("base", "org/x"), ("tuned", "org/y")]
    assert loaded.runs[0].step is None  # no steps in the labels: not a series
    assert "1. base: " in loaded.order[1] and loaded.order[1].endswith("(org/x)")
    with pytest.raises(UnusableInput, match="1 --label for 2 runs found"):
        card_runs.load_runs(folders, labels=["only-one"])
    with pytest.raises(UnusableInput, match="no results given"):
        card_runs.load_runs([])


def test_runs_of_one_model_are_told_apart_by_their_folder_then_their_place(tmp_path):
    folders = [tmp_path / "exp1" / "out", tmp_path / "exp2" / "out", tmp_path / "exp3" / "out"]
    for folder in folders:
        write_results(folder, suite_results_json("org/m", tasks=["retrieval_gain"]))
    labels = [r.label for r in card_runs.load_runs(folders).runs]
    assert labels == ["org/m [exp1/out]", "org/m [exp2/out]", "org/m [exp3/out]"]
    labels = [r.label for r in card_runs.load_runs(folders, labels=["same", "same", "other"]).runs]
    assert labels == ["same [exp1/out]", "same [exp2/out]", "other"]
    # one folder given twice: the folder does not tell them apart, their place does
    labels = [r.label for r in card_runs.load_runs([folders[0], folders[0]]).runs]
    assert labels == ["org/m [exp1/out] #1", "org/m [exp1/out] #2"]


def test_a_tasks_text_note_is_kept_unless_it_is_none(tmp_path):
    skipped = "4096: over the model's maximum length"
    write_results(tmp_path / "a", suite_results_json("org/a", tasks=["forgetting_curve"], skipped=skipped))
    write_results(tmp_path / "b", suite_results_json("org/b", tasks=["forgetting_curve"]))
    a, b = card_runs.load_runs([tmp_path / "a", tmp_path / "b"]).runs
    assert a.notes == {"forgetting_curve": skipped} and b.notes == {}
    assert "forgetting_curve/skipped_lengths" not in a.run.metrics  # a note, not a metric
