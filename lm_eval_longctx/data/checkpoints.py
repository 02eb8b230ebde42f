"""What a local checkpoint is, exactly: the SHA-256 of each of its files (``folder_digests``) and one digest over them
(``folder_fingerprint``). The one way this package identifies a model folder: the evaluated model's ``--use_cache``
key, the key-token evaluator's identity and the audit's stage keys all read it. Per-file digests are memoised by
(path, size, mtime, inode), so a large checkpoint is read once."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .. import output_dirs

# files of a checkpoint folder whose bytes make its identity (weights, config, tokenizer, code)
CHECKPOINT_SUFFIXES = frozenset(
    {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".txt", ".tiktoken", ".py", ".jinja"}
)
MEMO_FILE = "file_sha256.json"


def cache_root() -> Path:
    """This package's cache folder: $LM_EVAL_LONGCTX_CACHE, else lm_eval_longctx under $XDG_CACHE_HOME or ~/.cache
    (the digests' memo; the key-span cache is its ``key_spans`` folder)."""
    root = os.environ.get("LM_EVAL_LONGCTX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lm_eval_longctx"
    )
    return Path(root)


def folder_digests(
    path: str | Path,
    memo_dir: str | Path | None = None,
    suffixes=CHECKPOINT_SUFFIXES,
    recursive: bool = True,
) -> dict[str, str]:
    """``{relative name: SHA-256}`` of the folder's files whose suffix is in ``suffixes`` (hidden ones left out; only
    the top level unless ``recursive``), in name order. ``memo_dir``: where the digests are memoised (only a memo:
    one that cannot be read or written changes nothing)."""
    root = Path(path).resolve()
    memo_file = Path(memo_dir) / MEMO_FILE if memo_dir else None
    memo = {}
    if memo_file is not None:
        try:  # only a memo: anything but a readable JSON object is an empty one
            memo = json.loads(output_dirs.read_regular_file(memo_file) or b"{}")
            memo = memo if isinstance(memo, dict) else {}
        except (OSError, ValueError):
            memo = {}
    files = root.rglob("*") if recursive else root.iterdir()
    out = {}
    changed = False
    for file in sorted(
        p
        for p in files
        if p.is_file() and p.suffix in suffixes and not any(part.startswith(".") for part in p.relative_to(root).parts)
    ):
        st = file.stat()
        stamp = f"{file}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
        digest = memo.get(stamp)
        if not (isinstance(digest, str) and len(digest) == 64):
            digest = output_dirs.file_sha256(file)
            memo[stamp], changed = digest, True
        out[file.relative_to(root).as_posix()] = digest
    if changed and memo_file is not None:
        try:
            output_dirs.write_atomically(memo_file, json.dumps(memo).encode(), special_in_place=False)
        except OSError:
            pass  # only a memo: the next run hashes again
    return out


def folder_fingerprint(path: str | Path, memo_dir: str | Path | None = None) -> str:
    """SHA-256 over the checkpoint folder's files (relative name and content): a changed weight file is another
    model."""
    h = hashlib.sha256()
    for name, digest in folder_digests(path, memo_dir).items():
        h.update(name.encode() + b"\0" + digest.encode())
    return h.hexdigest()
