"""Key-token character spans: choosing them, mapping them across tokenizers, reading/writing files.

Follows the LongPPL reference exactly (see README "LongPPL"):
* key evaluator tokens become character spans (offset mapping); spans that touch exactly
  (next.start == prev.end) are merged, others stay separate;
* an evaluated-model token is key iff its character span lies inside one key span;
* files hold ``[start, end]`` pairs joined by ``;`` on one line (``slice_{i}.txt``). They are parsed
  as data (a strict pattern), never evaluated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

Span = tuple[int, int]
log = logging.getLogger("lm_eval_longctx")

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

    Tokenizers with an offset mapping (the fast, Rust-backed ones) give it directly. Others (python
    tokenizers, which in transformers 5 ignore ``return_offsets_mapping`` instead of raising; tiktoken
    style) get offsets rebuilt exactly by decoding (``offsets_by_decoding``), or a clear error.
    """
    enc = None
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError):
        enc = None
    if enc is not None and enc.get("offset_mapping") is not None:
        return list(enc["input_ids"]), np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    ids = list(enc["input_ids"]) if enc is not None else list(
        tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    return ids, offsets_by_decoding(tokenizer, ids, text)


class OffsetsError(ValueError):
    """Character offsets that cannot be rebuilt exactly for a tokenizer without an offset mapping."""


def offsets_by_decoding(tokenizer, ids: Sequence[int], text: str) -> np.ndarray:
    """Exact character offsets for a tokenizer without an offset mapping, rebuilt by decoding.

    Each token's text is what decoding it after the previous complete token adds (so SentencePiece's
    leading-space rule and multi-token characters are handled). A token that ends inside a character
    (a byte-level piece of an emoji or a CJK character) covers that whole character, and so does the
    token that completes it: the convention of the fast tokenizers' offset mappings. Special tokens
    have zero width. Every token's text must be exactly the next characters of ``text`` and all of
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
        piece = decoded[len(head):]
        complete, partial = piece, False
        while complete.endswith("\ufffd") and not text.startswith(complete, base):
            complete, partial = complete[:-1], True  # a character the next tokens complete
        if not text.startswith(complete, base):
            raise OffsetsError(
                f"token {i} decodes to {piece[:40]!r} but the text at character {base} reads "
                f"{text[base:base + 40]!r}: this tokenizer does not reproduce the text (it normalizes or drops "
                "characters), so its character offsets cannot be rebuilt exactly")
        end = base + len(complete)
        start = base if len(group) == 1 else prev_end_complete
        offsets[i] = (start, end + (1 if partial else 0))
        prev_end_complete = end
        if not partial:
            anchor, group, base = i, [], end
    if group:
        raise OffsetsError("the last tokens end inside a character: the token ids do not decode to the text")
    if base != len(text):
        raise OffsetsError(f"the tokens decode to the first {base} of {len(text)} characters only: this "
                           "tokenizer does not reproduce the text, so its offsets cannot be rebuilt exactly")
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


def read_span_file(path: str | Path, text_length: int | None = None) -> list[Span]:
    """Spans of one file, parsed as data and checked: UTF-8, well formed, sorted by start, and (with
    ``text_length``) inside [0, text_length]. Any violation is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"key-span file not found: {path}")
    try:
        content = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise KeySpanFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected "
                                 "'[start, end]' pairs joined by ';'") from None
    spans = parse_span_text(content, source=str(path))
    check_spans(spans, text_length, str(path))
    return spans


def check_spans(spans: Sequence[Span], text_length: int | None, source: str) -> None:
    for k, (s, e) in enumerate(spans):
        if k and s < spans[k - 1][0]:
            raise KeySpanFormatError(f"{source}: item {k} [{s}, {e}] starts before item {k - 1} "
                                     f"{list(spans[k - 1])}; spans must be sorted by start")
        if text_length is not None and e > text_length:
            raise KeySpanFormatError(
                f"{source}: item {k} [{s}, {e}] ends beyond the document's {text_length} characters: these spans "
                "were computed for another text (another data selection or decode tokenizer?)")


def write_span_file(path: str | Path, spans: Sequence[Span]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(format_span_text(spans), encoding="utf-8")
    tmp.replace(path)


MANIFEST = "key_spans.json"
MANIFEST_FORMAT = "lm_eval_longctx/key-spans/1"


@dataclass
class SpanFolder:
    """Spans read from a folder: per document, the manifest (None when there is none) and whether the
    folder was verified (manifest with per-file checksums, all matching, for these very texts)."""

    spans: list[list[Span]]
    manifest: dict | None
    verified: bool


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise KeySpanFormatError(f"{path}: not a JSON manifest ({err}); expected the key_spans.json that "
                                 "scripts/precompute_key_spans.py writes") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise KeySpanFormatError(f"{path}: not a key-span manifest of format {MANIFEST_FORMAT!r}")
    return manifest


def _check_manifest_texts(directory: Path, manifest: dict, texts: Sequence[str], texts_sha256: str | None) -> None:
    """The folder was computed for these texts: per-document hashes when recorded, else all texts' hash."""
    doc_hashes = manifest.get("doc_sha256")
    if isinstance(doc_hashes, list) and len(doc_hashes) >= len(texts):
        for i, t in enumerate(texts):
            if doc_hashes[i] != hashlib.sha256(t.encode("utf-8")).hexdigest():
                raise KeySpanFormatError(f"{directory} was computed for other documents: slice_{i}.txt belongs to "
                                         f"another text than document {i} (doc_sha256 in {MANIFEST}); its "
                                         "character spans do not index this text")
    elif manifest.get("texts_sha256") and texts_sha256 and manifest["texts_sha256"] != texts_sha256:
        raise KeySpanFormatError(
            f"{directory} was computed for other documents (texts_sha256 {manifest['texts_sha256'][:12]}... vs "
            f"{texts_sha256[:12]}...): its character spans do not index these texts")


def read_span_dir(directory: str | Path, texts: Sequence[str], texts_sha256: str | None = None) -> SpanFolder:
    """Spans for ``texts`` (documents 0..n-1) from ``slice_{i}.txt``, checked against the texts.

    Every file must parse, be sorted and lie inside its text. With a manifest (the project's own
    format: the reference layout plus ``key_spans.json``), the folder must have been computed for these
    texts (per-document hashes ``doc_sha256``, else the hash of all texts) and every file must have the
    checksum the manifest records for it: a file changed or copied in from another folder is an error.
    Without a manifest (the reference's published files) the spans are used, bounds-checked, with a
    loud warning, and ``verified`` is False.
    """
    directory = Path(directory)
    n_docs = len(texts)
    if not directory.is_dir():
        raise FileNotFoundError(f"key_spans_dir is not a directory: {directory}")
    missing = [i for i in range(n_docs) if not (directory / f"slice_{i}.txt").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{directory} lacks key-span files for documents {missing[:10]}"
            f"{'...' if len(missing) > 10 else ''} (expected slice_0.txt .. slice_{n_docs - 1}.txt)"
        )
    manifest = read_manifest(directory)
    if manifest is not None:
        _check_manifest_texts(directory, manifest, texts, texts_sha256)
    spans = [read_span_file(directory / f"slice_{i}.txt", len(t)) for i, t in enumerate(texts)]
    if manifest is None:
        msg = (f"{directory} has no {MANIFEST}: nothing says which evaluator, K, d, alpha and beta made these "
               "spans or for which texts, and a changed file cannot be detected. They are used as they are "
               "(recorded as key_spans_verified: false); scripts/precompute_key_spans.py writes verified folders.")
        log.warning(msg)
        warnings.warn(msg, stacklevel=2)
        return SpanFolder(spans, None, False)
    sums = manifest.get("slice_sha256")
    if not isinstance(sums, dict):
        msg = (f"{directory}/{MANIFEST} records no per-file checksums (written by an older version): a changed "
               "slice file cannot be detected; recorded as key_spans_verified: false. Precompute the folder again.")
        log.warning(msg)
        warnings.warn(msg, stacklevel=2)
        return SpanFolder(spans, manifest, False)
    for i in range(n_docs):
        name = f"slice_{i}.txt"
        if sums.get(name) != file_sha256(directory / name):
            raise KeySpanFormatError(
                f"{directory / name} does not match the checksum in {MANIFEST}: it was changed or copied in from "
                "another folder after the spans were computed. Precompute the folder again, or restore the file.")
    return SpanFolder(spans, manifest, True)


def write_span_dir(directory: str | Path, spans: Sequence[Sequence[Span]], texts: Sequence[str],
                   manifest: dict) -> None:
    """Write a verified span folder: ``slice_{i}.txt`` per document and ``key_spans.json`` with ``manifest``
    (how the spans were made) plus the format, the number of documents, each text's SHA-256 and each
    file's SHA-256, so that ``read_span_dir`` can tell a changed or foreign file. The caller makes the
    folder appear atomically (write into a fresh folder, then rename it into place)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if len(spans) != len(texts):
        raise ValueError(f"{len(spans)} span lists for {len(texts)} texts")
    sums = {}
    for i, (doc_spans, text) in enumerate(zip(spans, texts)):
        check_spans(list(doc_spans), len(text), f"document {i}")
        write_span_file(directory / f"slice_{i}.txt", doc_spans)
        sums[f"slice_{i}.txt"] = file_sha256(directory / f"slice_{i}.txt")
    full = {**manifest, "format": MANIFEST_FORMAT, "n_docs": len(texts),
            "doc_sha256": [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts], "slice_sha256": sums}
    (directory / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True), encoding="utf-8")
