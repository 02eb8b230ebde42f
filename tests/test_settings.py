"""Declared settings (``settings.py``): upper bounds of counts and lengths, and the error that names them."""

from __future__ import annotations

import pytest

from lm_eval_longctx.settings import Setting, SettingsError, integer, integer_list


def test_a_count_above_its_bound_is_an_error_naming_the_key_the_bound_and_the_way_out():
    cases = Setting("num_cases", integer(1, 10_000), 50, "cases per configuration")
    assert cases.parse("10000", "longeval_lines") == 10_000
    with pytest.raises(SettingsError) as err:
        cases.parse(10**12, "longeval_lines")
    assert str(err.value) == (
        "longeval_lines: setting 'num_cases' = 1000000000000 is above its upper bound; it must be a whole number >= 1 "
        "and <= 10000. The bound lies far beyond any real run and stops a mistyped value before any work: give "
        "num_cases a value within it (a larger run is several runs)."
    )
    with pytest.raises(SettingsError, match="'num_cases' = 0 is not allowed; it must be a whole number >= 1 and"):
        cases.parse(0, "longeval_lines")  # below: the usual message
    assert integer(1, 10_000).upper_bound == 10_000 and integer(1).upper_bound is None


def test_a_list_bounds_its_entries_and_their_number():
    lengths = Setting("lengths", integer_list(1, 100, max_items=3), None, "copy lengths", optional=True)
    assert lengths.parse("30, 10,30", "forgetting_curve") == [10, 30]
    assert lengths.kind.describe == "list of at most 3 whole numbers >= 1 and <= 100"
    with pytest.raises(SettingsError, match=r"'lengths' = \[10, 101\] is above its upper bound; it must be a list of"):
        lengths.parse([10, 101], "forgetting_curve")
    with pytest.raises(
        SettingsError, match=r"it must be a list of at most 3 whole numbers .* \(it has 4\) \(or null\)"
    ):
        lengths.parse([1, 2, 3, 4], "forgetting_curve")
    with pytest.raises(SettingsError, match=r"'lengths' = \[0\] is not allowed; it must be a list of at most 3"):
        lengths.parse([0], "forgetting_curve")


def _declaration_with_presets():
    from lm_eval_longctx.settings import Declaration, choice

    return Declaration(
        "test_presets_owner",
        [
            Setting("preset", choice("model", "ci", "paper"), "model", "the preset"),
            Setting("num_docs", integer(1, 100), 50, "documents"),
            Setting("doc_tokens", integer(1, 10_000), None, "tokens", optional=True),
        ],
        metadata_keys=False,
        presets={"ci": {"num_docs": 10}, "paper": {"doc_tokens": 8192, "num_docs": 50}},
    )


def test_a_preset_gives_its_values_a_given_setting_wins_and_the_sources_say_which():
    from lm_eval_longctx.settings import DEFAULT, GIVEN

    declaration = _declaration_with_presets()
    s = declaration.parse({"preset": "ci"})
    assert s["num_docs"] == 10 and s["doc_tokens"] is None
    assert s.sources == {"preset": GIVEN, "num_docs": "preset ci", "doc_tokens": DEFAULT}
    s = declaration.parse({"preset": "ci", "num_docs": 3})
    assert s["num_docs"] == 3 and s.sources["num_docs"] == GIVEN and s.explicit == {"preset", "num_docs"}
    assert declaration.parse({})["num_docs"] == 50  # the default preset gives nothing
    assert declaration.parse({"preset": "paper"})["doc_tokens"] == 8192
    with pytest.raises(SettingsError, match="'preset' = 'cii' is not allowed; it must be one of model, ci, paper"):
        declaration.parse({"preset": "cii"})


def test_a_preset_is_checked_when_declared_and_listed_in_the_docs_table():
    from lm_eval_longctx.settings import Declaration, choice

    with pytest.raises(SettingsError, match="preset ci: setting 'num_docs' = 0 is not allowed"):
        Declaration(
            "bad_preset_owner",
            [Setting("preset", choice("model", "ci"), "model", "p"), Setting("num_docs", integer(1), 5, "d")],
            metadata_keys=False,
            presets={"ci": {"num_docs": 0}},
        )
    with pytest.raises(ValueError, match="undeclared settings"):
        Declaration(
            "bad_preset_owner",
            [Setting("preset", choice("model", "ci"), "model", "p")],
            metadata_keys=False,
            presets={"ci": {"num_docs": 1}},
        )
    table = _declaration_with_presets().markdown_table().splitlines()
    assert table[0] == "| setting | allowed | default | preset `ci` | preset `paper` | meaning |"
    assert table[3] == "| `num_docs` | whole number >= 1 and <= 100 | `50` | `10` | `50` | documents |"
    assert table[4].startswith("| `doc_tokens` | whole number >= 1 and <= 10000, or null | `null` |  | `8192` |")
