"""LongEval lines (``tasks/longeval.py``): a bound on the number of cases, the cases generated as lm-eval reads them
(``--limit k`` generates k), the checks of its settings and generation options before the model loads; answer-token
selection across tokenizers, answer / non-answer perplexity against brute force, over-long prompts, accuracy
through generate_until, and the curves read back from the results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_longctx.data import longeval_cases
from lm_eval_longctx.engine import scoring
from lm_eval_longctx.metrics import per_token
from lm_eval_longctx.report.pictures.longeval_plot import curves_from_results
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import longeval, run_options
from tests.harness_utils import json_numbers, refuse_model_loading, run_task, save_like_lm_eval
from tests.tiny import load, tiny_llama

ROOT = Path(__file__).resolve().parents[2]
NUM_LINES = [4, 11]  # 4 < 11 but "4" > "11": the metric names must be zero-padded to sort
MD = {"num_lines": NUM_LINES, "num_cases": 2}


@pytest.fixture
def generated(monkeypatch):
    """The (num_lines, case_index) of every case generated from now on."""
    calls = []
    generate = longeval_cases.generate_case

    def counted(num_lines, case_index, *args):
        calls.append((num_lines, case_index))
        return generate(num_lines, case_index, *args)

    longeval_cases.generated_case.cache_clear()
    monkeypatch.setattr(longeval_cases, "generate_case", counted)
    yield calls
    longeval_cases.generated_case.cache_clear()


def test_a_number_of_cases_above_its_bound_is_refused_when_parsed():
    with pytest.raises(SettingsError, match=r"'num_cases' = 1000000000000 is above its upper bound; .*<= 10000\."):
        longeval.resolve_settings({"num_cases": 10**12})
    with pytest.raises(SettingsError, match=r"'num_lines' = \[200, 1000000000\] is above its upper bound"):
        longeval.resolve_settings({"num_lines": [200, 10**9]})


def reader(s: dict):
    return longeval_cases.case_reader(s["testcases"], s["num_lines"], s["num_cases"], s["seed"], s["trailing_space"])


def test_cases_are_generated_when_read_in_the_harness_order(generated):
    n_cases, case = reader(longeval.resolve_settings({"preset": "paper", "num_cases": 10_000}))
    assert n_cases == 13 * 10_000 and generated == []
    assert [case(i).num_lines for i in range(3)] == [200, 300, 400]
    assert generated == [(200, 0), (300, 0), (400, 0)]
    assert case(13).case_index == 1 and case(13).num_lines == 200
    small = longeval.resolve_settings({"num_lines": [11, 4], "num_cases": 3})
    n_cases, case = reader(small)
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


# ------------------------------------------------------------------ answer tokens


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

    cases = longeval_cases.generate_cases([3, 6], 3, seed=11, trailing_space=False)
    texts = [c.prompt + " " + c.response()[0] for c in cases]
    merging = _merging_tokenizer(texts * 3)
    tokenizers = {
        "bpe": load(model_dirs["a"]),
        "wordpiece": load(model_dirs["b"]),
        "merging": (tiny_llama(vocab_size=len(merging), seed=3), merging),
    }
    merged_bracket = False
    for label, (model, tok) in tokenizers.items():
        for case, text in zip(cases, texts):
            response, a, b = case.response()
            start = len(case.prompt) + 1
            spec = {"response_start": start, "add_special_tokens": "auto", "chunk_size": 64}
            scores = longeval.score_answer(model, tok, text, spec, None)
            offs = scores.offsets  # relative to the response
            mask = per_token.overlapping_token_mask(offs, (a, b))
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
    with pytest.raises(scoring.ScoringError, match="longer than the model's maximum length 200"):
        run_task("longeval_lines_ppl", model_dirs["a"], MD, model_args={"max_length": 200})
    with pytest.raises(scoring.ScoringError, match="maximum length 200 less the 2 generated tokens"):
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
            assert line["acc"] == float(longeval_cases.last_integer(answer["text"]) == doc["expected_number"])
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
    curves = curves_from_results(results)
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
