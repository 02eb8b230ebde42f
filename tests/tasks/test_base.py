"""What every task shares (``tasks/base.py``): documents built as lm-eval reads them, the checks that need no model
made before lm-eval loads it (``LongContextTask.check_before_model``, asked by the discovery hook), and what each
task class declares about itself: its registry entry, its metrics' directions, its report-card section and its
per-token export (read from the classes, without running the harness)."""

from __future__ import annotations

import pytest

from lm_eval_longctx.data import export_files
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import base, run_options
from tests.harness_utils import refuse_model_loading, run_task

ABOVE = "is above its upper bound"
BEFORE_THE_MODEL = [
    ("longppl_govreport", {"trunc_len": 0}, {}, SettingsError, "'trunc_len' = 0 is not allowed"),
    ("longppl_govreport", {"evaluator_device": "gpu"}, {}, SettingsError, "'evaluator_device' = 'gpu' is not allowed"),
    ("longppl_govreport", {"trunc_lenn": 8}, {}, SettingsError, "Did you mean 'trunc_len'"),
    ("retrieval_gain", {"n_queries": 10**12}, {}, SettingsError, f"'n_queries' = 1000000000000 {ABOVE}"),
    ("retrieval_gain", {"anchor_min": 0.9, "anchor_max": 0.1}, {}, SettingsError, "need anchor_min <= anchor_max"),
    ("retrieval_gain_map", {"depths": [0, 150]}, {}, SettingsError, f"'depths' = \\[0, 150\\] {ABOVE}"),
    ("retrieval_gain_map", {"anchors_per_cell": "two"}, {}, SettingsError, "'anchors_per_cell' = 'two' is not"),
    ("forgetting_curve", {"samples_per_length": 10**12}, {}, SettingsError, f"'samples_per_length' = 10+ {ABOVE}"),
    ("forgetting_curve", {"samples_per_length": "x"}, {}, SettingsError, "'samples_per_length' = 'x' is not allowed"),
    ("longeval_lines", {"num_cases": 10**12}, {}, SettingsError, f"'num_cases' = 1000000000000 {ABOVE}"),
    ("longctx", {"num_lines": [200, 10**9]}, {}, SettingsError, f"'num_lines' = \\[200, 1000000000\\] {ABOVE}"),
    ("forgetting_curve", {"data_files": "a", "dataset_split": "x"}, {}, SettingsError, "'dataset_split' does nothing"),
    ("retrieval_gain", {"data_files": "a", "dataset_path": "b/c"}, {}, SettingsError, "'dataset_path' does nothing"),
    ("longctx", {"preset": "cii"}, {}, SettingsError, "'preset' = 'cii' is not allowed; it must be one of model"),
    ("longctx", {"max_seq_lengths": [0, 4096]}, {}, SettingsError, "'max_seq_lengths' = \\[0, 4096\\] is not allowed"),
    ("longppl_govreport", {"max_seq_lengths": [2048], "trunc_len": 4096}, {}, SettingsError, "not below the docum"),
    ("retrieval_gain", {"embedded_corpus": True, "data_files": "a"}, {}, SettingsError, "both name the documents"),
    ("forgetting_curve", {"embedded_corpus": True, "dataset_split": "x"}, {}, SettingsError, "and dataset_split both"),
    ("retrieval_gain", {"preset": "ci", "min_tokens": 5}, {}, SettingsError, "'min_tokens' does nothing here: embed"),
    ("retrieval_gain", {}, {"num_fewshot": 2}, run_options.UnsupportedOptionError, "--num_fewshot 2 does not apply"),
    ("longeval_lines", {}, {"num_fewshot": 1}, run_options.UnsupportedOptionError, "--num_fewshot 1 does not apply"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("task", "metadata", "options", "error", "match"), BEFORE_THE_MODEL)
def test_wrong_settings_and_options_stop_the_run_before_the_model_loads(
    monkeypatch, model_dirs, task, metadata, options, error, match
):
    refuse_model_loading(monkeypatch)
    with pytest.raises(error, match=match):
        run_task(task, model_dirs["a"], metadata, **options)


@pytest.mark.integration
def test_a_foreign_export_folder_stops_the_run_before_the_model_loads(monkeypatch, model_dirs, tmp_path):
    refuse_model_loading(monkeypatch)
    (tmp_path / "longeval_lines_ppl").mkdir()
    (tmp_path / "longeval_lines_ppl" / "notes.txt").write_text("mine")
    with pytest.raises(export_files.ExportFolderError, match="longeval_lines_ppl"):
        run_task("longeval_lines_ppl", model_dirs["a"], {"export_tokens": str(tmp_path)})


@pytest.mark.integration
def test_a_backend_that_cannot_serve_the_tasks_is_refused_before_it_is_built(monkeypatch, model_dirs):
    from lm_eval.models.dummy import DummyLM

    from lm_eval_longctx.harness import evaluated_model

    def build(self, *args, **kwargs):
        raise AssertionError("lm-eval built the model before the error")

    monkeypatch.setattr(DummyLM, "__init__", build)
    with pytest.raises(
        evaluated_model.UnsupportedModelError, match="the DummyLM backend does not provide. Use --model hf"
    ):
        run_task("retrieval_gain", model_dirs["a"], {}, model="dummy", model_args={})


@pytest.mark.integration
def test_a_key_no_task_of_the_run_takes_is_an_error_before_the_model(model_dirs, monkeypatch):
    """Every task of the run is ours: a metadata key none of them takes would be silently ignored; it is refused before
    the model loads (listed in other_tasks_keys, it is let through: the model then loads, which fails here)."""
    refuse_model_loading(monkeypatch)
    with pytest.raises(SettingsError, match=r"'num_samples': no task of this run takes them"):
        run_task("retrieval_gain", model_dirs["a"], {"num_samples": 5})
    with pytest.raises(AssertionError, match="lm-eval loaded the model"):
        run_task("retrieval_gain", model_dirs["a"], {"num_samples": 5, "other_tasks_keys": ["num_samples"]})


# ------------------------------------------------------------------ what each task class declares


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


def test_task_names_come_from_the_registry_in_report_order():
    """Every registered task class is a result task once, in its report section's order; lm_eval's --tasks names
    each class's group (or the task itself) once, in the same order."""
    classes = base.suite_tasks()
    results = base.suite_task_names()
    assert sorted(results) == sorted(classes)
    assert [classes[t].REPORT.order for t in results] == sorted(classes[t].REPORT.order for t in results)
    harness = base.suite_run_names()
    assert len(set(harness)) == len(harness)
    assert harness == tuple(dict.fromkeys(classes[t].GROUP or t for t in results))
    assert any(classes[t].GROUP for t in results)  # a group (longeval_lines) stands for its tasks
