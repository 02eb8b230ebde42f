"""The forgetting curve (``tasks/forgetting_curve.py``): a bound on the samples per length, the samples built as
lm-eval reads them (their starts drawn in the reference's order, a length's when it is first reached), and the
checks of its settings before the model loads."""

from __future__ import annotations

import random

import pytest

from lm_eval_longctx.data import documents
from lm_eval_longctx.settings import SettingsError
from lm_eval_longctx.tasks import forgetting_curve
from tests import tiny
from tests.harness_utils import refuse_model_loading, run_task, write_docs


def test_samples_per_length_above_its_bound_is_refused_when_parsed():
    with pytest.raises(SettingsError, match=r"'samples_per_length' = 1000000000000 is above its upper bound"):
        forgetting_curve.resolve_settings({"samples_per_length": 10**12})
    with pytest.raises(SettingsError, match=r"'lengths' = .* is above its upper bound"):
        forgetting_curve.resolve_settings({"lengths": list(range(1, 20_002))})


def test_min_len_above_max_len_is_refused_when_parsed():
    with pytest.raises(SettingsError, match="'min_len' = 50 is above 'max_len' = 20; .* lower min_len or raise"):
        forgetting_curve.resolve_settings({"min_len": 50, "max_len": 20})
    assert forgetting_curve.resolve_settings({"min_len": 50, "lengths": [20]})["lengths"] == [20]  # lengths replace


class CountingRandom(random.Random):
    draws = 0

    def randint(self, a, b):
        CountingRandom.draws += 1
        return super().randint(a, b)


def test_sample_starts_are_drawn_a_length_at_a_time_in_the_reference_order(monkeypatch):
    lengths, n = [8, 500, 40], 4
    expected = documents.sample_starts(10_000, lengths, n, seed=3)
    monkeypatch.setattr(random, "Random", CountingRandom)
    CountingRandom.draws = 0
    starts = documents.SampleStarts(10_000, lengths, n, seed=3)
    assert starts.start(8, 2) == expected[8][2] and CountingRandom.draws == n  # the shortest length only
    assert starts.start(40, 0) == expected[40][0] and CountingRandom.draws == 2 * n
    assert [starts.start(x, k) for x in (8, 40, 500) for k in range(n)] == [
        expected[x][k] for x in (8, 40, 500) for k in range(n)
    ]
    with pytest.raises(ValueError, match="at least 3000 tokens"):  # every length checked at once
        documents.SampleStarts(2999, [10, 1000], 1)


@pytest.mark.integration
def test_limit_builds_only_the_samples_it_evaluates(model_dirs, tmp_path, monkeypatch):
    corpus = write_docs(tmp_path / "corpus.jsonl", tiny.corpus_texts())
    monkeypatch.setattr(random, "Random", CountingRandom)
    CountingRandom.draws = 0
    md = {"data_files": corpus, "lengths": [8, 16, 32], "samples_per_length": 10_000, "chunk_size": 16}
    res = run_task("forgetting_curve", model_dirs["a"], md, limit=2)
    assert res["n-samples"]["forgetting_curve"] == {"original": 30_000, "effective": 2}
    assert CountingRandom.draws == 2 * 10_000  # the starts of the two lengths the first two samples have


@pytest.mark.integration
def test_settings_are_checked_before_the_model_loads(monkeypatch, model_dirs):
    refuse_model_loading(monkeypatch)
    with pytest.raises(SettingsError, match=r"'samples_per_length' = 1000000000000 is above its upper bound"):
        run_task("forgetting_curve", model_dirs["a"], {"samples_per_length": 10**12}, limit=2)
    with pytest.raises(SettingsError, match="'min_len' = 50 is above 'max_len' = 20"):
        run_task("forgetting_curve", model_dirs["a"], {"min_len": 50, "max_len": 20})
    with pytest.raises(SettingsError, match=r"'bos_token_id' = -1 is not allowed"):
        run_task("forgetting_curve", model_dirs["a"], {"bos_token_id": -1})


def test_lengths_map_to_the_longest_copy_length_each_fits():
    s = forgetting_curve.resolve_settings({"max_seq_lengths": [256, 1024]})
    out = forgetting_curve.settings_for_lengths([256, 1024], s)
    assert out == {"lengths": [126, 510]}
    assert all(forgetting_curve.sample_tokens(x) <= n for x, n in zip(out["lengths"], [256, 1024]))
    assert forgetting_curve.sample_tokens(511) > 1024
    # a setting of the grid given: the grid, up to the copy length the longest length fits
    s = forgetting_curve.resolve_settings({"max_seq_lengths": [256, 1024], "num_lengths": 4})
    assert forgetting_curve.settings_for_lengths([256, 1024], s) == {"max_len": 510}
    with pytest.raises(SettingsError, match=r"lengths \[4\] of max_seq_lengths hold no copy sample"):
        forgetting_curve.settings_for_lengths([4, 100], s)
