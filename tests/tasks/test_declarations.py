"""The tasks' declared settings (``tasks/declarations.py``): every count and length has an upper bound, generous for
real runs, that stops a mistyped value when the settings are parsed."""

from __future__ import annotations

import pytest

from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import declarations, forgetting_curve, longeval, longppl

WHOLE_NUMBER_SETTINGS = [
    (declaration, setting)
    for declaration in declarations.task_declarations().values()
    for setting in declaration.settings
    if setting.kind.describe.startswith(("whole number", "list of"))
]
# percents: 0..100 is what a depth means, not a bound chosen for size
BOUNDED_BY_MEANING = {("retrieval_gain_map", "depths")}


def test_every_count_and_length_has_an_upper_bound():
    unbounded = [f"{d.owner}.{s.name}" for d, s in WHOLE_NUMBER_SETTINGS if s.kind.upper_bound is None]
    assert not unbounded
    assert {s.name for _, s in WHOLE_NUMBER_SETTINGS} >= {
        "num_cases",
        "samples_per_length",
        "num_docs",
        "num_lines",
        "lengths",
        "num_lengths",
        "n_queries",
        "anchors_per_cell",
        "depths",
        "context_lengths",
    }


@pytest.mark.parametrize(
    ("declaration", "setting"), WHOLE_NUMBER_SETTINGS, ids=[f"{d.owner}.{s.name}" for d, s in WHOLE_NUMBER_SETTINGS]
)
def test_an_absurd_value_is_refused_when_parsed_and_the_defaults_are_far_below_the_bound(declaration, setting):
    absurd = 10**30 if setting.kind.describe.startswith("whole number") else [1, 10**30]
    with pytest.raises(SettingsError, match=rf"^{declaration.owner}: setting '{setting.name}' = .* above its upper"):
        declaration.parse({setting.name: absurd})
    default = setting.default
    largest = max(default) if isinstance(default, list) else default
    if largest and (declaration.owner, setting.name) not in BOUNDED_BY_MEANING:
        assert setting.kind.upper_bound >= 100 * largest  # the papers' sizes are defaults: a hundred times fits


def test_the_bounds_fit_the_papers_runs():
    """LongChat's 1,350 lines and 50 cases, the forgetting curve's 32 lengths, GovReport's 973 test documents, a
    10M-token context: all within the bounds, with room."""
    assert longeval.SETTINGS.parse({"num_lines": [200, 1350, 100_000], "num_cases": 5_000})
    curve = forgetting_curve.SETTINGS.parse({"num_lengths": 1000, "max_len": 5_000_000, "samples_per_length": 1000})
    assert curve["max_len"] == 5_000_000
    assert longppl.SETTINGS.parse({"num_docs": 973, "trunc_len": 10_000_000})["num_docs"] == 973


def test_a_setting_that_would_act_on_nothing_is_refused(tmp_path):
    """A recorded setting must have acted: an evaluator's loading settings beside evaluator: self, a revision beside
    a local evaluator folder or a local dataset folder."""
    from lm_eval_longctx.settings import SettingsError
    from lm_eval_longctx.tasks import base, longppl

    for key, value in (("evaluator_dtype", "float16"), ("evaluator_device", "cpu"), ("evaluator_revision", "x")):
        with pytest.raises(SettingsError, match=f"{key} has no effect with evaluator: self"):
            longppl.resolve_settings({"evaluator": "self", key: value})
    with pytest.raises(SettingsError, match="evaluator_revision has no effect on the local folder"):
        longppl.resolve_settings({"evaluator": str(tmp_path), "evaluator_revision": "main"})
    inert = base.inert_settings({"dataset_path": str(tmp_path), "dataset_revision": "main"}, {})
    assert "is a local folder" in inert["dataset_revision"]
    assert base.inert_settings({"dataset_path": "org/data", "dataset_revision": "main"}, {}) == {}


def test_the_govreport_tasks_end_with_one_block_and_share_one_ci_preset():
    from lm_eval_longctx.tasks import retrieval_gain, retrieval_gain_map

    batch = declarations.without_batch_size_setting()
    names = [s.name for s in declarations.govreport_task_settings(batch)]
    assert names[names.index(batch.name) - 1] == declarations.long_pass_settings()[-1].name
    assert "export_tokens" in names and names[-len(declarations.govreport_settings()) :] == [
        s.name for s in declarations.govreport_settings()
    ]
    assert "export_tokens" not in [s.name for s in declarations.govreport_task_settings(batch, export_tokens=False)]
    for declaration in (longppl.SETTINGS, retrieval_gain.SETTINGS, retrieval_gain_map.SETTINGS):
        ci = declaration.presets["ci"]
        assert {k: ci[k] for k in declarations.GOVREPORT_CI_PRESET} == declarations.GOVREPORT_CI_PRESET
    assert longppl.SETTINGS.presets["ci"]["evaluator"] == "self"
