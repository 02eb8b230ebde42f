"""Key spans mapped to tokens (``keytokens/spans_to_tokens.py``) against the LongPPL reference functions and brute
force; character offsets rebuilt for tokenizers without an offset mapping: exact on multi-byte text, or an error,
checked against an independent brute-force alignment (a byte-level token covers the characters that hold its bytes,
which the text's UTF-8 encoding says, and which is also what fast tokenizers report)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.tokenization_python import PythonBackend

from lm_eval_longctx.keytokens import spans_to_tokens
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
    ids, offsets = spans_to_tokens.token_offsets(tok, NON_ASCII, add_special_tokens=False)
    brute = char_spans_of_byte_tokens(NON_ASCII, [bytes.fromhex(tok.pieces[i]) for i in ids])
    assert np.array_equal(offsets, brute)
    # with BOS: a zero-width span at 0, the rest unchanged
    ids_bos, offsets_bos = spans_to_tokens.token_offsets(tok, NON_ASCII, add_special_tokens=True)
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
    rebuilt = spans_to_tokens.offsets_by_decoding(fast, ids, text)
    assert np.array_equal(rebuilt, brute)
    assert np.array_equal(real, brute)


def test_key_tokens_through_the_fallback_equal_those_through_real_offsets():
    """The same key spans select the same evaluated tokens whether offsets are real or rebuilt."""
    fast = tiny.train_tokenizer([NON_ASCII * 3], vocab_size=300, kind="bpe")
    text = NON_ASCII * 3
    ids, real = spans_to_tokens.token_offsets(fast, text, add_special_tokens=False)
    rebuilt = spans_to_tokens.offsets_by_decoding(fast, ids, text)
    rng = np.random.default_rng(0)
    picks = np.sort(rng.choice(len(ids), 40, replace=False))
    spans = spans_to_tokens.merge_touching_spans([tuple(real[p]) for p in picks])
    assert np.array_equal(
        spans_to_tokens.key_target_indices(rebuilt, spans), spans_to_tokens.key_target_indices(real, spans)
    )


def test_a_tokenizer_that_does_not_reproduce_the_text_is_an_error():
    tok = ByteChunkTokenizer([NON_ASCII])

    class Lowercasing(ByteChunkTokenizer):
        def _tokenize(self, text, **kwargs):
            return super()._tokenize(text.lower(), **kwargs)

    lower = Lowercasing([NON_ASCII.lower()])
    ids = lower(NON_ASCII, add_special_tokens=False)["input_ids"]
    with pytest.raises(spans_to_tokens.OffsetsError, match="does not reproduce the text"):
        spans_to_tokens.offsets_by_decoding(lower, ids, NON_ASCII)
    ids = tok(NON_ASCII, add_special_tokens=False)["input_ids"]
    with pytest.raises(spans_to_tokens.OffsetsError):  # a token missing at the end
        spans_to_tokens.offsets_by_decoding(tok, ids[:-1], NON_ASCII)


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


def test_byt5_partial_characters_decode_to_nothing_and_are_grouped():
    """ByT5 decodes a partial UTF-8 sequence to '' (not U+FFFD): each byte token of a 2-, 3- or 4-byte character
    covers that character, as a fast byte-level tokenizer's offsets do."""
    from transformers import ByT5Tokenizer

    tok = ByT5Tokenizer()
    text = "aé b中c😀 dé中😀x 😀"
    ids, offsets = spans_to_tokens.token_offsets(tok, text, add_special_tokens=False)
    token_bytes = [bytes([i - 3]) for i in ids]  # ByT5: id = byte + 3 (pad, eos, unk first)
    assert b"".join(token_bytes) == text.encode("utf-8")
    assert np.array_equal(offsets, char_spans_of_byte_tokens(text, token_bytes))
    complete = [text[s:e] for k, (s, e) in enumerate(offsets) if k + 1 == len(offsets) or offsets[k + 1][0] >= e]
    assert "".join(complete) == text
    # with the EOS ByT5 appends: a zero-width span at the end, the rest unchanged
    ids_eos, offsets_eos = spans_to_tokens.token_offsets(tok, text, add_special_tokens=True)
    assert ids_eos[-1] == tok.eos_token_id and tuple(offsets_eos[-1]) == (len(text), len(text))
    assert np.array_equal(offsets_eos[:-1], offsets)
    # a character cut short is still an error
    with pytest.raises(spans_to_tokens.OffsetsError):
        spans_to_tokens.offsets_by_decoding(tok, ids[:-1], text)


class WrongOffsets:
    """A tokenizer (custom code) whose offset mapping does not fit the text: shifted, or all (0, 0)."""

    name_or_path = "someone/wrong-offsets"

    def __init__(self, tokenizer, change):
        self.tokenizer, self.change = tokenizer, change

    def __call__(self, text, **kwargs):
        enc = self.tokenizer(text, **kwargs)
        if enc.get("offset_mapping") is not None:
            enc["offset_mapping"] = self.change([tuple(p) for p in enc["offset_mapping"]], len(text))
        return enc

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def _each(change):
    return lambda pairs, n: [change(s, e, n) for s, e in pairs]


def _last_two_swapped(pairs, n):
    return pairs[:-2] + [pairs[-1], pairs[-2]]


WRONG_OFFSETS = {
    "shifted +3": (_each(lambda s, e, n: (s + 3, e + 3)), r"token \d+ has offsets \(\d+, \d+\), not 0 <= start"),
    "shifted -3": (_each(lambda s, e, n: (s - 3, e - 3)), r"token [01] has offsets \(-3, -?\d+\), not 0 <= start"),
    "shifted +3 within the text": (
        _each(lambda s, e, n: (min(s + 3, n), min(e + 3, n))),
        r"character 0 \('t'\) lies in no token's offsets \(token [01], the first that ends after it",
    ),
    "all (0, 0)": (
        _each(lambda s, e, n: (0, 0)),
        r"character 0 \('t'\) lies in no token's offsets \(token \d+, the last",
    ),
    "two swapped": (_last_two_swapped, r"token \d+ has offsets \(\d+, \d+\), going back from token \d+'s"),
}
TEXT = "the report of committee found that federal agency program budget funds were spent on projects"


@pytest.mark.parametrize("name", list(WRONG_OFFSETS))
@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_an_offset_mapping_that_does_not_fit_the_text_is_an_error(name, add_special_tokens):
    fast = tiny.train_tokenizer(tiny.corpus_texts(2, 200), vocab_size=300, kind="bpe")
    spans_to_tokens.token_offsets(fast, TEXT, add_special_tokens)  # the real mapping passes
    change, message = WRONG_OFFSETS[name]
    with pytest.raises(spans_to_tokens.OffsetsError, match=message) as err:
        spans_to_tokens.token_offsets(WrongOffsets(fast, change), TEXT, add_special_tokens)
    assert "someone/wrong-offsets" in str(err.value) and "fast tokenizer of the same model" in str(err.value)


def test_normalizers_may_leave_whitespace_control_and_format_characters_uncovered():
    text = "word\u200b next\u00ad end\x07 e\u0301"
    offsets = np.array([(0, 4), (6, 10), (12, 15), (17, 18)])  # no token over the spaces, U+200B, U+00AD, BEL, U+0301
    spans_to_tokens.check_offsets(offsets, text, tokenizer=None)
    with pytest.raises(spans_to_tokens.OffsetsError, match=r"character 17 \('e'\)"):
        spans_to_tokens.check_offsets(offsets[:3], text, tokenizer=None)


# ------------------------------------------------------------------ spans to tokens, against the LongPPL reference


def random_spans(rng, n_chars=500):
    cuts = np.sort(rng.choice(np.arange(1, n_chars), size=rng.integers(2, 40), replace=False))
    pieces = list(zip(np.r_[0, cuts], np.r_[cuts, n_chars]))
    return [(int(a), int(b)) for a, b in pieces if rng.random() < 0.3]


def random_offsets(rng, n_chars=500):
    cuts = np.sort(rng.choice(np.arange(1, n_chars), size=rng.integers(10, 200), replace=False))
    return np.stack([np.r_[0, cuts], np.r_[cuts, n_chars]], 1)


def test_merge_matches_reference_merge_intervals():
    longppl = pytest.importorskip("longppl.longppl")
    rng = np.random.default_rng(1)
    for _ in range(200):
        offs = random_offsets(rng)
        keep = rng.random(len(offs)) < 0.4
        spans = [tuple(map(int, o)) for o in offs[keep]]
        ref = longppl.merge_intervals(torch.tensor(spans, dtype=torch.long).reshape(-1, 2)).tolist()
        assert spans_to_tokens.merge_touching_spans(spans) == [tuple(x) for x in ref]


def test_containment_matches_reference_cal_overlap():
    longppl = pytest.importorskip("longppl.longppl")
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(300):
        spans = spans_to_tokens.merge_touching_spans(random_spans(rng))
        offsets = random_offsets(rng)
        ref = [i for i in longppl.cal_overlap(offsets.tolist(), [list(s) for s in spans]) if i >= 0]
        assert spans_to_tokens.key_target_indices(offsets, spans).tolist() == ref
        # and a brute-force statement of the rule
        brute = [i - 1 for i, (a, b) in enumerate(offsets) if i >= 1 and any(s <= a and b <= e for s, e in spans)]
        assert ref == brute
        hits += len(ref)
    assert hits > 100


def test_tokens_sharing_a_character_span_match_the_reference():
    """Byte-level BPE: one character split into several tokens with the same offsets. Key spans built
    from such tokens repeat (the reference's merge keeps duplicates); containment must still be the
    reference's."""
    longppl = pytest.importorskip("longppl.longppl")
    rng = np.random.default_rng(3)
    for _ in range(300):
        offs = random_offsets(rng)
        # duplicate some tokens' offsets, as the bytes of one multi-byte character
        dup = rng.random(len(offs)) < 0.3
        offs = np.repeat(offs, np.where(dup, rng.integers(2, 4, len(offs)), 1), axis=0)
        keep = rng.random(len(offs)) < 0.5
        spans = spans_to_tokens.key_spans_from_tokens(keep[1:], offs)
        ref_spans = longppl.merge_intervals(torch.tensor(offs[1:][keep[1:]], dtype=torch.long).reshape(-1, 2))
        assert spans == [tuple(x) for x in ref_spans.tolist()]
        ref = [i for i in longppl.cal_overlap(offs.tolist(), [list(x) for x in spans]) if i >= 0]
        assert spans_to_tokens.key_target_indices(offs, spans).tolist() == ref
    assert spans_to_tokens.merge_touching_spans([(10, 11), (10, 11), (11, 15)]) == [(10, 11), (10, 15)]
    assert spans_to_tokens.tokens_inside_spans(
        np.array([[10, 11], [10, 11], [11, 13]]), [(10, 11), (10, 15)]
    ).tolist() == [
        0,
        1,
        2,
    ]


def test_offsets_rebuilt_by_decoding_match_real_offsets(model_dirs, corpus_texts):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dirs["a"])  # byte-level BPE: decoding is lossless
    text = corpus_texts[0][:2000]
    ids, real = spans_to_tokens.token_offsets(tok, text, add_special_tokens=False)
    rebuilt = spans_to_tokens.offsets_by_decoding(tok, ids, text)
    assert np.array_equal(rebuilt, real)

    class NoOffsets:
        """A tokenizer without offset mapping (like tiktoken-style ones)."""

        pad_token_id = 0

        def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
            if return_offsets_mapping:
                raise NotImplementedError("return_offset_mapping is not available")
            return tok(text, add_special_tokens=add_special_tokens)

        def decode(self, ids, **kw):
            return tok.decode(ids, **kw)

    ids2, offs2 = spans_to_tokens.token_offsets(NoOffsets(), text, add_special_tokens=False)
    assert ids2 == ids and np.array_equal(offs2, real)
