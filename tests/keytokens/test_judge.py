"""The evaluator over a run: judgements equal the evaluator's own scores judged directly, a cached text never loads
the model, the record names the scoring, release frees the model, and the span-cache setting names its folder."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx.engine import scoring
from lm_eval_longctx.keytokens import cache, evaluator, judge, text_scoring

K, D, ALPHA, BETA = 16, 8, 0.0, -100.0


def _judge(model_dir, span_cache, **kwargs) -> judge.EvaluatorJudge:
    return judge.EvaluatorJudge(str(model_dir), None, K, D, ALPHA, BETA, span_cache, device="cpu", **kwargs)


@pytest.mark.integration
def test_a_judgement_is_the_evaluators_own_and_a_cached_one_loads_nothing(model_dirs, corpus_texts, tmp_path):
    text = corpus_texts[0][:600]
    run = _judge(model_dirs["b"], judge.span_cache_for(str(tmp_path / "spans")))
    assert run.dtype_name == "float32" and run.identity["source"] == "local"
    got = run.judge(text)
    # the same text judged directly: the evaluator's scores of it, with the same request
    model, tok = evaluator.load_evaluator(run.identity, dtype="float32", device="cpu")
    request = evaluator.evaluator_request(K, D, scoring.DEFAULT_CHUNK_SIZE, 4, "auto")
    expected = evaluator.judge_from_scores(text_scoring.score_text(model, tok, text, request, None), ALPHA, BETA)
    assert np.array_equal(got.spans, expected.spans) and len(got.spans)
    np.testing.assert_allclose(got.lsd, expected.lsd, rtol=0, atol=1e-5, equal_nan=True)
    assert run.scoring is not None and run.scoring["dtype"] == "float32"
    run.release()
    assert run._loaded is None

    def no_model(self):
        raise AssertionError("the evaluator was loaded although the text's spans are cached")

    again = _judge(model_dirs["b"], judge.span_cache_for(str(tmp_path / "spans")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(judge.EvaluatorJudge, "_load", no_model)
        cached = again.judge(text)
        assert np.array_equal(cached.spans, got.spans) and again.scoring is None
        # another alpha is another key: the evaluator is needed
        with pytest.raises(AssertionError, match="was loaded"):
            judge.EvaluatorJudge(
                str(model_dirs["b"]), None, K, D, ALPHA + 1, BETA, again.span_cache, device="cpu"
            ).judge(text)


@pytest.mark.integration
def test_a_cached_text_longer_than_the_evaluators_window_is_refused(model_dirs, corpus_texts, tmp_path):
    text = corpus_texts[0][:600]
    spans = judge.span_cache_for(str(tmp_path / "spans"))
    run = _judge(model_dirs["b"], spans)
    n_tokens = len(run.judge(text).offsets)
    short = _judge(model_dirs["b"], spans)
    short.max_length = n_tokens - 1
    with pytest.raises(scoring.ScoringError, match=str(n_tokens)):
        short.judge(text)
    beyond = _judge(model_dirs["b"], spans, allow_beyond_max_length=True)
    beyond.max_length = n_tokens - 1
    assert np.array_equal(beyond.judge(text).spans, run.judge(text).spans)


def test_the_span_cache_setting_names_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LM_EVAL_LONGCTX_CACHE", str(tmp_path / "root"))
    assert judge.span_cache_for("off").directory is None and judge.span_cache_for("none").directory is None
    assert judge.span_cache_for("default").directory == cache.default_cache_dir() == tmp_path / "root" / "key_spans"
    assert judge.span_cache_for(str(tmp_path / "mine")).directory == tmp_path / "mine"
