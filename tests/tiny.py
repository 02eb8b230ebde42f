"""Tiny random models and tokenizers for tests (built here, saved to a temp dir)."""

from __future__ import annotations

import random
from pathlib import Path

from lm_eval_longctx.demo.offline import random_llama, train_tokenizer

WORDS = (
    "the report of committee found that federal agency program budget funds were spent on projects "
    "while audit office said its review of costs data showed gaps in oversight and controls over "
    "contracts grants loans states local officials should improve planning for risk"
).split()


def corpus_texts(n_docs: int = 6, n_words: int = 900, seed: int = 0) -> list[str]:
    """Synthetic documents with repeated phrases (so a long context can matter)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        words = [rng.choice(WORDS) for _ in range(n_words)]
        for _ in range(6):  # copy a span forward: later tokens repeat earlier ones
            a = rng.randrange(0, n_words // 2)
            span = words[a : a + 20]
            b = rng.randrange(n_words // 2, n_words - 20)
            words[b : b + 20] = span
        text = " ".join(words)
        # punctuation and newlines exercise offsets
        docs.append(text.replace(" of ", ", of ").replace(" and ", ".\nAnd "))
    return docs


def tiny_llama(vocab_size: int = 97, seed: int = 0, max_position_embeddings: int = 4096, **overrides):
    """A 2-layer, width-32 random Llama in float32 (the offline builder, smaller)."""
    cfg = dict(hidden_size=32, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.update(overrides)
    # a peaked head, so log-probs and argmaxes vary
    return random_llama(vocab_size, seed=seed, max_position_embeddings=max_position_embeddings, head_scale=20.0, **cfg)


def save_tiny_model(
    path: Path,
    texts: list[str],
    kind: str = "bpe",
    vocab_size: int = 300,
    seed: int = 0,
    max_position_embeddings: int = 4096,
) -> str:
    path = Path(path)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, kind=kind)
    model = tiny_llama(
        vocab_size=len(tokenizer),
        seed=seed,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
