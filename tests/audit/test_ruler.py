"""The RULER cross-check (audit/ruler.py): lm-eval's own RULER needle tasks on a tiny random Llama at short lengths,
scored from RULER's per-sample results; the two effective-length rules; the message for a missing package."""

from __future__ import annotations

import doctest
import functools
import json
import sys
import types
from pathlib import Path

import pytest

from lm_eval_longctx.audit import ruler
from lm_eval_longctx.harness.lm_eval_tasks import task_folder
from tests import tiny
from tests.harness_utils import lm_eval_in_process

# RULER's prompt words, trained into the tiny tokenizer beside the corpus: with them all three tasks fit 384 tokens
# (RULER keeps 128 of L for the answer), and niah_multikey_3, whose needles are two UUIDs, still misses 256
RULER_TEXT = (
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the numbers afterwards. The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
    "back again. One of the special magic numbers for red-apple is: 1234567. What are all the special magic uuids "
    "for 3aeb5bc0-f63d-407c-a9d2-1bf8b1954990 mentioned in the provided text? 0123456789 abcdef"
)
# the needle keys' words, in place of wonderwords' lists: RULER's module pairs every adjective with every noun of
# those (6 million keys) when it is imported, tens of seconds
SMALL_WORDS = {
    "nouns": ["apple", "river", "stone", "cloud", "lamp", "field"],
    "adjectives": ["red", "quiet", "old", "brave"],
    "verbs": ["run"],
}
RUN_RULER = functools.partial(lm_eval_in_process, lm_eval_folders=(ruler.TASK_FOLDER,))


def _drop_ruler_modules() -> None:
    folder = str(task_folder(ruler.TASK_FOLDER))
    for name, module in list(sys.modules.items()):
        if name.startswith("lm_eval.tasks.ruler") or str(getattr(module, "__file__", "")).startswith(folder):
            del sys.modules[name]


@pytest.fixture
def small_ruler_words(monkeypatch):
    """RULER's needle tasks built with SMALL_WORDS; RULER's modules imported with them are dropped afterwards."""
    stand_in = types.ModuleType("wonderwords")
    stand_in.RandomWord = type("RandomWord", (), {"_categories": SMALL_WORDS})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wonderwords", stand_in)
    _drop_ruler_modules()
    yield
    _drop_ruler_modules()


@pytest.fixture(scope="module")
def ruler_model(tmp_path_factory, corpus_texts):
    return tiny.save_tiny_model(tmp_path_factory.mktemp("ruler") / "model", corpus_texts + [RULER_TEXT] * 20,
                                vocab_size=600)  # fmt: skip


def test_cross_check_scores_each_length_from_rulers_own_samples(ruler_model, small_ruler_words, tmp_path):
    said: list[str] = []
    # a random model's answers need no room: 8 tokens keep the test to seconds
    record = ruler.cross_check(ruler_model, {"dtype": "float32"}, [512, 256, 384], 2, "cpu", 8, tmp_path,
                               runner=RUN_RULER, say=said.append, answer_tokens=8)  # fmt: skip
    assert [r["length"] for r in record["lengths"]] == [384, 512]
    (left,) = record["left_out"]
    assert left["length"] == 256 and list(left["tasks"]) == ["niah_multikey_3"]
    assert "Could not generate any sample" in left["tasks"]["niah_multikey_3"]
    for row in record["lengths"]:
        # a random model finds no needle; RULER's own aggregate in the results file agrees with the samples
        assert row["score"] == 0.0 and row["low"] == 0.0 and row["high"] == 0.0
        assert row["samples"] == 2 and set(row["tasks"]) == set(ruler.TASKS)
        for task in row["tasks"].values():
            assert task == {"score": 0.0, "lm_eval_score": 0.0, "samples": 2}
        # RULER sizes prompts to L minus its 128 answer tokens
        assert 6 * (row["length"] - 128) // 2 < row["tokens_forwarded"] <= 6 * (row["length"] - 128) + 6 * 40
        assert 0 < row["tokens_generated"] <= 6 * 8
        assert row["wall_seconds"] >= 0 and row["command"].startswith("lm_eval run --tasks niah_single_1,")
        assert "--limit 2" in row["command"] and "max_gen_toks=8" in row["command"] and record["max_gen_toks"] == 8
        assert (tmp_path / row["results_file"]).is_file() and len(row["files"]) == 4
    rules = record["effective_length"]
    assert rules["ruler"]["length"] is None and rules["ruler"]["needed"] == [384]
    assert rules["nolima"]["length"] is None and rules["nolima"]["threshold"] is None
    assert rules["ruler"]["tokens_forwarded"] == record["lengths"][0]["tokens_forwarded"]
    json.dumps(record)
    text = ruler.table(record)
    assert "| 256 | left out: niah_multikey_3: ValueError: Could not generate" in text
    assert "| 384 | 0.0 | 0.0 - 0.0 | 2 |" in text and "RULER's effective length" in text
    assert any(line.startswith("256: left out") for line in said)


def test_effective_lengths_by_rulers_and_nolimas_rules():
    rules = ruler.effective_lengths({4096: 95.0, 8192: 90.0, 16384: 84.0, 32768: 88.0})
    assert rules["ruler"]["length"] == 8192 and rules["ruler"]["needed"] == [4096, 8192, 16384]
    assert rules["nolima"] == {"length": 32768, "threshold": 80.75, "base_length": 4096, "base_score": 95.0,
                               "needed": [4096, 8192, 16384, 32768]}  # fmt: skip
    # a dip stops both rules, whatever longer lengths score
    dip = ruler.effective_lengths({1024: 90.0, 2048: 50.0, 4096: 90.0})
    assert dip["ruler"]["length"] == 1024 and dip["nolima"]["length"] == 1024
    assert dip["nolima"]["needed"] == [1024, 2048]
    # RULER's threshold is strict, NoLiMa's is not
    edge = ruler.effective_lengths({1024: 85.6, 2048: 85.6})
    assert edge["ruler"]["length"] is None and edge["nolima"]["length"] == 2048
    # a weak model passes NoLiMa's relative rule, not RULER's
    weak = ruler.effective_lengths({1024: 40.0, 2048: 36.0})
    assert weak["ruler"]["length"] is None and weak["nolima"]["length"] == 2048
    nothing = ruler.effective_lengths({})
    assert nothing["ruler"] == {"length": None, "threshold": ruler.RULER_THRESHOLD, "needed": []}
    assert nothing["nolima"]["length"] is None and nothing["nolima"]["needed"] == []
    zero = ruler.effective_lengths({1024: 0.0, 2048: 0.0})
    assert zero["nolima"]["length"] is None and zero["nolima"]["threshold"] is None


def test_effective_lengths_example_runs():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(ruler.effective_lengths, "effective_lengths"):
        runner.run(test)
    assert runner.summarize(verbose=False).attempted > 0 and runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("missing", [("wonderwords",), ("wonderwords", "nltk")])
def test_a_missing_package_is_named_with_the_install_line(monkeypatch, tmp_path, missing):
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)

    def runner(argv):
        raise AssertionError("ran lm_eval without the packages")

    with pytest.raises(ruler.RulerError) as err:
        ruler.cross_check(tmp_path, {}, [1024], 2, "cpu", 1, tmp_path, runner=runner)
    assert str(err.value) == f"the RULER cross-check needs {' and '.join(missing)}: {ruler.INSTALL}"
    assert ruler.INSTALL == "pip install 'lm_eval_longctx[ruler]'"


def test_a_run_that_fails_is_left_out_only_when_ruler_cannot_build_there(monkeypatch, ruler_model, tmp_path):
    asked: list[tuple] = []

    def cannot_build(model_dir, extra, length, tasks):
        asked.append((length, tuple(tasks)))
        return {"niah_multikey_3": "ValueError: no room"} if len(asked) > 1 and build_fails else {}

    def runner(argv):
        raise RuntimeError("the run failed")

    monkeypatch.setattr(ruler, "check_packages", lambda: None)
    monkeypatch.setattr(ruler, "cannot_build", cannot_build)
    build_fails = True
    record = ruler.cross_check(ruler_model, {}, [1024], 2, "cpu", 1, tmp_path, runner=runner, say=lambda _: None)
    assert record["lengths"] == [] and record["left_out"] == [
        {"length": 1024, "tasks": {"niah_multikey_3": "ValueError: no room"}}
    ]
    assert asked == [(1024, ruler.TASKS), (1024, ruler.TASKS)]
    build_fails = False
    with pytest.raises(RuntimeError, match="the run failed"):
        ruler.cross_check(ruler_model, {}, [1024], 2, "cpu", 1, tmp_path, runner=runner, say=lambda _: None)


def test_run_argv_reads_the_whole_prompt_at_each_length():
    argv = ruler.run_argv(Path("/m"), {"dtype": "bfloat16", "max_length": 512}, 2048, 4, "cuda", "auto", Path("/o"))
    model_args = argv[argv.index("--model_args") + 1]
    assert model_args == "pretrained=/m,dtype=bfloat16,max_length=2048"
    assert json.loads(argv[argv.index("--metadata") + 1]) == {"max_seq_lengths": [2048]}
    assert argv[argv.index("--tasks") + 1] == ",".join(ruler.TASKS) and "--log_samples" in argv


@pytest.mark.integration
def test_cross_check_through_lm_evals_own_command_line(ruler_model, tmp_path):
    """The default runner (lm-eval's command line in this process, its whole task index) with the real word lists."""
    record = ruler.cross_check(ruler_model, {"dtype": "float32"}, [512], 1, "cpu", 4, tmp_path, say=lambda _: None,
                               answer_tokens=8)  # fmt: skip
    (row,) = record["lengths"]
    assert row["length"] == 512 and row["samples"] == 1 and row["score"] == 0.0
    assert row["low"] is None and row["high"] is None  # one sample: no interval
    assert all(task["lm_eval_score"] == 0.0 for task in row["tasks"].values())


def test_the_audit_and_ruler_agree_or_not_on_the_claim():
    def record(scores: dict) -> dict:
        return {"lengths": [{"length": k, "score": v} for k, v in scores.items()],
                "effective_length": ruler.effective_lengths(scores)}  # fmt: skip

    ladder = [1024, 2048, 4096, 8192]
    # a model that uses its 8,192: both say so
    found = ruler.agreement(8192, ladder, 8192, record({1024: 100.0, 2048: 100.0, 4096: 95.0, 8192: 90.0}))
    assert found["audit"]["claim"] == "used" and found["ruler"]["claim"] == "used"
    assert found["ruler"]["agree_on_claim"] and found["ruler"]["within_one_rung"]
    # a model whose needles die past 2,048 that the audit counted to 8,192: a disagreement, three rungs apart
    found = ruler.agreement(8192, ladder, 8192, record({1024: 90.0, 2048: 88.0, 4096: 25.0, 8192: 0.0}))
    assert found["ruler"]["effective_length"] == 2048 and found["ruler"]["claim"] == "refuted"
    assert not found["ruler"]["agree_on_claim"] and not found["ruler"]["within_one_rung"]
    assert "DISAGREES" in ruler.agreement_text(found)
    # each task alone: a task failed at every length beside one that holds to W
    by_task = {"lengths": [{"length": k, "score": 50.0, "tasks": {"single": {"score": 100.0}, "multi": {"score": 0.0}}}
                           for k in ladder], "effective_length": ruler.effective_lengths({k: 50.0 for k in ladder})}  # fmt: skip
    found = ruler.agreement(8192, ladder, 8192, by_task)
    assert found["ruler"]["claim"] == "refuted" and found["by_task"]["single"]["claim"] == "used"
    assert found["by_task"]["single"]["agree_on_claim"] and found["by_task"]["multi"]["effective_length"] is None
    # nothing at the shortest length on either side: both refute, same rung
    found = ruler.agreement(8192, ladder, 0, record({1024: 0.0, 2048: 0.0}))
    assert found["audit"]["claim"] == found["ruler"]["claim"] == found["nolima"]["claim"] == "refuted"
    assert found["ruler"]["within_one_rung"]
