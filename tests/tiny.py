"""Tiny random models and tokenizers for tests (built here, saved to a temp dir)."""

from __future__ import annotations

import contextlib
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
    **config_overrides,
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
        **config_overrides,
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def load(path):
    """A saved checkpoint as (model in float32, eval mode; its tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


@contextlib.contextmanager
def writes_cut_at(n_bytes: int):
    """Writes past the first ``n_bytes`` of any file fail as on a nearly full disk (EFBIG, "File too large", through
    RLIMIT_FSIZE), leaving what was written before, in every code path (Python, numpy, matplotlib), without root."""
    import resource
    import signal

    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the failed write returns EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


def write_small_gguf(path: Path) -> Path:
    """A small GGUF file of a Llama (the gguf package's writer): a byte tokenizer, a Q8_0 embedding and a float32
    norm; enough for the GGUF reader and the conversion's checks of the file, not a whole model."""
    import gguf
    import numpy as np
    from gguf import quants

    tokens = [f"<0x{b:02X}>" for b in range(256)]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_head_count(2)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    rng = np.random.default_rng(0)
    embedding = (rng.standard_normal((len(tokens), 32)) * 0.05).astype(np.float32)
    q8 = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor("token_embd.weight", quants.quantize(embedding, q8), raw_dtype=q8)
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: the 256 symbols a byte-level BPE vocabulary starts with."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(path: Path, architecture: str = "llama", extra=None) -> Path:
    """A tiny Llama as a GGUF file: Q8_0 matrices, float32 norms, a byte-level BPE tokenizer and a chat template."""
    import gguf
    import numpy as np
    from gguf import quants

    rng = np.random.default_rng(0)
    tokens = _bytes_to_unicode() + ["Ġt", "he", "Ġthe", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab, hidden, inter, layers, heads, kv = len(tokens), 64, 128, 2, 4, 2
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * vocab)
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    q8 = gguf.GGMLQuantizationType.Q8_0

    def tensor(name, shape, quantize=True):
        a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if quantize:
            w.add_tensor(name, quants.quantize(a, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, a)

    tensor("token_embd.weight", (vocab, hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,), False)
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,), False)
        tensor(f"blk.{i}.attn_q.weight", (hidden, hidden))
        tensor(f"blk.{i}.attn_k.weight", (kv * hidden // heads, hidden))
        tensor(f"blk.{i}.attn_v.weight", (kv * hidden // heads, hidden))
        tensor(f"blk.{i}.attn_output.weight", (hidden, hidden))
        tensor(f"blk.{i}.ffn_gate.weight", (inter, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (inter, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, inter))
    tensor("output_norm.weight", (hidden,), False)
    if extra is not None:
        extra(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def sliding_window_twin(llama_dir: Path, out: Path, window: int) -> str:
    """The Llama checkpoint ``llama_dir`` (q, k and v biases; an o_proj bias of zeros, checked) as a Qwen2 whose every
    layer attends over the last ``window`` positions alone: the same tensors and tokenizer, its reach bounded by the
    window whatever its RoPE would reach. Qwen2 and not Mistral, whose attention has no bias; the engine scores Qwen2's
    sliding window exactly (docs/support.md)."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    llama_dir, out = Path(llama_dir), Path(out)
    out.mkdir(parents=True)
    tensors = load_file(str(llama_dir / "model.safetensors"))
    for name in [n for n in tensors if n.endswith("o_proj.bias")]:
        if tensors.pop(name).any():
            raise ValueError(f"{llama_dir}: {name} is not zero: Qwen2's o_proj has no bias")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    for path in llama_dir.iterdir():
        if path.name.startswith("tokenizer") or path.name == "generation_config.json":
            shutil.copy2(path, out / path.name)
    config = json.loads((llama_dir / "config.json").read_text(encoding="utf-8"))
    if not (config["attention_bias"] and not config.get("mlp_bias")):
        raise ValueError(f"{llama_dir}: expected attention biases and none in the MLP, as Qwen2 has")
    for name in ("attention_bias", "mlp_bias", "pretraining_tp"):
        config.pop(name, None)
    n_layers = config["num_hidden_layers"]
    config.update(
        model_type="qwen2",
        architectures=["Qwen2ForCausalLM"],
        use_sliding_window=True,
        sliding_window=int(window),
        max_window_layers=0,
        layer_types=["sliding_attention"] * n_layers,
    )
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return str(out)
