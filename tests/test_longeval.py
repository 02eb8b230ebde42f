"""LongEval "lines": the generator against LongChat's files, answer-token selection across tokenizers,
answer / non-answer perplexity against brute force, over-long prompts, accuracy through generate_until."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lm_eval_longctx.data import longeval_cases as longeval_data
from lm_eval_longctx.data import longeval_words
from lm_eval_longctx.engine import scoring as engine
from lm_eval_longctx.metrics import per_token as metrics
from lm_eval_longctx.report.pictures import longeval as longeval_plot
from tests import tiny
from tests.harness_utils import json_numbers, run_task, save_like_lm_eval

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference-data" / "longeval-lines"
NUM_LINES = [4, 11]  # 4 < 11 but "4" > "11": the metric names must be zero-padded to sort
MD = {"num_lines": NUM_LINES, "num_cases": 2}
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference data not present (fresh clone)")

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


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


# ------------------------------------------------------------------ data


def test_generator_is_deterministic_and_seeded():
    a = longeval_data.generate_cases([5, 9], 3, seed=7)
    assert a == longeval_data.generate_cases([5, 9], 3, seed=7)
    # a case depends on (seed, N, index) only: more cases or other configurations leave it unchanged
    assert longeval_data.generate_case(9, 2, seed=7) == a[5]
    assert longeval_data.generate_cases([9, 30], 4, seed=7)[2] == a[5]
    assert longeval_data.generate_case(9, 2, seed=8).prompt != a[5].prompt
    assert len({c.prompt for c in a}) == len(a)


def test_generated_cases_are_consistent_and_names_unique():
    for n in (1, 6, 40):
        for case in longeval_data.generate_cases([n], 3, seed=1):
            parsed = longeval_data.parse_prompt(case.prompt)
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
    big = longeval_data.generate_case(len(longeval_words.ADJECTIVES) + 5, 0)
    names = longeval_data.parse_prompt(big.prompt).names
    assert len(set(names)) == len(names)
    # LongChat's trailing-space rule by default; either way on request
    assert longeval_data.generate_case(680, 0).prompt.endswith("I need the number. ")
    assert longeval_data.generate_case(700, 0).prompt.endswith("I need the number.")
    assert longeval_data.generate_case(5, 0, trailing_space=False).prompt.endswith("number.")
    assert longeval_data.generate_case(900, 0, trailing_space=True).prompt.endswith("number. ")


def test_numbers_are_uniform_over_1_to_50000():
    values = np.concatenate(
        [longeval_data.parse_prompt(c.prompt).values for c in longeval_data.generate_cases([500], 20, seed=3)]
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
    generated = longeval_data.generate_cases([num_lines], len(records), seed=0)
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
    cases = longeval_data.load_testcases(
        [str(REFERENCE / "200_lines.jsonl"), str(REFERENCE / "1350_lines.first5.jsonl")]
    )
    assert [c.num_lines for c in cases] == [200] * 50 + [1350] * 5
    assert cases[0].name == "torpid-kid" and cases[0].position == 7 and cases[0].expected_number == 2416
    # a folder in LongChat's layout, capped per file
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "200_lines.jsonl").write_text((REFERENCE / "200_lines.jsonl").read_text())
    from_folder = longeval_data.load_testcases(str(folder), [200], max_cases=3)
    assert [c.to_record() for c in from_folder] == [c.to_record() for c in cases[:3]]
    assert from_folder[0].source == str(folder / "200_lines.jsonl")
    # the 200-line file's adjective-noun names: no word twice in a prompt, every word in our lists
    for case in cases[:50]:
        adjs, nouns = zip(*(split_name(x) for x in longeval_data.parse_prompt(case.prompt).names))
        assert len(set(adjs)) == 200 and len(set(nouns)) == 200
        assert set(adjs) <= set(longeval_words.REFERENCE_ADJECTIVES) and set(nouns) <= set(longeval_words.NOUNS)


def test_loader_round_trips_and_refuses_inconsistent_records(tmp_path):
    cases = longeval_data.generate_cases([3, 7], 2, seed=5)
    path = tmp_path / "mixed.jsonl"
    longeval_data.write_jsonl(cases, path)
    loaded = longeval_data.load_testcases(str(path))
    assert [(c.prompt, c.name, c.position, c.expected_number) for c in loaded] == [
        (c.prompt, c.name, c.position, c.expected_number) for c in cases
    ]
    # a URL goes through fsspec (http(s) through urllib): a file:// URL stands in for a remote one
    assert [c.prompt for c in longeval_data.load_testcases(path.as_uri())] == [c.prompt for c in cases]
    bad = cases[0].to_record() | {"expected_number": cases[0].expected_number + 1}
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(longeval_data.TestCaseFormatError, match="not expected_number"):
        longeval_data.load_testcases(str(tmp_path / "bad.jsonl"))
    wrong_pos = cases[0].to_record() | {"random_idx": [cases[0].name, (cases[0].position + 1) % 3]}
    (tmp_path / "pos.jsonl").write_text(json.dumps(wrong_pos) + "\n")
    with pytest.raises(longeval_data.TestCaseFormatError, match="not '"):
        longeval_data.load_testcases(str(tmp_path / "pos.jsonl"))
    (tmp_path / "text.jsonl").write_text(json.dumps({"prompt": "hello"}) + "\n")
    with pytest.raises(longeval_data.TestCaseFormatError, match="missing or malformed"):
        longeval_data.load_testcases(str(tmp_path / "text.jsonl"))


def test_interleaved_order_lets_limit_cover_every_configuration():
    cases = longeval_data.interleave(longeval_data.generate_cases([300, 20, 7], 2))
    assert [(c.num_lines, c.case_index) for c in cases[:3]] == [(7, 0), (20, 0), (300, 0)]


def test_last_integer_is_longchats_parse():
    assert longeval_data.last_integer("The <REGISTER_CONTENT> in line x is <2416>.") == 2416
    assert longeval_data.last_integer("12 apples, then 345 pears") == 345
    assert longeval_data.last_integer("minus -7") == 7
    assert longeval_data.last_integer("no number here") is None
    assert longeval_data.last_integer("\u0663\u0664") == 34  # Unicode digits count, as re's \d does


# ------------------------------------------------------------------ answer tokens


def test_answer_mask_counts_tokens_that_merge_brackets_with_digits():
    response, a, b = longeval_data.reference_response("tender-clause", 45129)
    assert response[a:b] == "45129" and response[a - 1] == "<" and response[b] == ">"
    # "... is", " <4", "51", "29>", "."  plus a zero-width special token
    offsets = np.array([[0, a - 2], [a - 2, a + 1], [a + 1, a + 3], [a + 3, b + 1], [b + 1, b + 2], [b + 2, b + 2]])
    mask = metrics.overlapping_token_mask(offsets, (a, b))
    assert mask.tolist() == [False, True, True, True, False, False]
    lp = np.log(np.array([0.5, 0.25, 0.5, 0.125, 0.5, 0.9]))
    (ans, n_ans), (other, n_other) = metrics.answer_nll_split(lp, offsets, (a, b))
    assert (n_ans, n_other) == (3, 2)
    assert ans == pytest.approx(-np.log(0.25 * 0.5 * 0.125)) and other == pytest.approx(-np.log(0.25))
    with pytest.raises(ValueError, match="no token overlaps"):
        metrics.answer_nll_split(lp[:1], offsets[:1], (a, b))


def _merging_tokenizer(texts):
    """A BPE without pre-tokenizer splits, so merges like "<4" or "9>." can form."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=600, special_tokens=["<pad>", "<s>", "</s>", "<unk>"])
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


def test_answer_tokens_across_tokenizers(model_dirs):
    from lm_eval_longctx.tasks import longeval

    cases = longeval_data.generate_cases([3, 6], 3, seed=11, trailing_space=False)
    texts = [c.prompt + " " + c.response()[0] for c in cases]
    merging = _merging_tokenizer(texts * 3)
    tokenizers = {
        "bpe": load(model_dirs["a"]),
        "wordpiece": load(model_dirs["b"]),
        "merging": (tiny.tiny_llama(vocab_size=len(merging), seed=3), merging),
    }
    merged_bracket = False
    for label, (model, tok) in tokenizers.items():
        for case, text in zip(cases, texts):
            response, a, b = case.response()
            start = len(case.prompt) + 1
            spec = {"response_start": start, "add_special_tokens": "auto", "chunk_size": 64}
            scores = longeval.score_answer(model, tok, text, spec, None)
            offs = scores.offsets  # relative to the response
            mask = metrics.overlapping_token_mask(offs, (a, b))
            covered = set()
            for (s, e), is_answer in zip(offs.tolist(), mask.tolist()):
                digits = set(range(max(s, a), min(e, b)))
                assert bool(digits) == is_answer, (label, response[max(s, 0) : e])
                covered |= digits
                if is_answer and (s < a or e > b):
                    merged_bracket = merged_bracket or label == "merging"
            assert covered == set(range(a, b)), label  # every digit is in an answer token
            assert offs[0, 0] <= 0 < offs[0, 1]  # the first response token reaches the response start
            assert scores.prompt_tokens + len(offs) == scores.n_tokens
            assert np.all(np.isfinite(scores.logprob)) and len(scores.logprob) == len(offs)
    assert merged_bracket, "the merging tokenizer never merged '<' or '>' with a digit: the test is vacuous"


# ------------------------------------------------------------------ perplexities through the harness


def brute_force(model, tok, prompt, response, answer):
    """One full forward over prompt + response; answer tokens found by the digits they contain."""
    sep = "" if prompt[-1:].isspace() else " "
    text, start = prompt + sep + response, len(prompt) + len(sep)
    enc = tok(text, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    first = min(i for i, (s, e) in enumerate(offs) if e > start and e > s)
    a, b = start + answer[0], start + answer[1]
    sums = {"answer": [0.0, 0], "other": [0.0, 0]}
    for i in range(first, len(ids)):
        s, e = offs[i]
        if e == s:
            continue
        part = "answer" if any(a <= c < b for c in range(s, e)) else "other"
        sums[part][0] -= float(lp[i - 1, ids[i]])
        sums[part][1] += 1
    return sums, first


@pytest.fixture(scope="module")
def ppl_run(model_dirs):
    return run_task("longeval_lines_ppl", model_dirs["a"], MD)


@pytest.mark.integration
def test_perplexities_equal_brute_force(ppl_run, model_dirs):
    model, tok = load(model_dirs["a"])
    r = ppl_run["results"]["longeval_lines_ppl"]
    samples = sorted(ppl_run["samples"]["longeval_lines_ppl"], key=lambda s: s["doc_id"])
    assert len(samples) == 4
    totals = {}
    for s in samples:
        doc = s["doc"]
        sums, first = brute_force(model, tok, doc["prompt"], doc["response"], (doc["answer_start"], doc["answer_end"]))
        key = f"{doc['num_lines']:04d}"
        assert s[f"answer_ppl_{key}"][1] == sums["answer"][1] > 0
        assert s[f"answer_ppl_{key}"][0] == pytest.approx(sums["answer"][0], rel=1e-5, abs=1e-4)
        assert s[f"non_answer_ppl_{key}"][1] == sums["other"][1] > 0
        assert s[f"non_answer_ppl_{key}"][0] == pytest.approx(sums["other"][0], rel=1e-5, abs=1e-4)
        assert s[f"prompt_tokens_{key}"] == first
        for part, name in (("answer", "answer_ppl"), ("other", "non_answer_ppl")):
            t = totals.setdefault((name, key), [0.0, 0])
            t[0] += sums[part][0]
            t[1] += sums[part][1]
            t = totals.setdefault((name, None), [0.0, 0])
            t[0] += sums[part][0]
            t[1] += sums[part][1]
    for (name, key), (nll, n) in totals.items():
        metric = name if key is None else f"{name}_{key}"
        assert r[f"{metric},none"] == pytest.approx(math.exp(nll / n), rel=1e-5)
        assert isinstance(r[f"{metric}_stderr,none"], float) and r[f"{metric}_stderr,none"] > 0
    # per-configuration metrics sort by configuration; each records its mean prompt length
    names = [k for k in r if k.startswith("answer_ppl_0") and "stderr" not in k]
    assert sorted(names) == ["answer_ppl_0004,none", "answer_ppl_0011,none"]
    assert 0 < r["prompt_tokens_0004,none"] < r["prompt_tokens_0011,none"]
    rec = ppl_run["configs"]["longeval_lines_ppl"]["metadata"]["longctx_settings"]
    assert rec["num_lines"] == NUM_LINES and rec["source"]["seed"] == 0
    assert rec["data"]["cases_per_num_lines"] == {"4": 2, "11": 2} and len(rec["data"]["prompts_sha256"]) == 64
    assert json.loads(str(samples[0]["resps"][0][0]))["skipped"] is False and len(str(samples[0]["resps"])) < 200


@pytest.mark.integration
def test_over_long_prompts_are_an_error(model_dirs):
    with pytest.raises(engine.ScoringError, match="longer than the model's maximum length 200"):
        run_task("longeval_lines_ppl", model_dirs["a"], MD, model_args={"max_length": 200})
    with pytest.raises(engine.ScoringError, match="maximum length 200 less the 2 generated tokens"):
        run_task("longeval_lines_acc", model_dirs["a"], MD, model_args={"max_length": 200}, gen_kwargs="max_gen_toks=2")


def prompt_length_cut(ppl_run) -> int:
    """A model maximum between the two configurations' prompt lengths."""
    r_ppl = ppl_run["results"]["longeval_lines_ppl"]
    return int((r_ppl["prompt_tokens_0004,none"] + r_ppl["prompt_tokens_0011,none"]) / 2)


@pytest.fixture(scope="module")
def skip_run(ppl_run, model_dirs):
    """The group with a maximum between the two configurations' lengths, over-long cases skipped."""
    return run_task(
        "longeval_lines",
        model_dirs["a"],
        {**MD, "over_length": "skip"},
        model_args={"max_length": prompt_length_cut(ppl_run)},
        gen_kwargs="max_gen_toks=6",
    )


@pytest.mark.integration
def test_acc_through_the_engines_generation_and_skips_recorded(skip_run, ppl_run):
    """The group with a maximum between the two configurations' lengths: short cases are scored,
    long ones recorded as skipped (never cut)."""
    r_ppl = ppl_run["results"]["longeval_lines_ppl"]
    res = skip_run
    ppl, acc = res["results"]["longeval_lines_ppl"], res["results"]["longeval_lines_acc"]
    for r in (ppl, acc):
        assert r["skipped_0004,none"] == 0.0 and r["skipped_0011,none"] == 1.0
        assert "prompt_tokens_0004,none" in r and "prompt_tokens_0011,none" not in r
    assert "answer_ppl_0011,none" not in ppl and "acc_0011,none" not in acc
    assert ppl["answer_ppl_0004,none"] == pytest.approx(r_ppl["answer_ppl_0004,none"], rel=1e-6)
    assert 0.0 <= acc["acc_0004,none"] <= 1.0 and 0.0 <= acc["acc,none"] <= 1.0
    # the prompt lengths both tasks measure agree (up to a token at the prompt/response seam)
    assert abs(acc["prompt_tokens_0004,none"] - ppl["prompt_tokens_0004,none"]) <= 1
    samples = res["samples"]["longeval_lines_acc"]
    generated = [s for s in samples if s["doc"]["num_lines"] == 4]
    assert len(generated) == 2 and all(isinstance(s["filtered_resps"][0].text, str) for s in generated)
    assert all(s["filtered_resps"][0].generated_tokens <= 6 for s in generated)  # --gen_kwargs max_gen_toks=6
    assert res["configs"]["longeval_lines_acc"]["metadata"]["longctx_settings"]["runtime"]["scoring"]["passes"][
        "generation"
    ] == {"generate": 2}


@pytest.mark.integration
def test_samples_files_hold_the_expected_number_and_per_case_numbers(skip_run, ppl_run, tmp_path):
    """What `lm_eval --log_samples` writes per case: accuracy's target is the expected number, perplexity's the
    reference response; the values are JSON numbers and each response a JSON summary (counts, NLL sum), skipped
    cases included."""
    _, files = save_like_lm_eval(skip_run, tmp_path)
    limit = prompt_length_cut(ppl_run) - 6
    acc = sorted(files["longeval_lines_acc"], key=lambda x: x["doc_id"])
    ppl = sorted(files["longeval_lines_ppl"], key=lambda x: x["doc_id"])
    assert len(acc) == len(ppl) == 4 and all(len(json.dumps(x)) < 20_000 for x in acc + ppl)
    for line in acc + ppl:
        assert all(json_numbers(line[m]) for m in line["metrics"])
    for line in acc:
        doc, key = line["doc"], f"{line['doc']['num_lines']:04d}"
        assert line["target"] == str(doc["expected_number"])
        answer = json.loads(line["resps"][0][0])
        assert set(answer) == {"prompt_tokens", "limit", "generated_tokens", "skipped", "text"}
        assert answer["limit"] == limit and answer["skipped"] == (doc["num_lines"] == 11)
        if answer["skipped"]:
            assert line[f"skipped_{key}"] == 1.0 and "acc" not in line and answer["text"] == ""
        else:
            assert line[f"prompt_tokens_{key}"] == answer["prompt_tokens"] <= limit
            assert 0 <= answer["generated_tokens"] <= 6
            assert line["acc"] == float(longeval_data.last_integer(answer["text"]) == doc["expected_number"])
    for line in ppl:
        doc, key = line["doc"], f"{line['doc']['num_lines']:04d}"
        assert line["target"] == doc["response"]
        scores = json.loads(line["resps"][0][0])
        if doc["num_lines"] == 11:
            assert scores == {"n_tokens": scores["n_tokens"], "prompt_tokens": scores["prompt_tokens"], "skipped": True}
            continue
        assert scores["skipped"] is False and scores["prompt_tokens"] == line[f"prompt_tokens_{key}"]
        (answer_nll, n_answer), (other_nll, n_other) = line["answer_ppl"], line["non_answer_ppl"]
        assert scores["response_tokens"] == n_answer + n_other
        assert scores["response_nll_sum"] == pytest.approx(answer_nll + other_nll, rel=1e-12)


def test_acc_scores_the_last_integer_of_the_output():
    from lm_eval_longctx.tasks.longeval import GeneratedAnswer, LongEvalLinesAccTask

    task = LongEvalLinesAccTask(
        config={
            "task": "t",
            "test_split": "test",
            "output_type": "generate_until",
            "generation_kwargs": {"until": [], "max_gen_toks": 100},
            "metadata": {"num_lines": [3], "num_cases": 1},
        }
    )
    doc = task.test_docs()[0]
    n = doc["expected_number"]
    right = task.process_results(doc, [GeneratedAnswer(50, 100, f"Line 3 ... The value is <{n}>.", 9)])
    wrong = task.process_results(doc, [GeneratedAnswer(50, 100, f"<{n}> or maybe 7", 6)])
    assert right == {"acc": 1.0, "acc_0003": 1.0, "prompt_tokens_0003": 50}
    assert wrong["acc"] == 0.0


@pytest.mark.integration
def test_chat_template_reaches_both_tasks(model_dirs, tmp_path):
    chat_dir = tmp_path / "chat_model"
    model, tok = load(model_dirs["a"])
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    model.save_pretrained(chat_dir)
    tok.save_pretrained(chat_dir)
    md = {"num_lines": [3], "num_cases": 1}
    res = run_task("longeval_lines", str(chat_dir), md, apply_chat_template=True, gen_kwargs="max_gen_toks=2")
    s = res["samples"]["longeval_lines_acc"][0]
    prompt = s["arguments"][0][0]  # (context, generation spec) of the generation request
    assert prompt.startswith("<|user|>Below is a record") and prompt.endswith("<|assistant|>")
    n_chat = res["results"]["longeval_lines_acc"]["prompt_tokens_0003,none"]
    assert n_chat > len(tok(s["doc"]["prompt"])["input_ids"])
    # the response follows the assistant marker directly, and is what gets scored
    text, spec = res["samples"]["longeval_lines_ppl"][0]["arguments"][0]
    assert text == prompt + s["doc"]["response"] and spec["response_start"] == len(prompt)
    assert res["results"]["longeval_lines_ppl"]["prompt_tokens_0003,none"] >= n_chat - 1


@pytest.mark.integration
def test_use_cache_serves_repeated_requests(model_dirs, tmp_path, monkeypatch):
    from lm_eval_longctx.tasks import longeval

    md, cache = {"num_lines": [3], "num_cases": 2}, str(tmp_path / "cache")
    first = run_task("longeval_lines", model_dirs["a"], md, use_cache=cache, gen_kwargs="max_gen_toks=2")

    def fail(*args, **kwargs):
        raise AssertionError("a cached request was computed again")

    monkeypatch.setattr(longeval, "score_answer", fail)
    monkeypatch.setattr(longeval, "prompt_length", fail)
    again = run_task("longeval_lines", model_dirs["a"], md, use_cache=cache, gen_kwargs="max_gen_toks=2")
    for task in ("longeval_lines_ppl", "longeval_lines_acc"):
        assert again["results"][task] == first["results"][task]


# ------------------------------------------------------------------ plot


@pytest.mark.integration
def test_plot_from_results(ppl_run, tmp_path):
    fake_acc = {
        "longeval_lines_acc": {
            "acc_0004,none": 0.5,
            "acc_0004_stderr,none": 0.1,
            "acc_0011,none": 0.25,
            "acc_0011_stderr,none": "N/A",
            "prompt_tokens_0004,none": 100.0,
            "prompt_tokens_0011,none": 300.0,
        }
    }
    results = {"results": {**ppl_run["results"], **fake_acc}, "model_name": "tiny"}
    curves = longeval_plot.curves_from_results(results)
    assert curves["acc"].num_lines == NUM_LINES and curves["acc"].x == [100.0, 300.0]
    assert curves["answer_ppl"].value == [
        ppl_run["results"]["longeval_lines_ppl"][f"answer_ppl_{k},none"] for k in ("0004", "0011")
    ]
    assert math.isnan(curves["acc"].stderr[1]) and curves["non_answer_ppl"].x_is_tokens
    path = tmp_path / "res.json"
    path.write_text(json.dumps(results))
    import importlib.util

    spec = importlib.util.spec_from_file_location("plot_longeval", ROOT / "scripts" / "plot_longeval.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "fig.png"
    assert script.main([str(path), str(path), "--labels", "run a", "run b", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_picture_names_the_model_and_draws_flat_perplexities_flat():
    pytest.importorskip("matplotlib")
    results = {
        "model_name": "/home/me/src/lm_eval_longctx/demo/assets/model",
        "results": {
            "longeval_lines_acc": {"acc_0004,none": 1.0, "acc_0011,none": 1.0},
            "longeval_lines_ppl": {
                # every answer found: perplexities within 1e-6 of 1
                "answer_ppl_0004,none": 1.000001,
                "answer_ppl_0011,none": 1.0000005,
                "non_answer_ppl_0004,none": 68.0,
                "non_answer_ppl_0011,none": 37.0,
                "prompt_tokens_0004,none": 290.0,
                "prompt_tokens_0011,none": 415.0,
            },
        },
    }
    label = longeval_plot.run_label(results, "fallback")
    assert label == "demo model (lm_eval_longctx)"
    fig = longeval_plot.longeval_figure({label: longeval_plot.curves_from_results(results)})
    fig.canvas.draw()
    assert fig.get_suptitle() == "LongEval lines: demo model (lm_eval_longctx)"
    answer_ppl = fig.axes[2]  # the twin axis of panel (b)
    low, high = answer_ppl.get_ylim()
    assert answer_ppl.yaxis.get_offset_text().get_text() == ""  # plain ticks, no "1e-6 + 1.000001"
    assert high - low >= 0.02 and low < 1.0 < high


@pytest.mark.integration
def test_acc_answers_are_the_same_at_any_batch_size(model_dirs):
    """--batch_size 1 and 4: the same generated text for every case (prompts of one size go together, left-padded)."""
    md = {"num_lines": [3, 4], "num_cases": 3}
    texts = []
    for batch_size in (1, 4):
        res = run_task("longeval_lines_acc", model_dirs["a"], md, gen_kwargs="max_gen_toks=8", batch_size=batch_size)
        samples = sorted(res["samples"]["longeval_lines_acc"], key=lambda s: s["doc_id"])
        texts.append([(s["filtered_resps"][0].text, s["filtered_resps"][0].generated_tokens) for s in samples])
    assert len(texts[0]) == 6 and texts[0] == texts[1]
    assert any(n > 0 for _, n in texts[0])


def test_acc_refuses_generation_settings_it_does_not_apply():
    from lm_eval_longctx.tasks.longeval import LongEvalLinesAccTask
    from lm_eval_longctx.tasks.run_options import UnsupportedOptionError

    task = LongEvalLinesAccTask(
        config={
            "task": "t",
            "test_split": "test",
            "output_type": "generate_until",
            "generation_kwargs": {"until": [], "max_gen_toks": 100, "repetition_penalty": 1.3},
            "metadata": {"num_lines": [3], "num_cases": 1},
        }
    )
    with pytest.raises(UnsupportedOptionError, match="repetition_penalty .* are not applied by this task's generation"):
        task.construct_requests(task.test_docs()[0], "prompt")
