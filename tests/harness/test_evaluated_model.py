"""harness/evaluated_model.py: the model a call evaluates, and the refusals, before any work, of what the engine
cannot score faithfully."""

from __future__ import annotations

import types

import pytest
import torch

from lm_eval_longctx.harness import evaluated_model


def test_the_backend_check_names_every_overridden_scoring_method():
    from lm_eval.models.huggingface import HFLM

    class Rolling(HFLM):
        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return []

        def _loglikelihood_tokens(self, requests, **kwargs):
            return []

    evaluated_model.check_backend(HFLM)  # plain hf serves
    with pytest.raises(
        evaluated_model.UnfaithfulBackendError, match=r"HFLM\._loglikelihood_tokens, HFLM\.loglikelihood_rolling"
    ):
        evaluated_model.check_backend(Rolling, python_api=True)
    with pytest.raises(evaluated_model.UnfaithfulBackendError, match="pass a plain HFLM to simple_evaluate"):
        evaluated_model.check_backend(Rolling, python_api=True)


class _Tokenizer:
    name_or_path = "tiny-tokenizer"

    def __init__(self, n_ids: int):
        self.n_ids = n_ids

    def __len__(self) -> int:
        return self.n_ids


def _lm(rows: int, n_ids: int):
    model = types.SimpleNamespace(get_input_embeddings=lambda: torch.nn.Embedding(rows, 2))
    return types.SimpleNamespace(model=model, tokenizer=_Tokenizer(n_ids))


def test_a_tokenizer_with_more_ids_than_embedding_rows_is_refused_naming_both():
    evaluated_model.check_vocabulary(_lm(rows=10, n_ids=10))  # every id has its row
    evaluated_model.check_vocabulary(_lm(rows=12, n_ids=10))  # padded embeddings are common
    with pytest.raises(evaluated_model.VocabularyMismatchError, match=r"t: the tokenizer tiny-tokenizer has 11 token"):
        evaluated_model.check_vocabulary(_lm(rows=10, n_ids=11), "t")
    evaluated_model.check_vocabulary(types.SimpleNamespace(model=None, tokenizer=None))  # nothing to compare


def test_the_evaluated_model_reads_its_max_length_and_words_for_the_api_used():
    lm = types.SimpleNamespace(max_length=2048, tokenizer="tok", model=None)
    from_args = evaluated_model.EvaluatedModel(lm, python_api=False)
    assert from_args.max_length == 2048 and from_args.tokenizer == "tok" and from_args.claimed_window() is None
    assert "--model_args max_length=N" in from_args.max_length_words()
    assert "simple_evaluate (Python API)" in evaluated_model.EvaluatedModel(lm, python_api=True).max_length_words()
    assert evaluated_model.EvaluatedModel(types.SimpleNamespace(max_length=True), False).max_length is None
