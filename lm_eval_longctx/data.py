"""Documents for the tasks: the reference GovReport selection, or local files (no lm-eval import)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

# The LongPPL paper's data (see README "LongPPL" and the reference spec).
GOVREPORT_DATASET = "emozilla/govreport-test-tokenized"
GOVREPORT_SPLIT = "test"
GOVREPORT_DECODE_TOKENIZER = "NousResearch/Llama-2-7b-hf"
GOVREPORT_MIN_TOKENS = 16384
GOVREPORT_MAX_TOKENS = 32767
GOVREPORT_NUM_DOCS = 50


@dataclass
class Documents:
    texts: list[str]
    provenance: dict = field(default_factory=dict)


def texts_sha256(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()


def select_tokenized_rows(rows, min_tokens: int, max_tokens: int, num_docs: int) -> list[list[int]]:
    """Rows with tokenized_len >= min_tokens, first num_docs in order, first max_tokens ids each."""
    picked = []
    for row in rows:
        if int(row["tokenized_len"]) >= min_tokens:
            picked.append(list(row["input_ids"])[:max_tokens])
            if len(picked) == num_docs:
                break
    return picked


def load_govreport(
    dataset_path: str = GOVREPORT_DATASET,
    revision: str | None = None,
    split: str = GOVREPORT_SPLIT,
    decode_tokenizer: str = GOVREPORT_DECODE_TOKENIZER,
    min_tokens: int = GOVREPORT_MIN_TOKENS,
    max_tokens: int = GOVREPORT_MAX_TOKENS,
    num_docs: int = GOVREPORT_NUM_DOCS,
    data_files: str | None = None,
) -> Documents:
    """The reference GovReport texts: selected rows' Llama-2 ids decoded with default settings.

    ``data_files`` (a local json/jsonl/parquet file) replaces the hub dataset: rows with
    ``input_ids`` and ``tokenized_len`` go through the same selection and decoding; rows with a
    ``text`` field are used as they are (first ``num_docs``).
    """
    import datasets

    if data_files:
        path = Path(data_files)
        if not path.exists():
            raise FileNotFoundError(f"data_files not found: {path}")
        builder = "parquet" if path.suffix == ".parquet" else "json"
        ds = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
        source = {"data_files": str(path.resolve())}
    else:
        ds = datasets.load_dataset(dataset_path, split=split, revision=revision)
        source = {"dataset_path": dataset_path, "revision": revision or "default branch",
                  "dataset_fingerprint": getattr(ds, "_fingerprint", None)}

    if "text" in ds.column_names and "input_ids" not in ds.column_names:
        texts = [str(t) for t in ds["text"][:num_docs]]
        selection = {"num_docs": len(texts)}
    else:
        from transformers import AutoTokenizer

        ids = select_tokenized_rows(ds, min_tokens, max_tokens, num_docs)
        tok = AutoTokenizer.from_pretrained(decode_tokenizer)
        texts = [tok.decode(x) for x in ids]
        selection = {"min_tokens": min_tokens, "max_tokens": max_tokens, "num_docs": len(texts),
                     "decode_tokenizer": decode_tokenizer}
    if len(texts) < num_docs:
        import warnings

        warnings.warn(f"only {len(texts)} documents match the selection (asked for {num_docs})", stacklevel=2)
    return Documents(texts, {**source, **selection, "split": split, "texts_sha256": texts_sha256(texts)})
