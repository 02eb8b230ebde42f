"""What every task shares (``tasks/base.py``): documents built as lm-eval reads them, and the checks that need no model
made before lm-eval loads it (``LongContextTask.check_before_model``, asked by the discovery hook)."""

from __future__ import annotations

import pytest

from lm_eval_longctx.data import export_files
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import run_options
from lm_eval_longctx.tasks.base import LazyDocuments
from tests.harness_utils import refuse_model_loading, run_task


def test_lazy_documents_build_only_what_is_read():
    built = []

    def build(i):
        built.append(i)
        return {"doc_id": i, "x": 2 * i}

    docs = LazyDocuments(10**12, build, ("doc_id", "x"))
    assert len(docs) == 10**12 and list(docs.features) == ["doc_id", "x"]
    assert docs[0] == {"doc_id": 0, "x": 0} and docs[-1]["doc_id"] == 10**12 - 1
    assert [d["x"] for d in docs[2:5]] == [4, 6, 8]
    first = iter(docs)
    assert [next(first)["doc_id"] for _ in range(3)] == [0, 1, 2]
    assert built == [0, 10**12 - 1, 2, 3, 4, 0, 1, 2]
    with pytest.raises(IndexError):
        docs[10**12]


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

    from lm_eval_longctx.harness import glue

    def build(self, *args, **kwargs):
        raise AssertionError("lm-eval built the model before the error")

    monkeypatch.setattr(DummyLM, "__init__", build)
    with pytest.raises(glue.UnsupportedModelError, match="the DummyLM backend does not provide. Use --model hf"):
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
