"""LongEval "lines" cases (``data/longeval_cases.py``): the generator against LongChat's files, the loader (strict,
and with Unicode line breaks inside a string), LongChat's parse of the answer; on a nearly full disk, case files
whole or not there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx.data import longeval_cases, longeval_words
from lm_eval_longctx.settings import SettingsError
from tests.tiny import writes_cut_at

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference-data" / "longeval-lines"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference data not present (fresh clone)")
# Unicode line breaks that JSON allows unescaped inside a string (str.splitlines would split on them)
LINE_BREAKS_IN_TEXT = "first\u2028second\u2029third\x85fourth \u2028"

# A name, its number: the structure every prompt shares, whatever the words and numbers
_RECORD = re.compile(r"^line ([^:\n]+): REGISTER_CONTENT is <([1-9][0-9]{0,4})>$")


def shape(prompt: str) -> str:
    """The prompt with every line name and number replaced by placeholders."""
    out = []
    for line in prompt.split("\n"):
        if _RECORD.match(line):
            line = "line NAME: REGISTER_CONTENT is <N>"
        out.append(re.sub(r"in line .+\? I need", "in line NAME? I need", line))
    return "\n".join(out)


def split_name(name: str) -> tuple[str, str]:
    """Adjective and noun of a reference name (the rule documented in longeval_words)."""
    for adj in longeval_words.HYPHENATED_ADJECTIVES:
        if name.startswith(adj + "-"):
            return adj, name[len(adj) + 1 :]
    return tuple(name.split("-", 1))


def test_cases_that_do_not_fit_leave_nothing(tmp_path):
    cases = longeval_cases.generate_cases([20], num_cases=2)
    with pytest.raises(OSError), writes_cut_at(500):
        longeval_cases.write_jsonl(cases, tmp_path / "cases.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_generator_is_deterministic_and_seeded():
    a = longeval_cases.generate_cases([5, 9], 3, seed=7)
    assert a == longeval_cases.generate_cases([5, 9], 3, seed=7)
    # a case depends on (seed, N, index) only: more cases or other configurations leave it unchanged
    assert longeval_cases.generate_case(9, 2, seed=7) == a[5]
    assert longeval_cases.generate_cases([9, 30], 4, seed=7)[2] == a[5]
    assert longeval_cases.generate_case(9, 2, seed=8).prompt != a[5].prompt
    assert len({c.prompt for c in a}) == len(a)


def test_generated_cases_are_consistent_and_names_unique():
    for n in (1, 6, 40):
        for case in longeval_cases.generate_cases([n], 3, seed=1):
            parsed = longeval_cases.parse_prompt(case.prompt)
            assert len(parsed.names) == n == case.num_lines
            assert len(set(parsed.names)) == n
            adjs, nouns = zip(*(split_name(x) for x in parsed.names))
            assert len(set(adjs)) == n and len(set(nouns)) == n  # no word twice, as LongChat draws
            assert set(adjs) <= set(longeval_words.ADJECTIVES) and set(nouns) <= set(longeval_words.NOUNS)
            assert parsed.names[case.position] == case.name == parsed.asked_name
            assert parsed.values[case.position] == case.expected_number
            assert case.correct_line == f"line {case.name}: REGISTER_CONTENT is <{case.expected_number}>\n"
            assert all(1 <= v <= 50000 for v in parsed.values)
    # past the adjective list's size names stay unique (distinct pairs)
    big = longeval_cases.generate_case(len(longeval_words.ADJECTIVES) + 5, 0)
    names = longeval_cases.parse_prompt(big.prompt).names
    assert len(set(names)) == len(names)
    # LongChat's trailing-space rule by default; either way on request
    assert longeval_cases.generate_case(680, 0).prompt.endswith("I need the number. ")
    assert longeval_cases.generate_case(700, 0).prompt.endswith("I need the number.")
    assert longeval_cases.generate_case(5, 0, trailing_space=False).prompt.endswith("number.")
    assert longeval_cases.generate_case(900, 0, trailing_space=True).prompt.endswith("number. ")


def test_numbers_are_uniform_over_1_to_50000():
    values = np.concatenate(
        [longeval_cases.parse_prompt(c.prompt).values for c in longeval_cases.generate_cases([500], 20, seed=3)]
    )
    assert values.min() >= 1 and values.max() <= 50000
    # 10000 draws: mean 25000.5, sd of the mean ~144; deciles ~ 1000 each
    assert abs(values.mean() - 25000.5) < 720
    counts = np.histogram(values, bins=10, range=(0.5, 50000.5))[0]
    assert counts.min() > 850 and counts.max() < 1150


@needs_reference
@pytest.mark.parametrize(
    "filename, num_lines, trailing", [("200_lines.jsonl", 200, " "), ("1350_lines.first5.jsonl", 1350, "")]
)
def test_generated_prompts_match_longchat_files_line_by_line(filename, num_lines, trailing):
    path = REFERENCE / filename
    records = [json.loads(line) for line in path.read_text().splitlines()]
    generated = longeval_cases.generate_cases([num_lines], len(records), seed=0)
    for ref, gen in zip(records, generated):
        # every field LongChat writes (the older files also have token_size and prompt_length: other tokenizers)
        assert set(gen.to_record()) == set(ref) - {"token_size", "prompt_length"}
        ref_lines, gen_lines = shape(ref["prompt"]).split("\n"), shape(gen.prompt).split("\n")
        assert len(gen_lines) == len(ref_lines) == num_lines + 4  # header, blank, lines, blank, question
        for k, (r, g) in enumerate(zip(ref_lines, gen_lines)):
            assert g == r, f"line {k}: {g[:80]!r} != {r[:80]!r}"
        assert ref["prompt"][-len("number.") - len(trailing) :] == "number." + trailing
        assert gen.prompt.endswith("number." + trailing)
        for rec in (ref, gen.to_record()):  # both satisfy the same record invariants
            name, pos = rec["random_idx"]
            line = rec["prompt"].split("\n")[2 + pos]
            assert line + "\n" == rec["correct_line"] and f"<{rec['expected_number']}>" in line
            assert line.startswith(f"line {name}: ") and rec["num_lines"] == num_lines


@needs_reference
def test_longchat_files_load_and_their_words_are_in_the_lists(tmp_path):
    cases = longeval_cases.load_testcases(
        [str(REFERENCE / "200_lines.jsonl"), str(REFERENCE / "1350_lines.first5.jsonl")]
    )
    assert [c.num_lines for c in cases] == [200] * 50 + [1350] * 5
    assert cases[0].name == "torpid-kid" and cases[0].position == 7 and cases[0].expected_number == 2416
    # a folder in LongChat's layout, capped per file
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "200_lines.jsonl").write_text((REFERENCE / "200_lines.jsonl").read_text())
    from_folder = longeval_cases.load_testcases(str(folder), [200], max_cases=3)
    assert [c.to_record() for c in from_folder] == [c.to_record() for c in cases[:3]]
    assert from_folder[0].source == str(folder / "200_lines.jsonl")
    # the 200-line file's adjective-noun names: no word twice in a prompt, every word in our lists
    for case in cases[:50]:
        adjs, nouns = zip(*(split_name(x) for x in longeval_cases.parse_prompt(case.prompt).names))
        assert len(set(adjs)) == 200 and len(set(nouns)) == 200
        assert set(adjs) <= set(longeval_words.REFERENCE_ADJECTIVES) and set(nouns) <= set(longeval_words.NOUNS)


def test_loader_round_trips_and_refuses_inconsistent_records(tmp_path):
    cases = longeval_cases.generate_cases([3, 7], 2, seed=5)
    path = tmp_path / "mixed.jsonl"
    longeval_cases.write_jsonl(cases, path)
    loaded = longeval_cases.load_testcases(str(path))
    assert [(c.prompt, c.name, c.position, c.expected_number) for c in loaded] == [
        (c.prompt, c.name, c.position, c.expected_number) for c in cases
    ]
    # a URL goes through fsspec (http(s) through urllib): a file:// URL stands in for a remote one
    assert [c.prompt for c in longeval_cases.load_testcases(path.as_uri())] == [c.prompt for c in cases]
    bad = cases[0].to_record() | {"expected_number": cases[0].expected_number + 1}
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(longeval_cases.TestCaseFormatError, match="not expected_number"):
        longeval_cases.load_testcases(str(tmp_path / "bad.jsonl"))
    wrong_pos = cases[0].to_record() | {"random_idx": [cases[0].name, (cases[0].position + 1) % 3]}
    (tmp_path / "pos.jsonl").write_text(json.dumps(wrong_pos) + "\n")
    with pytest.raises(longeval_cases.TestCaseFormatError, match="not '"):
        longeval_cases.load_testcases(str(tmp_path / "pos.jsonl"))
    (tmp_path / "text.jsonl").write_text(json.dumps({"prompt": "hello"}) + "\n")
    with pytest.raises(longeval_cases.TestCaseFormatError, match="missing or malformed"):
        longeval_cases.load_testcases(str(tmp_path / "text.jsonl"))


def test_interleaved_order_lets_limit_cover_every_configuration():
    cases = longeval_cases.interleave(longeval_cases.generate_cases([300, 20, 7], 2))
    assert [(c.num_lines, c.case_index) for c in cases[:3]] == [(7, 0), (20, 0), (300, 0)]


def test_last_integer_is_longchats_parse():
    assert longeval_cases.last_integer("The <REGISTER_CONTENT> in line x is <2416>.") == 2416
    assert longeval_cases.last_integer("12 apples, then 345 pears") == 345
    assert longeval_cases.last_integer("minus -7") == 7
    assert longeval_cases.last_integer("no number here") is None
    assert longeval_cases.last_integer("\u0663\u0664") == 34  # Unicode digits count, as re's \d does


def test_longeval_testcases_with_unicode_line_breaks_in_a_string(tmp_path, caplog):
    case = longeval_cases.generate_cases([3], 1, seed=1)[0]
    record = case.to_record()
    # the header is free text (it differs from LongChat's: a warning, scored as it is)
    record["prompt"] = LINE_BREAKS_IN_TEXT + record["prompt"]
    path = tmp_path / "3_lines.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\r\n", encoding="utf-8")
    assert "\u2029" in path.read_text(encoding="utf-8")
    (loaded,) = longeval_cases.load_testcases(str(path))
    assert loaded.prompt == record["prompt"] and loaded.expected_number == case.expected_number


# ------------------------------------------------------------------ sizes: lines that fill a length


def test_lines_fill_each_length_with_room_for_the_answer():
    # a prompt of N lines: 100 tokens of header and question, 10 a line
    counted = []

    def prompt_tokens(n):
        counted.append(n)
        return 100 + 10 * n

    lines, notes = longeval_cases.num_lines_for_lengths([1000, 2100], prompt_tokens, room=100)
    assert lines == [80, 190] and not notes  # 100 + 10 N <= L - 100
    with pytest.raises(SettingsError, match="a length of 150 tokens holds no line"):
        longeval_cases.num_lines_for_lengths([150, 1000], prompt_tokens, room=100)
    lines, notes = longeval_cases.num_lines_for_lengths([150, 1000], prompt_tokens, room=100, drop_short=True)
    assert lines == [80] and "left out" in notes[0]


def test_lines_are_lowered_until_the_longest_prompt_fits():
    # a fit from 16 and 64 lines that underestimates longer prompts: the size found is lowered until it fits
    def prompt_tokens(n):
        return 100 + 10 * n + (n // 10) ** 2

    [n], _ = longeval_cases.num_lines_for_lengths([2100], prompt_tokens, room=100)
    assert prompt_tokens(n) <= 2000 < prompt_tokens(n + 1) + 20


def test_lines_for_a_real_tokenizer_are_about_each_length():
    from transformers import AutoTokenizer

    from lm_eval_longctx.demo.model import packaged_model_dir

    tokenizer = AutoTokenizer.from_pretrained(packaged_model_dir())

    def prompt_tokens(n):
        prompts = [longeval_cases.generated_case(n, i, 0, "reference").prompt for i in range(4)]
        return max(len(tokenizer(p)["input_ids"]) for p in prompts)

    lines, _ = longeval_cases.num_lines_for_lengths([1024, 4096], prompt_tokens, room=100)
    for n, length in zip(lines, [1024, 4096]):
        assert length - 100 - 40 <= prompt_tokens(n) <= length - 100  # within about a line of the length
