"""report/card/settings_box.py: the settings on the report card: values as text and HTML (hashes shortened, long
values cut, whole on hover), each task's compact table (declared keys, then those that differ, highlighted), and
the box naming what differs between each run and the first (or, in a checkpoint series, the one before). The whole
page is tested in tests/report/card/test_report.py."""

from __future__ import annotations

import pytest

from lm_eval_longctx.report.card import settings_box
from lm_eval_longctx.report.card.card_runs import CardRun
from lm_eval_longctx.report.comparability import DOCS_KEY, VERSION_KEY
from lm_eval_longctx.report.results import Run


def card_run(label: str, settings: dict, n_docs: int = 50, version: int = 1, step: int | None = None) -> CardRun:
    """A run of one task ``t`` whose signature is its flat settings, version and documents (as the gate's)."""
    run = Run({}, {"t": settings}, {"t": version}, {"t": n_docs}, label)
    run.compared = {"t": {**settings, VERSION_KEY: version, DOCS_KEY: n_docs}}
    return CardRun(label, run, {}, f"/runs/{label}", step=step)


@pytest.mark.parametrize(
    "value, text",
    [
        ([64, 128], "64, 128"),
        ([], "[]"),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (1e-05, "1e-05"),
        (0.1, "0.1"),
        ([None, [1.5, "a"]], "null, 1.5, a"),
        ("x", "x"),
    ],
)
def test_setting_text(value, text):
    assert settings_box.setting_text(value) == text


def test_a_setting_value_as_html():
    assert settings_box.setting_value(None, missing=True) == '<span class="muted">absent</span>'
    assert settings_box.setting_value(None) == "<code>null</code>"  # recorded as null: not absent
    digest = "0123456789abcdef" * 4  # a sha256 hex digest: its first 12 characters, the whole on hover
    assert settings_box.setting_value(digest) == f'<code title="{digest}">{digest[:12]}…</code>'
    assert settings_box.setting_value("<b>") == "<code>&lt;b&gt;</code>"
    long = "x" * (settings_box.SHOWN_CHARACTERS + 1)
    shown = settings_box.setting_value(long)
    assert shown == f'<code title="{long}">{"x" * (settings_box.SHOWN_CHARACTERS - 1)}…</code>'
    exact = "y" * settings_box.SHOWN_CHARACTERS
    assert settings_box.setting_value(exact) == f"<code>{exact}</code>"


def test_one_runs_settings_are_a_grid_of_the_declared_keys_then_every_recorded_one():
    run = card_run("a", {"trunc_len": 512, "data": {"dataset": "d"}, "alpha": 2.0})
    html = settings_box.settings_table([run], "t", shown=["trunc_len", "missing_key"], differing=set())
    compact, everything = html.split("<details>")
    assert compact.startswith("<h3>Settings of t</h3><dl") and "<table" not in compact
    assert "<dt><code>trunc_len</code></dt><dd><code>512</code></dd>" in compact
    assert "missing_key" not in compact and "alpha" not in compact  # declared keys only, when none differ
    assert "<dt>documents scored</dt><dd><code>50</code></dd>" in compact
    assert "all 3 recorded settings of t" in everything
    assert "<dt><code>data.dataset</code></dt><dd><code>d</code></dd>" in everything  # flattened
    assert settings_box.settings_table([run], "other", ["trunc_len"], set()) == ""


def test_runs_that_agree_are_one_grid_and_runs_that_differ_a_table_with_the_differences_highlighted():
    a, b = card_run("a", {"trunc_len": 512}), card_run("b", {"trunc_len": 512})
    html = settings_box.settings_table([a, b], "t", ["trunc_len"], set())
    assert '<p class="muted">The same in all 2 runs:</p>' in html and "<table" not in html.split("<details>")[0]
    c = card_run("c", {"trunc_len": 512, "alpha": 1.0}, n_docs=40)
    differing = {"alpha", DOCS_KEY}
    compact = settings_box.settings_table([a, c], "t", ["trunc_len"], differing).split("<details>")[0]
    assert "<th>setting</th><th>a</th><th>c</th>" in compact
    # the declared key first, then the differing ones; the documents row highlighted, the version row not
    assert compact.index("trunc_len") < compact.index("alpha")
    assert '<tr class=differ><th><code>alpha</code></th><td><span class="muted">absent</span></td>' in compact
    assert "<tr class=differ><th>documents scored</th><td><code>50</code></td><td><code>40</code></td>" in compact
    assert "<tr><th>task version</th>" in compact
    assert DOCS_KEY not in compact  # named as a row of its own, not as a key


def test_each_run_is_compared_with_the_first_or_in_a_series_with_the_one_before():
    runs = [card_run("a", {"k": 1}), card_run("b", {"k": 2}), card_run("c", {"k": 2})]
    assert settings_box.settings_diffs(runs) == {("b", "a"): {"t": ["k"]}, ("c", "a"): {"t": ["k"]}}
    series = [card_run(label, {"k": k}, step=s) for label, k, s in (("a", 1, 100), ("b", 2, 200), ("c", 2, 300))]
    assert settings_box.settings_diffs(series) == {("b", "a"): {"t": ["k"]}}


def test_the_box_names_each_difference_with_both_values():
    runs = [card_run("a", {"k": 1}), card_run("b", {"k": [1, 2]}, version=2)]
    assert settings_box.settings_differ_box(runs[:1], {}) == ""
    assert "Same settings in every run" in settings_box.settings_differ_box(runs, {})
    box = settings_box.settings_differ_box(runs, settings_box.settings_diffs(runs))
    assert 'id="settings-differ"' in box
    item = "<li><strong>t</strong>, a → b: <code>k</code>: <code>1</code> → <code>1, 2</code>; "
    assert item + f"<code>{VERSION_KEY.replace('<', '&lt;').replace('>', '&gt;')}</code>" in box
