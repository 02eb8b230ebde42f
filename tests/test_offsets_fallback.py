"""Character offsets rebuilt for tokenizers without an offset mapping: exact on multi-byte text, or an error.

Checked against an independent brute-force alignment: a byte-level token covers the characters that
hold its bytes (the text's UTF-8 encoding says which), which is also what fast tokenizers report."""

from __future__ import annotations

import numpy as np
import pytest
from transformers.tokenization_python import PythonBackend

from lm_eval_longctx.keytokens import spans_to_tokens as keyspans
from tests import tiny

NON_ASCII = (
    "Zoë's café — naïve 東京の空 🙂👍🏽 e\u0301 «quoted» ½ ĳ the report of committee 😀 found Ω ∑ x² and 中文字符 end. "
)


def char_spans_of_byte_tokens(text: str, token_bytes: list[bytes]) -> np.ndarray:
    """Brute force: the character span of every token, from where its bytes lie in text.encode()."""
    char_of_byte = []
    for k, ch in enumerate(text):
        char_of_byte.extend([k] * len(ch.encode("utf-8")))
    out, pos = [], 0
    for b in token_bytes:
        if not b:
            out.append((char_of_byte[pos] if pos < len(char_of_byte) else len(text),) * 2)
            continue
        first, last = char_of_byte[pos], char_of_byte[pos + len(b) - 1]
        out.append((first, last + 1))
        pos += len(b)
    assert pos == len(text.encode("utf-8"))
    return np.asarray(out, dtype=np.int64)


class ByteChunkTokenizer(PythonBackend):
    """A python (slow) tokenizer: the text's UTF-8 bytes in chunks of 1-3, so tokens split characters.

    Vocabulary: the special tokens, then every 1-3 byte string seen (built from the training text)."""

    vocab_files_names = {}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, texts=(), **kwargs):
        self.pieces = ["<pad>", "<s>", "</s>", "<unk>"]
        for t in texts:
            for chunk in self._chunks(t.encode("utf-8")):
                if chunk.hex() not in self.pieces:
                    self.pieces.append(chunk.hex())
        self.index = {p: i for i, p in enumerate(self.pieces)}
        super().__init__(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", **kwargs)

    @staticmethod
    def _chunks(data: bytes):
        i, k = 0, 0
        while i < len(data):
            n = 1 + k % 3
            yield data[i : i + n]
            i, k = i + n, k + 1

    @property
    def vocab_size(self):
        return len(self.pieces)

    def get_vocab(self):
        return dict(self.index)

    def _tokenize(self, text, **kwargs):
        return [c.hex() for c in self._chunks(text.encode("utf-8"))]

    def _convert_token_to_id(self, token):
        return self.index.get(token, 3)

    def _convert_id_to_token(self, index):
        return self.pieces[index]

    def convert_tokens_to_string(self, tokens):
        data = b"".join(bytes.fromhex(t) for t in tokens if t not in ("<pad>", "<s>", "</s>", "<unk>"))
        return data.decode("utf-8", errors="replace")

    def build_inputs_with_special_tokens(self, ids0, ids1=None):
        return [1] + ids0 + (ids1 or [])

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return ()


def test_python_tokenizer_ignores_offsets_request_and_fallback_is_exact():
    tok = ByteChunkTokenizer([NON_ASCII])
    enc = tok(NON_ASCII, add_special_tokens=False, return_offsets_mapping=True)
    assert enc.get("offset_mapping") is None  # transformers 5: ignored, not an error
    ids, offsets = keyspans.token_offsets(tok, NON_ASCII, add_special_tokens=False)
    brute = char_spans_of_byte_tokens(NON_ASCII, [bytes.fromhex(tok.pieces[i]) for i in ids])
    assert np.array_equal(offsets, brute)
    # with BOS: a zero-width span at 0, the rest unchanged
    ids_bos, offsets_bos = keyspans.token_offsets(tok, NON_ASCII, add_special_tokens=True)
    assert ids_bos[0] == tok.bos_token_id and tuple(offsets_bos[0]) == (0, 0)
    assert np.array_equal(offsets_bos[1:], brute)


def test_fallback_equals_fast_byte_level_offsets_on_non_ascii(tmp_path):
    """A byte-level BPE whose pieces split characters: the rebuilt offsets equal both the brute-force
    alignment and the fast tokenizer's own offset mapping."""
    fast = tiny.train_tokenizer([NON_ASCII * 3] + tiny.corpus_texts(2, 200), vocab_size=320, kind="bpe")
    text = NON_ASCII * 2
    enc = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, real = enc["input_ids"], np.asarray(enc["offset_mapping"])
    byte_decoder = {v: k for k, v in _bytes_to_unicode().items()}
    token_bytes = [bytes(byte_decoder[c] for c in fast.convert_ids_to_tokens(i)) for i in ids]
    assert any(len(b) and not _is_whole_chars(b) for b in token_bytes), "the test text must split characters"
    brute = char_spans_of_byte_tokens(text, token_bytes)
    rebuilt = keyspans.offsets_by_decoding(fast, ids, text)
    assert np.array_equal(rebuilt, brute)
    assert np.array_equal(real, brute)


def test_key_tokens_through_the_fallback_equal_those_through_real_offsets():
    """The same key spans select the same evaluated tokens whether offsets are real or rebuilt."""
    fast = tiny.train_tokenizer([NON_ASCII * 3], vocab_size=300, kind="bpe")
    text = NON_ASCII * 3
    ids, real = keyspans.token_offsets(fast, text, add_special_tokens=False)
    rebuilt = keyspans.offsets_by_decoding(fast, ids, text)
    rng = np.random.default_rng(0)
    picks = np.sort(rng.choice(len(ids), 40, replace=False))
    spans = keyspans.merge_touching_spans([tuple(real[p]) for p in picks])
    assert np.array_equal(keyspans.key_target_indices(rebuilt, spans), keyspans.key_target_indices(real, spans))


def test_a_tokenizer_that_does_not_reproduce_the_text_is_an_error():
    tok = ByteChunkTokenizer([NON_ASCII])

    class Lowercasing(ByteChunkTokenizer):
        def _tokenize(self, text, **kwargs):
            return super()._tokenize(text.lower(), **kwargs)

    lower = Lowercasing([NON_ASCII.lower()])
    ids = lower(NON_ASCII, add_special_tokens=False)["input_ids"]
    with pytest.raises(keyspans.OffsetsError, match="does not reproduce the text"):
        keyspans.offsets_by_decoding(lower, ids, NON_ASCII)
    ids = tok(NON_ASCII, add_special_tokens=False)["input_ids"]
    with pytest.raises(keyspans.OffsetsError):  # a token missing at the end
        keyspans.offsets_by_decoding(tok, ids[:-1], NON_ASCII)


def _is_whole_chars(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte <-> printable character table (as the ByteLevel pre-tokenizer uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
