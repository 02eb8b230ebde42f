"""LongEval lines (``tasks/longeval.py``): a bound on the number of cases, the cases generated as lm-eval reads them
(``--limit k`` generates k), and the checks of its settings and generation options before the model loads."""

from __future__ import annotations

import pytest

from lm_eval_longctx.data import longeval_cases
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import longeval, run_options
from tests.harness_utils import refuse_model_loading, run_task


@pytest.fixture
def generated(monkeypatch):
    """The (num_lines, case_index) of every case generated from now on."""
    calls = []
    generate = longeval_cases.generate_case

    def counted(num_lines, case_index, *args):
        calls.append((num_lines, case_index))
        return generate(num_lines, case_index, *args)

    longeval._generated_case.cache_clear()
    monkeypatch.setattr(longeval_cases, "generate_case", counted)
    yield calls
    longeval._generated_case.cache_clear()


def test_a_number_of_cases_above_its_bound_is_refused_when_parsed():
    with pytest.raises(SettingsError, match=r"'num_cases' = 1000000000000 is above its upper bound; .*<= 10000\."):
        longeval.resolve_settings({"num_cases": 10**12})
    with pytest.raises(SettingsError, match=r"'num_lines' = \[200, 1000000000\] is above its upper bound"):
        longeval.resolve_settings({"num_lines": [200, 10**9]})


def test_cases_are_generated_when_read_in_the_harness_order(generated):
    n_cases, case = longeval.case_reader(longeval.resolve_settings({"preset": "paper", "num_cases": 10_000}))
    assert n_cases == 13 * 10_000 and generated == []
    assert [case(i).num_lines for i in range(3)] == [200, 300, 400]
    assert generated == [(200, 0), (300, 0), (400, 0)]
    assert case(13).case_index == 1 and case(13).num_lines == 200
    small = longeval.resolve_settings({"num_lines": [11, 4], "num_cases": 3})
    n_cases, case = longeval.case_reader(small)
    assert [case(i) for i in range(n_cases)] == longeval_cases.interleave(longeval_cases.generate_cases([4, 11], 3))


@pytest.mark.integration
def test_limit_generates_only_the_cases_it_evaluates(generated, model_dirs):
    res = run_task("longeval_lines_ppl", model_dirs["a"], {"num_lines": [4, 11], "num_cases": 10_000}, limit=2)
    assert res["n-samples"]["longeval_lines_ppl"] == {"original": 20_000, "effective": 2}
    assert sorted(set(generated)) == [(4, 0), (11, 0)]
    data = res["configs"]["longeval_lines_ppl"]["metadata"]["longctx_settings"]["data"]
    assert data["cases_per_num_lines"] == {"4": 1, "11": 1}  # the cases evaluated


@pytest.mark.integration
def test_settings_and_generation_options_are_checked_before_the_model_loads(monkeypatch, model_dirs, tmp_path):
    refuse_model_loading(monkeypatch)
    small = {"num_lines": [4], "num_cases": 1}
    with pytest.raises(SettingsError, match=r"'num_cses'.*Did you mean 'num_cases'"):
        run_task("longeval_lines_ppl", model_dirs["a"], {**small, "num_cses": 1})
    with pytest.raises(SettingsError, match="setting 'seed' does nothing here: testcases"):
        run_task("longeval_lines", model_dirs["a"], {"testcases": str(tmp_path / "4_lines.jsonl"), "seed": 3})
    with pytest.raises(run_options.UnsupportedOptionError, match=r"generation setting\(s\) top_z .* Leave them out"):
        run_task("longeval_lines_acc", model_dirs["a"], small, gen_kwargs="top_z=3,max_gen_toks=2")
    with pytest.raises(run_options.UnsupportedOptionError, match="--num_fewshot 3 does not apply"):
        run_task("longeval_lines_acc", model_dirs["a"], small, num_fewshot=3)


# ------------------------------------------------------------------ sizing: max_seq_lengths and the window


def test_lines_fill_each_length_with_room_for_the_answer():
    # a prompt of N lines: 100 tokens of header and question, 10 a line
    counted = []

    def prompt_tokens(n):
        counted.append(n)
        return 100 + 10 * n

    lines, notes = longeval.num_lines_for_lengths([1000, 2100], prompt_tokens, room=100)
    assert lines == [80, 190] and not notes  # 100 + 10 N <= L - 100
    with pytest.raises(SettingsError, match="a length of 150 tokens holds no line"):
        longeval.num_lines_for_lengths([150, 1000], prompt_tokens, room=100)
    lines, notes = longeval.num_lines_for_lengths([150, 1000], prompt_tokens, room=100, drop_short=True)
    assert lines == [80] and "left out" in notes[0]


def test_lines_are_lowered_until_the_longest_prompt_fits():
    # a fit from 16 and 64 lines that underestimates longer prompts: the size found is lowered until it fits
    def prompt_tokens(n):
        return 100 + 10 * n + (n // 10) ** 2

    [n], _ = longeval.num_lines_for_lengths([2100], prompt_tokens, room=100)
    assert prompt_tokens(n) <= 2000 < prompt_tokens(n + 1) + 20


def test_lines_for_a_real_tokenizer_are_about_each_length():
    from transformers import AutoTokenizer

    from lm_eval_longctx.demo.model import packaged_model_dir

    tokenizer = AutoTokenizer.from_pretrained(packaged_model_dir())

    def prompt_tokens(n):
        prompts = [longeval._generated_case(n, i, 0, "reference").prompt for i in range(4)]
        return max(len(tokenizer(p)["input_ids"]) for p in prompts)

    lines, _ = longeval.num_lines_for_lengths([1024, 4096], prompt_tokens, room=100)
    for n, length in zip(lines, [1024, 4096]):
        assert length - 100 - 40 <= prompt_tokens(n) <= length - 100  # within about a line of the length
