"""`lm_eval --tasks longctx` runs every task of the suite exactly once.

lm-eval 0.4.13 expands a tag to the set of tasks whose YAML names it (TaskManager's index; a tag is "a
shorthand for multiple tasks, not a container"), so a task runs once however often it is tagged. A `tag:` on a
group YAML is ignored by that index (only tasks register tags), so the suite tags every leaf task (the two tasks
of the group longeval_lines included) and no group: the group's row is not reported under the tag, its tasks are.
"""

from pathlib import Path

import yaml

from tests.harness_utils import TASK_DIR

TAG = "longctx"


def _configs() -> dict[str, dict]:
    loader = yaml.SafeLoader
    loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    out = {}
    for path in sorted(Path(TASK_DIR).glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            out[path.name] = yaml.load(f, Loader=loader)
    return out


def _tags(cfg: dict) -> list[str]:
    tag = cfg.get("tag") or []
    return [tag] if isinstance(tag, str) else list(tag)


def test_every_task_and_no_group_carries_the_tag():
    configs = _configs()
    tasks = {c["task"] for c in configs.values() if isinstance(c.get("task"), str)}
    groups = {c["group"]: c for c in configs.values() if "group" in c}
    tagged = [c["task"] for c in configs.values() if TAG in _tags(c) and isinstance(c.get("task"), str)]
    assert sorted(tagged) == sorted(tasks), "every task of the suite carries the tag, once"
    assert not [g for g, c in groups.items() if TAG in _tags(c) or TAG in (c.get("tag") or [])]
    assert {
        "longppl_govreport",
        "forgetting_curve",
        "retrieval_gain",
        "retrieval_gain_map",
        "longeval_lines_ppl",
        "longeval_lines_acc",
    } <= tasks


def test_lm_eval_expands_the_tag_to_each_task_once():
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR))
    assert TAG in tm.all_tags
    members = sorted(tm.task_index[TAG].tags)
    leaf_tasks = sorted(c["task"] for c in _configs().values() if isinstance(c.get("task"), str))
    assert members == leaf_tasks
    # the tag holds tasks only
    assert all(name not in tm.all_groups for name in members)
