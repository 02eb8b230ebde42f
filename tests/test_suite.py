"""suite.py: the module the YAMLs name: each ``class: !function lm_eval_longctx.suite.X`` is the task class of that
YAML's task, found among the classes the task modules define; and the report's pictures are hooked onto each saved
results file."""

from __future__ import annotations

import pytest
import yaml

from lm_eval_longctx import suite
from lm_eval_longctx.harness import saving
from lm_eval_longctx.report import bounds
from lm_eval_longctx.report.pictures import forgetting_curve_plot, gain_map_plot
from lm_eval_longctx.tasks import base
from tests.harness_utils import TASK_DIR

PREFIX = "lm_eval_longctx.suite."


class YamlLoader(yaml.SafeLoader):
    """lm-eval's YAML tags read as plain strings (``!function x.y`` -> ``"x.y"``)."""


YamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def task_yamls() -> dict[str, dict]:
    """task -> its YAML, for every YAML of the suite that names a class."""
    out = {}
    for path in sorted(TASK_DIR.glob("*.yaml")):
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=YamlLoader)
        if "class" in config:
            out[config["task"]] = config
    return out


def test_each_yaml_names_the_class_of_its_own_task():
    configs = task_yamls()
    assert sorted(configs) == sorted(base.suite_tasks())  # every task of the suite has its YAML, and no other
    for task, config in configs.items():
        assert config["class"].startswith(PREFIX), task
        cls = getattr(suite, config["class"][len(PREFIX) :])
        assert cls is base.suite_tasks()[task] and cls.SUITE_TASK_NAME == task


def test_the_task_classes_are_the_suites_by_their_python_names():
    classes = suite.task_classes()
    assert sorted(classes) == sorted(cls.__name__ for cls in base.suite_tasks().values())
    assert set(classes) <= set(dir(suite))
    with pytest.raises(AttributeError, match=r"has no attribute 'NoSuchTask'; its task classes: \['"):
        suite.NoSuchTask  # noqa: B018


def test_the_pictures_are_drawn_beside_each_saved_results_file():
    assert saving.RESULTS_SAVED_CALLBACKS["forgetting_curve"] is forgetting_curve_plot.save_beside_results
    assert saving.RESULTS_SAVED_CALLBACKS["gain_map"] is gain_map_plot.save_beside_results


def test_each_saved_results_file_says_which_lengths_are_lower_bounds():
    assert saving.RESULTS_ANNOTATORS["bounds"] is bounds.add_bounds
