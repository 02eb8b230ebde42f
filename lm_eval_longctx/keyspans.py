"""Key-token character spans: choosing them, mapping them across tokenizers, reading/writing files.

Follows the LongPPL reference exactly (see README "LongPPL"):
* key evaluator tokens become character spans (offset mapping); spans that touch exactly
  (next.start == prev.end) are merged, others stay separate;
* an evaluated-model token is key iff its character span lies inside one key span;
* files hold ``[start, end]`` pairs joined by ``;`` on one line (``slice_{i}.txt``). They are parsed
  as data (a strict pattern), never evaluated.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

Span = tuple[int, int]

_PAIR = re.compile(r"\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]\s*")


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

    Tokenizers without an offset mapping (slow / tiktoken-style) get offsets rebuilt by decoding
    each token in the context of the previous one, as the reference does; a warning is issued
    when the decoded text does not reproduce the input (the offsets may then be shifted).
    """
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
        return list(enc["input_ids"]), np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    except (NotImplementedError, ValueError, TypeError):
        pass
    ids = list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    return ids, offsets_by_decoding(tokenizer, ids, text)


def offsets_by_decoding(tokenizer, ids: Sequence[int], text: str | None = None) -> np.ndarray:
    """Offsets rebuilt from decoded lengths (reference fix for tokenizers without offsets)."""
    offsets = np.zeros((len(ids), 2), dtype=np.int64)
    pos = 0
    for i in range(len(ids)):
        if i == 0:
            length = len(tokenizer.decode(ids[:1]))
        else:
            length = len(tokenizer.decode(ids[i - 1 : i + 1])) - len(tokenizer.decode(ids[i - 1 : i]))
        offsets[i] = (pos, pos + length)
        pos += length
    if text is not None and tokenizer.decode(ids, skip_special_tokens=True) != text:
        warnings.warn(
            "offsets rebuilt by decoding: the decoded tokens do not reproduce the text exactly, so "
            "key-token mapping may be shifted for this document",
            stacklevel=2,
        )
    return offsets


# ---------------------------------------------------------------- files


def parse_span_text(text: str, source: str = "<string>") -> list[Span]:
    """Parse the reference format: ``[a, b];[c, d]`` on one line; empty means no key tokens."""
    text = text.strip()
    if not text:
        return []
    spans = []
    for k, part in enumerate(text.split(";")):
        m = _PAIR.fullmatch(part)
        if m is None:
            raise KeySpanFormatError(f"{source}: item {k} is not '[start, end]': {part[:60]!r}")
        s, e = int(m.group(1)), int(m.group(2))
        if e < s:
            raise KeySpanFormatError(f"{source}: item {k} ends before it starts: {part!r}")
        spans.append((s, e))
    return spans


def format_span_text(spans: Sequence[Span]) -> str:
    """The reference format (no trailing newline)."""
    return ";".join(f"[{int(s)}, {int(e)}]" for s, e in spans)


def read_span_file(path: str | Path) -> list[Span]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"key-span file not found: {path}")
    return parse_span_text(path.read_text(encoding="utf-8"), source=str(path))


def write_span_file(path: str | Path, spans: Sequence[Span]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(format_span_text(spans), encoding="utf-8")
    tmp.replace(path)


MANIFEST = "key_spans.json"
MANIFEST_FORMAT = "lm_eval_longctx/key-spans/1"


def read_span_dir(directory: str | Path, n_docs: int) -> tuple[list[list[Span]], dict]:
    """Spans for documents 0..n_docs-1 from ``slice_{i}.txt`` files, plus the manifest if any.

    The project's own format is the reference layout plus ``key_spans.json``, a manifest that
    records how the spans were made (evaluator, K, d, alpha, beta, data hash).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"key_spans_dir is not a directory: {directory}")
    missing = [i for i in range(n_docs) if not (directory / f"slice_{i}.txt").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{directory} lacks key-span files for documents {missing[:10]}"
            f"{'...' if len(missing) > 10 else ''} (expected slice_0.txt .. slice_{n_docs - 1}.txt)"
        )
    manifest = {}
    if (directory / MANIFEST).is_file():
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    return [read_span_file(directory / f"slice_{i}.txt") for i in range(n_docs)], manifest
