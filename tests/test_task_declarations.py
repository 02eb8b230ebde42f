"""What each task class declares about itself: its registry entry, its metrics' directions, its report-card
section and its per-token export. Nothing here runs the harness: the declarations are read from the classes."""

import pytest

from lm_eval_longctx.tasks import base

CLASSES = base.suite_tasks()
DRAWERS = {"forgetting_curve", "gain_map", "longeval_curves", "longeval_by_size"}


def _bare_task(cls, **attrs):
    """A task object with the attributes its metric_declarations() reads, without the harness building it."""
    task = object.__new__(cls)
    task.__dict__.update(attrs)
    return task


BARE = {
    "longppl_govreport": {"settings": {"soft_gamma": 0.1}, "_no_key_reasons": {}},
    "forgetting_curve": {
        "settings": {"fine_threshold": 0.99, "fine_rule": "largest", "coarse_margin": 0.1, "coarse_rule": "largest"},
        "lengths": [64, 128],
        "width": 5,
    },
    "retrieval_gain": {},
    "retrieval_gain_map": {
        "settings": {
            "depths": [0, 50, 100],
            "effective_fraction": 0.5,
            "effective_rule": "contiguous",
            "effective_threshold": 0.1,
        },
        "lengths": [256, 1024],
        "width": 5,
        "depth_width": 3,
    },
    "longeval_lines_ppl": {"settings": {"over_length": "skip"}, "configurations": [200, 680], "_width": 4},
    "longeval_lines_acc": {"settings": {"over_length": "skip"}, "configurations": [200], "_width": 4},
}


def test_every_task_class_registers_itself_under_its_suite_name():
    assert set(CLASSES) == set(BARE)
    for name, cls in CLASSES.items():
        assert cls.SUITE_TASK_NAME == name and issubclass(cls, base.LongContextTask)


@pytest.mark.parametrize("name", sorted(BARE))
def test_every_declared_metric_has_its_direction(name):
    """lm-eval writes these into the results as higher_is_better, where the report tools read them."""
    hib = _bare_task(CLASSES[name], **BARE[name]).higher_is_better()
    assert len(hib) >= 3
    for metric, direction in hib.items():
        assert direction is CLASSES[name].direction_of(metric), metric
    with pytest.raises(KeyError, match="METRIC_DIRECTIONS"):
        CLASSES[name].direction_of("a_metric_nobody_declares")


@pytest.mark.parametrize(
    "name, metric, direction",
    [
        ("longppl_govreport", "longppl", False),
        ("longppl_govreport", "key_token_fraction", None),
        ("forgetting_curve", "copy_acc@00128", True),
        ("forgetting_curve", "n_failed_lengths", False),
        ("forgetting_curve", "skipped_lengths", None),
        ("retrieval_gain", "retrieval_gain", True),
        ("retrieval_gain", "nll_with", False),
        ("retrieval_gain_map", "gain@L01024_d050", True),
        ("retrieval_gain_map", "effective_length_abs", True),
        ("longeval_lines_ppl", "answer_ppl_0200", False),
        ("longeval_lines_ppl", "prompt_tokens_0200", None),
        ("longeval_lines_acc", "acc_0200", True),
        ("longeval_lines_acc", "skipped_0200", False),
    ],
)
def test_directions_of_names_built_per_length_or_configuration(name, metric, direction):
    assert CLASSES[name].direction_of(metric) is direction


@pytest.mark.parametrize("name", sorted(BARE))
def test_every_task_declares_its_report_section(name):
    """The record the report card reads (configs.<task>.metadata.longctx_report): headlines among the task's
    metrics, pictures among the report's drawers."""
    record = CLASSES[name].REPORT.record()
    assert set(record) == {"section", "title", "lead", "order", "headlines", "settings", "pictures"}
    assert record["title"] and record["lead"] and isinstance(record["order"], int)
    declared = set(_bare_task(CLASSES[name], **BARE[name]).metric_declarations())
    assert record["headlines"] and all(len(h) == 2 and h[0] in declared and h[1] for h in record["headlines"])
    assert set(record["pictures"]) <= DRAWERS and record["settings"]


def test_sections_are_shared_only_by_a_group_and_ordered():
    sections = {}
    for cls in CLASSES.values():
        sections.setdefault(cls.REPORT.section, set()).add(cls)
    for section, members in sections.items():
        assert len(members) == 1 or {c.GROUP for c in members} == {section}, section
        assert len({(c.REPORT.title, c.REPORT.order, c.REPORT.pictures) for c in members}) == 1, section
    orders = [next(iter(m)).REPORT.order for m in sections.values()]
    assert len(set(orders)) == len(orders)


def test_exports_declare_their_columns_and_the_key_token_view():
    exporting = {name for name, cls in CLASSES.items() if cls.EXPORT_COLUMNS is not None}
    assert exporting == {"longppl_govreport", "retrieval_gain", "longeval_lines_ppl"}
    assert {name: cls.EXPORT_VIEW for name, cls in CLASSES.items() if cls.EXPORT_VIEW} == {
        "longppl_govreport": "key_tokens"
    }
    assert {"token_id", "key", "lsd", "evaluator_lsd"} <= set(CLASSES["longppl_govreport"].EXPORT_COLUMNS)


def test_the_preflight_resources_are_each_class_own():
    s = CLASSES["retrieval_gain_map"].resolve_settings({})
    assert [(r.kind, r.name) for r in CLASSES["retrieval_gain_map"].hub_resources(s)] == [
        ("dataset", "emozilla/govreport-test-tokenized"),
        ("tokenizer", "NousResearch/Llama-2-7b-hf"),
    ]
    assert CLASSES["longeval_lines_acc"].hub_resources(CLASSES["longeval_lines_acc"].resolve_settings({})) == []
