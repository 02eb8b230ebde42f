"""A stage's key names what its numbers depend on: two checkpoints whose configs differ only in a field their scoring
does not read share their stages; any field it reads, or other weights, settings or documents, part them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lm_eval_longctx.audit import stages

CONFIG = {"model_type": "llama", "max_position_embeddings": 8192, "rope_parameters": {"rope_type": "default"}}
METADATA = {"data_files": "/a/corpus.jsonl", "context_lengths": [8192], "allow_beyond_max_length": False, "seed": 8192}


def checkpoint(folder: Path, config: dict, weights: bytes = b"weights") -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def key(folder: Path, metadata=None, corpus="c" * 64) -> str:
    return stages.stage_key(stages.model_fingerprint(folder), metadata or METADATA, corpus, {}, "cpu")


def test_a_twin_with_only_max_position_embeddings_raised_shares_the_stages(tmp_path):
    a = checkpoint(tmp_path / "a", CONFIG)
    b = checkpoint(tmp_path / "b", {**CONFIG, "max_position_embeddings": 32768, "_name_or_path": "elsewhere"})
    moved = {**METADATA, "data_files": "/b/corpus.jsonl", "allow_beyond_max_length": True}
    assert key(a) == key(b, moved)


@pytest.mark.parametrize("rope_type", ["dynamic", "yarn", "longrope", "llama3"])
def test_a_rope_type_that_reads_max_position_embeddings_keeps_it_in_the_key(tmp_path, rope_type):
    config = {**CONFIG, "rope_parameters": {"rope_type": rope_type, "factor": 4.0}}
    a = checkpoint(tmp_path / "a", config)
    b = checkpoint(tmp_path / "b", {**config, "max_position_embeddings": 32768})
    assert key(a) != key(b)


def test_weights_settings_documents_and_linear_scaling_part_the_stages(tmp_path):
    a = checkpoint(tmp_path / "a", CONFIG)
    assert key(a) != key(checkpoint(tmp_path / "w", CONFIG, b"other weights"))
    assert key(a) != key(a, {**METADATA, "seed": 1})
    assert key(a) != key(a, corpus="d" * 64)
    scaled = {**CONFIG, "rope_parameters": {"rope_type": "linear", "factor": 4.0}}
    assert key(a) != key(checkpoint(tmp_path / "s", scaled))
