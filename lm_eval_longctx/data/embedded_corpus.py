"""The embedded evaluation corpus of the offline demo: long documents built from text every CPython has.

The source is ``pydoc_data.topics`` (the Python language reference topics that ``help()`` shows; PSF
licence). Nothing is copied into the repository: the documents are rebuilt at run time, deterministically
for one Python version (the topics change between CPython releases, so the provenance records the
version and a SHA-256 of the texts).

The demo model (``demo_model.py``) is trained on OTHER text, the standard library's sources and
docstrings, and never on ``pydoc_data``: the evaluation documents are held out.

One JSONL file (one ``text`` per row) serves all three corpus tasks of the demo:
``longppl_govreport`` and ``retrieval_gain`` read the first ``num_docs`` rows (``data_files``), and
``forgetting_curve`` concatenates every row into its token stream.

No lm-eval import here: this is the data layer.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

from .. import output_dirs
from .documents import texts_sha256

SOURCE = "pydoc_data.topics"
LICENCE = "PSF-2.0 (Python Software Foundation License)"
PARAGRAPH = "\n\n"
# About 3.3 characters per token for the demo model's 4096-token BPE (trained on stdlib text), so
# 64k characters give documents of at least 16k tokens: as long as the documents LongPPL selects from
# GovReport (>= 16384 tokens), and long enough for retrieval_gain's default 8192-token documents.
DEFAULT_CHARS_PER_DOC = 64_000


def topics_stream() -> str:
    """All reference topics in sorted-key order, each stripped, joined by a blank line."""
    from pydoc_data.topics import topics

    return PARAGRAPH.join(topics[k].strip() for k in sorted(topics))


def embedded_documents(chars_per_doc: int = DEFAULT_CHARS_PER_DOC, n_docs: int | None = None) -> list[str]:
    """Documents of at least ``chars_per_doc`` characters, cut from the topics stream at paragraph
    boundaries (a blank line), in stream order.

    Each document runs from the start of a paragraph to the first paragraph boundary at or after
    ``chars_per_doc`` characters, so a document never ends mid-paragraph and is never shorter than
    asked (the token counts the demo budgets rely on are lower bounds). The blank line between two
    documents belongs to neither. A tail shorter than ``chars_per_doc`` is dropped.

    ``n_docs``: the first ``n_docs`` documents (an error if fewer exist); ``None``: all of them.
    """
    chars_per_doc = int(chars_per_doc)
    if chars_per_doc < 1:
        raise ValueError(f"chars_per_doc must be >= 1, got {chars_per_doc}")
    if n_docs is not None and int(n_docs) < 1:
        raise ValueError(f"n_docs must be >= 1 (or None for all), got {n_docs}")
    stream = topics_stream()
    docs: list[str] = []
    start = 0
    while n_docs is None or len(docs) < int(n_docs):
        cut = stream.find(PARAGRAPH, start + chars_per_doc)
        if cut < 0:  # no boundary left: the rest is the tail, kept only if it is long enough
            if len(stream) - start >= chars_per_doc:
                docs.append(stream[start:])
            break
        docs.append(stream[start:cut])
        start = cut + len(PARAGRAPH)
    if n_docs is not None and len(docs) < int(n_docs):
        raise ValueError(
            f"{SOURCE} of Python {platform.python_version()} holds {len(stream)} characters: only {len(docs)} "
            f"documents of >= {chars_per_doc} characters, {n_docs} asked; lower chars_per_doc or n_docs"
        )
    if not docs:
        raise ValueError(f"{SOURCE} holds {len(stream)} characters, fewer than chars_per_doc = {chars_per_doc}")
    return docs


def provenance(texts: list[str]) -> dict:
    """Where the texts come from and a fingerprint of them (``texts_sha256`` is the same hash the tasks
    record in their ``longctx_settings.data``, so the two can be compared)."""
    return {
        "source": SOURCE,
        "licence": LICENCE,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python": sys.version.split()[0],
        "n_docs": len(texts),
        "chars": [len(t) for t in texts],
        "texts_sha256": texts_sha256(texts),
    }


def write_corpus(path, texts: list[str]) -> dict:
    """Write ``texts`` as JSONL, one ``{"text": ...}`` per row (the ``data_files`` format of the
    tasks); return the provenance, with the file's absolute path."""
    if not texts:
        raise ValueError("no texts to write")
    path = Path(path)
    with output_dirs.atomic_file(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    return {"path": str(path.resolve()), **provenance(texts)}


def documents_of_tokens(n_tokens: int, n_docs: int, count_tokens=None) -> list[str]:
    """``n_docs`` documents of the embedded corpus, each of at least ``n_tokens`` tokens as ``count_tokens(text)``
    counts them (default: 4 characters per token, an estimate), cut at paragraph boundaries.

    Raises:
        ValueError: the corpus cannot hold that many documents of that many tokens (naming its size).
    """
    if n_tokens < 1 or n_docs < 1:
        raise ValueError(f"--tokens and --docs must be >= 1, got {n_tokens} and {n_docs}")
    count = count_tokens or (lambda text: len(text) // 4)
    stream = topics_stream()
    per_token = len(stream[:200_000]) / max(1, count(stream[:200_000]))
    chars = int(n_tokens * per_token)
    while True:
        if chars * n_docs > len(stream):
            raise ValueError(
                f"{SOURCE} of Python {platform.python_version()} holds {len(stream)} characters (about "
                f"{int(len(stream) / per_token)} tokens): not {n_docs} documents of {n_tokens} tokens; ask for fewer "
                "or shorter documents, or give your own (data_files)"
            )
        texts = embedded_documents(chars, n_docs)
        shortest = min(count(t) for t in texts)
        if shortest >= n_tokens:
            return texts
        chars = int(chars * n_tokens / max(1, shortest)) + 64
