"""An offline default: long documents from text every Python has, and a tiny model built locally.

Nothing here downloads anything. The texts are the Python language reference topics shipped with
CPython (``pydoc_data.topics``, PSF licence); the model is a small random-weight Llama with a BPE
tokenizer trained on those texts by the ``tokenizers`` library. It exercises the whole pipeline; a
model that really uses its context is the subject of the offline-demo work.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import output_dirs


def python_reference_documents(n_docs: int = 4, chars_per_doc: int = 40_000) -> list[str]:
    """Deterministic documents: the reference topics, in name order, concatenated and cut."""
    from pydoc_data.topics import topics

    stream = "\n\n".join(topics[k].strip() for k in sorted(topics))
    if n_docs * chars_per_doc > len(stream):
        raise ValueError(f"only {len(stream)} characters of text are available offline")
    return [stream[i * chars_per_doc : (i + 1) * chars_per_doc] for i in range(n_docs)]


def train_tokenizer(texts: list[str], vocab_size: int = 2048, kind: str = "bpe"):
    """A small fast tokenizer (byte-level BPE or WordPiece) that adds BOS, with offsets."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "<s>", "</s>", "<unk>"]
    trainer: trainers.Trainer
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    tok.train_from_iterator(texts, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


def random_llama(
    vocab_size: int,
    seed: int = 0,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    max_position_embeddings: int = 16384,
    head_scale: float = 1.0,
    **config,
):
    """A small LlamaForCausalLM with random weights (float32, eval mode).

    ``head_scale`` multiplies the output head: default-initialised random models predict nearly
    uniformly (every log-prob about -log(vocab)), so checks of agreement between two scoring paths
    would compare near-equal values; a scale such as 20 makes the predictions peaked."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        max_position_embeddings=max_position_embeddings,
        **{"num_attention_heads": 4, "num_key_value_heads": 2, **config},
    )
    model = LlamaForCausalLM(cfg).float().eval()
    if head_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    return model


# Larger random weights than the usual 0.02 make a random model's predictions depend on its
# context, so some tokens gain from the long context and LongPPL is defined for the demo.
DEMO_INITIALIZER_RANGE = 0.3
# A random model is never confident (log-probs far below the default beta = -2).
DEMO_METADATA = {"evaluator": "self", "trunc_len": 2048, "sliding_window": 512, "beta": -20.0}


def build_demo(
    out_dir: str | Path, n_docs: int = 4, chars_per_doc: int = 24_000, vocab_size: int = 2048, seed: int = 0
) -> dict:
    """Write ``model/`` (tiny checkpoint + tokenizer) and ``docs.jsonl`` under ``out_dir``."""
    out = Path(out_dir)
    docs = python_reference_documents(n_docs, chars_per_doc)
    tokenizer = train_tokenizer(docs, vocab_size=vocab_size)
    model = random_llama(
        len(tokenizer),
        seed=seed,
        initializer_range=DEMO_INITIALIZER_RANGE,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    with output_dirs.atomic_file(out / "docs.jsonl", "w") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    n_tokens = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in docs]
    return {
        "model": str(out / "model"),
        "docs": str(out / "docs.jsonl"),
        "tokens_per_doc": n_tokens,
        "metadata": {"data_files": str(out / "docs.jsonl"), **DEMO_METADATA},
    }
