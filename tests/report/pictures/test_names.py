"""report/pictures/names.py: one rule for what every picture and the report card call a model (a hub id as it
is, the packaged demo model by name, a local folder by its name, a checkpoint with its training run), and pictures
drawn with matplotlib's mathtext off."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.card import card_runs
from lm_eval_longctx.report.pictures import forgetting_curve_plot, gain_map_plot, longeval_plot, names
from tests.report_fixtures import suite_results_json, write_results


@pytest.mark.parametrize(
    "recorded, shown",
    [
        ("/work/main/lm_eval_longctx/demo/assets/model", "demo model (lm_eval_longctx)"),  # the packaged demo model
        ("/venv/lib/python3.11/site-packages/lm_eval_longctx/demo/assets/model/", "demo model (lm_eval_longctx)"),
        ("Qwen/Qwen2-7B", "Qwen/Qwen2-7B"),  # hub ids as they are
        ("org/run/checkpoint-1200", "org/run/checkpoint-1200"),
        ("/data/models/Llama-3-8B", "Llama-3-8B"),  # a local folder: its name
        ("./out/llama", "llama"),
        ("~/models/mistral-7b", "mistral-7b"),
        ("C:\\models\\phi-2", "phi-2"),
        ("/runs/exp1/checkpoint-1000", "exp1/checkpoint-1000"),  # a checkpoint keeps its training run
        ("/runs/exp1/global_step500/", "exp1/global_step500"),
    ],
)
def test_one_model_name_in_every_picture_and_on_the_page(tmp_path, recorded, shown):
    assert names.display_name(recorded) == shown
    data = suite_results_json(recorded)
    assert forgetting_curve_plot.curve_from_results(data, "forgetting_curve").label == shown
    assert gain_map_plot.map_from_results(data, "retrieval_gain_map").label == shown
    assert longeval_plot.run_label(data, "fallback") == shown
    write_results(tmp_path / "out", data)
    assert [r.label for r in card_runs.load_runs([tmp_path / "out"]).runs] == [shown]
    # without model_name: pretrained= of the model_args, as a string or a dict; else the fallback
    del data["model_name"]
    assert names.model_label(data) == shown
    data["config"]["model_args"] = {"pretrained": recorded}
    assert names.model_label(data) == shown
    assert names.model_label({"config": {}}, "fallback") == "fallback"


@pytest.mark.parametrize(
    "name, local",
    [
        ("/abs/model", True),
        ("./model", True),
        ("../model", True),
        ("~/model", True),
        ("D:\\models\\m", True),
        ("D:/models/m", True),
        ("models\\m", True),
        ("org/model", False),
        ("model", False),
        ("org/run/checkpoint-1", False),
    ],
)
def test_a_path_as_typed_is_local_and_a_bare_name_is_a_hub_id(name, local):
    assert names.is_local_path(name) is local


def test_display_name_of_odd_names():
    assert names.display_name("  Qwen/Qwen2-7B \n") == "Qwen/Qwen2-7B"  # stripped
    assert names.display_name("") == "" and names.display_name("/") == "/"  # no folder to name: as recorded
    assert names.display_name("/checkpoint-1000") == "checkpoint-1000"  # a checkpoint without a parent
    assert names.display_name("/runs/exp1/checkpoints") == "checkpoints"  # no step number: not a checkpoint


def test_the_packaged_demo_model_is_named_by_where_it_lies(tmp_path):
    link = tmp_path / "my-model"
    link.symlink_to(names._DEMO_MODEL_DIR, target_is_directory=True)
    assert names.display_name(str(link)) == names.DEMO_MODEL_NAME  # another name of the package's folder
    assert names.display_name(str(tmp_path / "other" / "model")) == "model"


def test_a_picture_is_drawn_with_mathtext_off_and_the_setting_restored():
    matplotlib = pytest.importorskip("matplotlib")
    before = matplotlib.rcParams["text.parse_math"]

    @names.plain_text
    def figure(label):
        """Draws a figure."""
        return label, matplotlib.rcParams["text.parse_math"]

    assert figure("acc$^$") == ("acc$^$", False)
    assert matplotlib.rcParams["text.parse_math"] == before
    assert figure.__name__ == "figure" and figure.__doc__ == "Draws a figure."


def test_a_long_label_wraps_where_it_can_break_and_keeps_every_character():
    label = "/work/experiments/SmolLM2-135M-Instruct-with-a-very-long-name/checkpoint-1200 [exp1/out]"
    wrapped = names.wrap_label(label, 30)
    assert all(len(line) <= 30 for line in wrapped.splitlines())
    assert wrapped.replace("\n", "") == label.replace(" [", "[")  # a break at a space drops that space only
    assert names.wrap_label("short", 30) == "short"
    assert names.wrap_label("x" * 70, 30).splitlines() == ["x" * 30, "x" * 30, "x" * 10]
