"""Shared fixtures: tiny random models and tokenizers built in the test, never downloaded."""

import os

# Any accidental hub access must fail loudly rather than hang or download.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # under `pytest -n N` every worker takes one core: torch's default of one thread per core in each worker would
    # run N times as many threads as there are cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from tests import tiny


@pytest.fixture(scope="session")
def corpus_texts():
    return tiny.corpus_texts()


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, corpus_texts):
    """Two tiny causal LMs with different tokenizers, saved as ordinary HF checkpoints."""
    root = tmp_path_factory.mktemp("models")
    a = tiny.save_tiny_model(root / "bpe_model", corpus_texts, kind="bpe", vocab_size=300, seed=1)
    b = tiny.save_tiny_model(root / "wordpiece_model", corpus_texts, kind="wordpiece", vocab_size=400, seed=2)
    return {"a": a, "b": b}


@pytest.fixture
def first_model_variants(monkeypatch):
    """The known-answer variants of the first demo model (COPY_ONLY_RECIPE, rope_theta 1e6 / 1e4) in place of the
    shipped recipe's, for the untrained (steps 0) pipeline tests whose reach must be sharp; each test says why."""
    from lm_eval_longctx.demo import model

    monkeypatch.setattr(model, "DEMO_RECIPE", model.COPY_ONLY_RECIPE)
    monkeypatch.setattr(model, "VARIANTS", model.variants_for(model.COPY_ONLY_RECIPE))


@pytest.fixture(scope="session")
def copy_only_variants(tmp_path_factory):
    """The known-answer variants (long, short, none) of the first demo model (COPY_ONLY_RECIPE, rope_theta 1e6 /
    1e4), untrained: the copy circuit alone, whose reach is sharp; their folder."""
    from lm_eval_longctx.demo import model

    root = tmp_path_factory.mktemp("copy_only_variants")
    recipe, known = model.DEMO_RECIPE, model.VARIANTS
    model.DEMO_RECIPE = model.COPY_ONLY_RECIPE
    model.VARIANTS = model.variants_for(model.COPY_ONLY_RECIPE)
    try:
        for name in model.VARIANT_ORDER:
            model.build_variant(name, root / name, steps=0, log=lambda *a: None)
    finally:
        model.DEMO_RECIPE, model.VARIANTS = recipe, known
    return root


def pytest_collection_modifyitems(config, items):
    """`slow` checks (trained-model properties, minutes each) run only with LM_EVAL_LONGCTX_SLOW=1."""
    if os.environ.get("LM_EVAL_LONGCTX_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow check: set LM_EVAL_LONGCTX_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
