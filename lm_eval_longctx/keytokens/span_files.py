"""Key-span files: reading, verifying and writing ``slice_{i}.txt`` folders and their manifest.

Files hold ``[start, end]`` pairs joined by ``;`` on one line (the LongPPL reference format). They are
parsed as data (a strict pattern), never evaluated; a folder is checked against its manifest and the
texts it was computed for before any span is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import errors, output_dirs
from .spans_to_tokens import KeySpanFormatError, Span

log = logging.getLogger("lm_eval_longctx")

# ASCII digits, at most 18 (a character index fits in 64 bits): a longer number is a format error naming the file,
# not Python's int() digit limit
_PAIR = re.compile(r"\s*\[\s*([0-9]{1,18})\s*,\s*([0-9]{1,18})\s*\]\s*")


def parse_span_text(text: str, source: str = "<string>") -> list[Span]:
    """Parse the reference format: ``[a, b];[c, d]`` on one line; empty means no key tokens."""
    text = text.strip()
    if not text:
        return []
    spans = []
    for k, part in enumerate(text.split(";")):
        m = _PAIR.fullmatch(part)
        if m is None:
            raise KeySpanFormatError(
                f"{source}: item {k} is not '[start, end]' (whole numbers of at most 18 digits): {part[:60]!r}"
            )
        s, e = int(m.group(1)), int(m.group(2))
        if e < s:
            raise KeySpanFormatError(f"{source}: item {k} ends before it starts: {part!r}")
        spans.append((s, e))
    return spans


def format_span_text(spans: Sequence[Span]) -> str:
    """The reference format (no trailing newline)."""
    return ";".join(f"[{int(s)}, {int(e)}]" for s, e in spans)


# what a span file may weigh before it is read: a span per character at most, "[start, end];" with 18-digit numbers
# and some spacing each; without a text to measure against, a bound far above any document's spans
SPAN_BYTES_PER_CHARACTER = 64
UNBOUNDED_SPAN_FILE_BYTES = 256 * 2**20
MANIFEST_MAX_BYTES = 64 * 2**20


def span_file_limit(text_length: int | None) -> int:
    if text_length is None:
        return UNBOUNDED_SPAN_FILE_BYTES
    return SPAN_BYTES_PER_CHARACTER * (text_length + 1) + 4096


def read_span_file(path: str | Path, text_length: int | None = None) -> list[Span]:
    """Spans of one file, parsed as data and checked: UTF-8, well formed, sorted by start, and (with
    ``text_length``) inside [0, text_length]. Any violation is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        if path.exists():  # a FIFO (reading it would wait), a device or a folder
            raise KeySpanFormatError(f"{path}: not a regular file; a span folder holds slice_{{i}}.txt files only")
        raise FileNotFoundError(f"key-span file not found: {path}")
    size, limit = path.stat().st_size, span_file_limit(text_length)
    if size > limit:
        raise KeySpanFormatError(
            f"{path}: {size} bytes, more than the {limit} that spans of a {text_length}-character document can take; "
            "not a span file of this document (not read)"
        )
    try:
        content = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise KeySpanFormatError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected '[start, end]' pairs joined by ';'"
        ) from None
    spans = parse_span_text(content, source=str(path))
    check_spans(spans, text_length, str(path))
    return spans


def check_spans(spans: Sequence[Span], text_length: int | None, source: str) -> None:
    for k, (s, e) in enumerate(spans):
        if k and s < spans[k - 1][0]:
            raise KeySpanFormatError(
                f"{source}: item {k} [{s}, {e}] starts before item {k - 1} "
                f"{list(spans[k - 1])}; spans must be sorted by start"
            )
        if text_length is not None and e > text_length:
            raise KeySpanFormatError(
                f"{source}: item {k} [{s}, {e}] ends beyond the document's {text_length} characters: these spans "
                "were computed for another text (another data selection or decode tokenizer?)"
            )


def write_span_file(path: str | Path, spans: Sequence[Span]) -> None:
    output_dirs.write_atomically(path, format_span_text(spans))


MANIFEST = "key_spans.json"
MANIFEST_FORMAT = "lm_eval_longctx/key-spans/1"
_SLICE_NAME = re.compile(r"slice_[0-9]+\.txt")


def is_span_folder_file(path: Path) -> bool:
    """A file that ``lm-eval-longctx precompute-spans`` writes into a span folder: a slice file, the manifest, or
    the marker of a folder this package created; anything else in the folder is someone else's."""
    name = path.name
    known = _SLICE_NAME.fullmatch(name) or name in (MANIFEST, output_dirs.MARKER)
    return bool(known) and path.is_file() and not path.is_symlink()


@dataclass
class SpanFolder:
    """Spans read from a folder: per document, the manifest (None when there is none) and whether the
    folder was verified (manifest with per-file checksums, all matching, for these very texts)."""

    spans: list[list[Span]]
    manifest: dict | None
    verified: bool


def read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    if not path.is_file():
        if path.exists():  # a FIFO, a device or a folder: never opened
            raise KeySpanFormatError(f"{path}: not a regular file; expected the {MANIFEST} precompute-spans writes")
        return None
    if path.stat().st_size > MANIFEST_MAX_BYTES:
        raise KeySpanFormatError(f"{path}: more than {MANIFEST_MAX_BYTES} bytes; not a key-span manifest (not read)")
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise KeySpanFormatError(
            f"{path}: not a JSON manifest ({err}); expected the key_spans.json that "
            "lm-eval-longctx precompute-spans writes"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise KeySpanFormatError(f"{path}: not a key-span manifest of format {MANIFEST_FORMAT!r}")
    return manifest


def _check_manifest_texts(directory: Path, manifest: dict, texts: Sequence[str], texts_sha256: str | None) -> None:
    """The folder was computed for these texts: per-document hashes when recorded, else all texts' hash."""
    doc_hashes = manifest.get("doc_sha256")
    if isinstance(doc_hashes, list) and len(doc_hashes) >= len(texts):
        for i, t in enumerate(texts):
            if doc_hashes[i] != hashlib.sha256(t.encode("utf-8")).hexdigest():
                raise KeySpanFormatError(
                    f"{directory} was computed for other documents: slice_{i}.txt belongs to "
                    f"another text than document {i} (doc_sha256 in {MANIFEST}); its "
                    "character spans do not index this text"
                )
    elif manifest.get("texts_sha256") and texts_sha256 and manifest["texts_sha256"] != texts_sha256:
        raise KeySpanFormatError(
            f"{directory} was computed for other documents (texts_sha256 {manifest['texts_sha256'][:12]}... vs "
            f"{texts_sha256[:12]}...): its character spans do not index these texts"
        )


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
        msg = (
            f"{directory} has no {MANIFEST}: nothing says which evaluator, K, d, alpha and beta made these "
            "spans or for which texts, and a changed file cannot be detected. They are used as they are "
            "(recorded as key_spans_verified: false); lm-eval-longctx precompute-spans writes verified folders."
        )
        log.warning(msg)
        warnings.warn(msg, errors.LongctxWarning, stacklevel=2)
        return SpanFolder(spans, None, False)
    sums = manifest.get("slice_sha256")
    if not isinstance(sums, dict):
        msg = (
            f"{directory}/{MANIFEST} records no per-file checksums (written by an older version): a changed "
            "slice file cannot be detected; recorded as key_spans_verified: false. Precompute the folder again."
        )
        log.warning(msg)
        warnings.warn(msg, errors.LongctxWarning, stacklevel=2)
        return SpanFolder(spans, manifest, False)
    for i in range(n_docs):
        name = f"slice_{i}.txt"
        if sums.get(name) != output_dirs.file_sha256(directory / name):
            raise KeySpanFormatError(
                f"{directory / name} does not match the checksum in {MANIFEST}: it was changed or copied in from "
                "another folder after the spans were computed. Precompute the folder again, or restore the file."
            )
    return SpanFolder(spans, manifest, True)


def write_span_dir(
    directory: str | Path, spans: Sequence[Sequence[Span]], texts: Sequence[str], manifest: dict
) -> None:
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
        sums[f"slice_{i}.txt"] = output_dirs.file_sha256(directory / f"slice_{i}.txt")
    full = {
        **manifest,
        "format": MANIFEST_FORMAT,
        "n_docs": len(texts),
        "doc_sha256": [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts],
        "slice_sha256": sums,
    }
    output_dirs.write_atomically(directory / MANIFEST, json.dumps(full, indent=2, sort_keys=True))
