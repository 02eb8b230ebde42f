"""Key-token character spans: choosing them, mapping them across tokenizers, reading/writing files.

Follows the LongPPL reference exactly (see docs/tasks/longppl_govreport.md):
* key evaluator tokens become character spans (offset mapping); spans that touch exactly
  (next.start == prev.end) are merged, others stay separate;
* an evaluated-model token is key iff its character span lies inside one key span;
* files hold ``[start, end]`` pairs joined by ``;`` on one line (``slice_{i}.txt``). They are parsed
  as data (a strict pattern), never evaluated.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence

import numpy as np

Span = tuple[int, int]
log = logging.getLogger("lm_eval_longctx")


class KeySpanFormatError(ValueError):
    """A key-span file that is not in the documented format."""


def merge_touching_spans(spans: Sequence[Span]) -> list[Span]:
    """Merge consecutive spans where next.start == prev.end (the reference's merge_intervals)."""
    merged: list[list[int]] = []
    for s, e in spans:
        if merged and int(s) == merged[-1][1]:
            merged[-1][1] = int(e)
        else:
            merged.append([int(s), int(e)])
    return [(s, e) for s, e in merged]


def key_spans_from_tokens(key_mask: np.ndarray, offsets: np.ndarray) -> list[Span]:
    """Character spans of the key tokens.

    ``key_mask`` is over targets (index t - 1 is token t, as the engine returns them); ``offsets``
    is the [n, 2] character offset mapping of all n tokens.
    """
    offsets = np.asarray(offsets)
    positions = np.flatnonzero(np.asarray(key_mask)) + 1
    return merge_touching_spans([(int(offsets[p, 0]), int(offsets[p, 1])) for p in positions])


def tokens_inside_spans(offsets: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Indices of tokens whose character span lies fully inside a key span.

    Spans must be sorted by start. They may overlap: a byte-level BPE splits one character (a curly
    quote, a dash) into several tokens that share its character span, so two key tokens can give
    the same span, and the reference's merge keeps both. A token is key when some span contains it,
    which for the monotone offsets of a tokenizer is what the reference's two-pointer walk
    (``cal_overlap``) finds; a token partly inside a span is not key.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if len(spans) == 0 or len(offsets) == 0:
        return np.zeros(0, dtype=np.int64)
    sp = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if np.any(sp[1:, 0] < sp[:-1, 0]):
        raise KeySpanFormatError("key spans must be sorted by start")
    # among the spans starting at or before the token's start, the one reaching furthest decides
    reach = np.maximum.accumulate(sp[:, 1])
    j = np.searchsorted(sp[:, 0], offsets[:, 0], side="right") - 1
    ok = j >= 0
    inside = ok & (offsets[:, 1] <= reach[np.clip(j, 0, None)])
    return np.flatnonzero(inside)


def token_holding_last_character(holder_offsets: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """For each token of one tokenization (``offsets`` [n, 2]), the index of the token of another tokenization of
    the same text (``holder_offsets`` [m, 2], sorted by start) that holds its last character: how LongPPL-soft maps
    the evaluator's weights, and the per-token export its LSD, onto the evaluated model's tokens."""
    starts = np.asarray(holder_offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    last_char = np.maximum(offsets[:, 1] - 1, offsets[:, 0])
    return np.clip(np.searchsorted(starts, last_char, side="right") - 1, 0, max(len(starts) - 1, 0))


def key_target_indices(offsets: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Key tokens of the evaluated model as indices into its per-target arrays (token i -> i - 1).

    Token 0 has no prediction (the evaluated text is tokenized without BOS), so it is never key;
    the reference would index -1 (the last token) there.
    """
    idx = tokens_inside_spans(offsets, spans)
    return idx[idx >= 1] - 1


# ---------------------------------------------------------------- offsets


def token_offsets(tokenizer, text: str, add_special_tokens: bool) -> tuple[list[int], np.ndarray]:
    """Token ids and [n, 2] character offsets of ``text``.

    Tokenizers with an offset mapping (the fast, Rust-backed ones) give it directly. Others (python
    tokenizers, which in transformers 5 ignore ``return_offsets_mapping`` instead of raising; tiktoken
    style) get offsets rebuilt exactly by decoding (``offsets_by_decoding``), or a clear error. A mapping the
    tokenizer returns is checked against the text first (``check_offsets``).
    """
    enc = None
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError):
        enc = None
    if enc is not None and enc.get("offset_mapping") is not None:
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        check_offsets(offsets, text, tokenizer)
        return list(enc["input_ids"]), offsets
    ids = (
        list(enc["input_ids"])
        if enc is not None
        else list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    )
    return ids, offsets_by_decoding(tokenizer, ids, text)


class OffsetsError(ValueError):
    """Character offsets that cannot be rebuilt exactly for a tokenizer without an offset mapping, or an offset
    mapping that does not fit the text it was computed for."""


# Characters a tokenizer's normalizer may drop (control and format characters such as a zero-width space or a
# soft hyphen; combining marks under accent stripping), so no token need cover them.
_MAY_BE_UNCOVERED = ("Cc", "Cf", "Mn")


def check_offsets(offsets: np.ndarray, text: str, tokenizer) -> None:
    """An offset mapping that fits ``text``, or ``OffsetsError`` naming the tokenizer and the first bad token.

    Every pair lies in [0, len(text)] with start <= end; starts and ends never decrease (tokens at (0, 0), the
    special tokens, are not placed); every character other than whitespace (and control, format and combining
    characters, which normalizers drop) is covered by a token of width > 0. A mapping that breaks these (custom
    tokenizer code) would select other key tokens, or none, without any other sign.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    problem = None
    bad = np.flatnonzero((starts < 0) | (ends > len(text)) | (starts > ends))
    if len(bad):
        i = int(bad[0])
        problem = f"token {i} has offsets ({starts[i]}, {ends[i]}), not 0 <= start <= end <= {len(text)}"
    placed = np.flatnonzero((starts != 0) | (ends != 0))
    back = np.flatnonzero((np.diff(starts[placed]) < 0) | (np.diff(ends[placed]) < 0))
    if problem is None and len(back):
        i, prev = int(placed[back[0] + 1]), int(placed[back[0]])
        problem = (
            f"token {i} has offsets ({starts[i]}, {ends[i]}), going back from token {prev}'s "
            f"({starts[prev]}, {ends[prev]})"
        )
    if problem is None:
        c = _first_uncovered_character(offsets, text)
        if c is not None:
            after = np.flatnonzero(ends > c)
            i = int(after[0]) if len(after) else len(offsets) - 1
            problem = f"character {c} ({text[c]!r}) lies in no token's offsets"
            if i >= 0:
                which = "the first that ends after it" if len(after) else "the last, and none ends after it"
                problem += f" (token {i}, {which}, has offsets ({starts[i]}, {ends[i]}))"
    if problem is not None:
        name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        raise OffsetsError(
            f"the offset mapping of the tokenizer {name} does not fit the {len(text)}-character text: {problem}. "
            "Key tokens and answer positions found with it would be wrong. Use a tokenizer with a correct offset "
            "mapping (e.g. the fast tokenizer of the same model), or report this to the tokenizer's author."
        )


def _first_uncovered_character(offsets: np.ndarray, text: str) -> int | None:
    """The first character that must be covered (see ``check_offsets``) and lies in no token of width > 0."""
    wide = offsets[:, 1] > offsets[:, 0]
    depth = np.zeros(len(text) + 1, dtype=np.int64)
    np.add.at(depth, offsets[wide, 0], 1)
    np.add.at(depth, offsets[wide, 1], -1)
    for c in np.flatnonzero(np.cumsum(depth[:-1]) == 0):
        ch = text[c]
        if not ch.isspace() and unicodedata.category(ch) not in _MAY_BE_UNCOVERED:
            return int(c)
    return None


def offsets_by_decoding(tokenizer, ids: Sequence[int], text: str) -> np.ndarray:
    """Exact character offsets for a tokenizer without an offset mapping, rebuilt by decoding.

    Each token's text is what decoding it after the previous complete token adds (so SentencePiece's
    leading-space rule and multi-token characters are handled). A token that ends inside a character
    (a byte-level piece of an emoji or a CJK character, which decodes to U+FFFD or, as ByT5's does, to
    nothing) covers that whole character, and so does the token that completes it: the convention of the
    fast tokenizers' offset mappings. Special tokens have zero width. Every token's text must be exactly the next characters of ``text`` and all of
    ``text`` must be covered; otherwise (a tokenizer that normalizes or drops characters) this raises
    ``OffsetsError`` rather than return shifted offsets.
    """
    ids = [int(x) for x in ids]
    special = {int(x) for x in (getattr(tokenizer, "all_special_ids", None) or [])}

    def decode(seq):
        return tokenizer.decode(seq, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    offsets = np.zeros((len(ids), 2), dtype=np.int64)
    anchor: int | None = None  # the last token that ended on a character boundary
    group: list[int] = []  # tokens after it, the last of which ends inside a character
    base = 0  # characters covered before the group
    prev_end_complete = 0
    for i, tid in enumerate(ids):
        if tid in special:
            if group:
                raise OffsetsError(f"token {i} is a special token inside a split character")
            offsets[i] = (base, base)
            continue
        group.append(i)
        head = decode([ids[anchor]]) if anchor is not None else ""
        decoded = decode(([ids[anchor]] if anchor is not None else []) + [ids[j] for j in group])
        if not decoded.startswith(head):
            raise OffsetsError(f"decoding token {i} after token {anchor} changes the earlier token's text")
        piece = decoded[len(head) :]
        complete, partial = piece, False
        while complete.endswith("\ufffd") and not text.startswith(complete, base):
            complete, partial = complete[:-1], True  # a character the next tokens complete
        if not piece and base < len(text) and ord(text[base]) > 127:
            partial = True  # a byte of a character, decoded to nothing (ByT5 drops a partial UTF-8 sequence)
        if not text.startswith(complete, base):
            raise OffsetsError(
                f"token {i} decodes to {piece[:40]!r} but the text at character {base} reads "
                f"{text[base : base + 40]!r}: this tokenizer does not reproduce the text (it normalizes or drops "
                "characters), so its character offsets cannot be rebuilt exactly"
            )
        end = base + len(complete)
        start = base if len(group) == 1 else prev_end_complete
        offsets[i] = (start, end + (1 if partial else 0))
        prev_end_complete = end
        if not partial:
            anchor, group, base = i, [], end
    if group:
        raise OffsetsError("the last tokens end inside a character: the token ids do not decode to the text")
    if base != len(text):
        raise OffsetsError(
            f"the tokens decode to the first {base} of {len(text)} characters only: this "
            "tokenizer does not reproduce the text, so its offsets cannot be rebuilt exactly"
        )
    return offsets
