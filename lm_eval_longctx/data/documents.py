"""Documents for the tasks: the reference GovReport selection, or local files (no lm-eval import)."""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
import operator
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors

# The LongPPL paper's data (see docs/tasks/longppl_govreport.md).
GOVREPORT_DATASET = "emozilla/govreport-test-tokenized"
GOVREPORT_SPLIT = "test"
GOVREPORT_DECODE_TOKENIZER = "NousResearch/Llama-2-7b-hf"
GOVREPORT_MIN_TOKENS = 16384
GOVREPORT_MAX_TOKENS = 32767
GOVREPORT_NUM_DOCS = 50
# The --metadata keys (and defaults) of every task that reads these documents: load_govreport's arguments.
GOVREPORT_SETTINGS = {
    "dataset_path": GOVREPORT_DATASET,
    "dataset_revision": None,
    "decode_tokenizer": GOVREPORT_DECODE_TOKENIZER,
    "data_files": None,
    "num_docs": GOVREPORT_NUM_DOCS,
    "min_tokens": GOVREPORT_MIN_TOKENS,
    "max_tokens": GOVREPORT_MAX_TOKENS,
}


@dataclass
class Documents:
    texts: list[str]
    provenance: dict = field(default_factory=dict)


def texts_sha256(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()


def _is_whole_number(value) -> bool:
    # datasets reads a column of ints mixed with floats as floats: 12.0 is a whole number, 12.5 and true are not
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return isinstance(value, float) and value.is_integer()


def _token_ids(value, vocab_size: int | None, where: str) -> list[int]:
    """``value`` as token ids: a list of whole numbers in [0, vocab_size); else a ValueError saying which item."""
    expected = "token ids, whole numbers >= 0" + (
        f" and < {vocab_size} (the decode tokenizer's vocabulary)" if vocab_size else ""
    )
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: 'input_ids' is {str(value)[:60]!r}; expected a list of {expected}")
    for j, x in enumerate(value):
        if not _is_whole_number(x) or x < 0 or (vocab_size is not None and x >= vocab_size):
            raise ValueError(f"{where}: 'input_ids' item {j} is {x!r}; expected {expected}. Fix or remove the row")
    return [int(x) for x in value]


def select_tokenized_rows(
    rows, min_tokens: int, max_tokens: int, num_docs: int, vocab_size: int | None = None, source: str = "rows"
) -> list[list[int]]:
    """Rows with tokenized_len >= min_tokens, first num_docs in order, first max_tokens ids each.

    Every row read is checked as data: ``tokenized_len`` a whole number >= 0, and the ``input_ids`` of a
    picked row a list of ids in [0, vocab_size). A violation is a ValueError naming ``source``, the row
    (counted from 0) and the field."""
    picked = []
    for k, row in enumerate(rows):
        where = f"{source}, row {k}"
        n = row.get("tokenized_len")
        if not _is_whole_number(n) or n < 0:
            raise ValueError(
                f"{where}: 'tokenized_len' is {n!r}; expected a whole number >= 0 (the row's number of token ids). "
                "Fix or remove the row"
            )
        if n >= min_tokens:
            picked.append(_token_ids(row.get("input_ids"), vocab_size, where)[:max_tokens])
            if len(picked) == num_docs:
                break
    return picked


def _check_one_kind(ds, source: str) -> None:
    """Text rows and tokenized rows in one file are an error: datasets gives each row the other kind's fields
    as null, so a mixed file is neither selection."""
    lengths = ds["tokenized_len"]
    texts = ds["text"] if "text" in ds.column_names else [None] * len(ds)
    for k, (n, text) in enumerate(zip(lengths, texts)):
        if n is None and text is not None:
            tokenized = next(j for j, m in enumerate(lengths) if m is not None)
            raise ValueError(
                f"{source}, row {k}: a 'text' row, but row {tokenized} is a tokenized row ('input_ids', "
                "'tokenized_len'); expected rows of one kind, all text or all tokenized. Split the file, or "
                "tokenize the text rows"
            )


DATA_WAYS_OUT = (
    'Ways out: a local copy through --metadata \'{"data_files": "docs.jsonl"}\' (json, jsonl or '
    "parquet), a reachable hub (unset HF_HUB_OFFLINE / HF_DATASETS_OFFLINE, log in for gated data), or "
    "the offline demo (lm-eval-longctx demo)."
)


def check_regular_file(path: Path, key: str, expected: str) -> None:
    """A file a setting names must be a regular file: a folder, a FIFO or a device is refused without being opened
    (reading a FIFO would wait for a writer), each with its own message naming the setting and what to pass."""
    if not path.exists():
        raise FileNotFoundError(f"{key} {path}: not found; pass {expected}")
    if path.is_dir():
        raise ValueError(f"{key} {path}: a folder, not a file; pass {expected}")
    if not path.is_file():
        raise ValueError(
            f"{key} {path}: not a regular file (a FIFO, socket or device, which is not read); pass {expected}"
        )


def load_rows(dataset_path: str, revision: str | None, split: str, data_files: str | None, expected: str = ""):
    """A hub dataset split, or a local json/jsonl/parquet file in its place; with where it came from.

    A file that cannot be read as rows (not UTF-8, not JSON) or a dataset that cannot be fetched is an
    error naming it, what was expected and the ways out, never a raw traceback alone."""
    import datasets

    if data_files:
        path = Path(data_files)
        check_regular_file(path, "data_files", "one json, jsonl or parquet file")
        builder = "parquet" if path.suffix == ".parquet" else "json"
        if builder == "json":
            _check_json_rows(path, expected)
        try:
            ds = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
        except Exception as err:  # noqa: BLE001  (any unreadable file is the same message)
            ds = _load_without_datasets_cache(builder, path, split, err)
            if ds is None:
                raise ValueError(
                    f"data_files {path}: cannot be read as {builder} rows ({errors.first_line(err)}); "
                    f"expected {expected or 'one record per row'}"
                ) from None
        return ds, {"data_files": str(path.resolve())}
    try:
        ds = datasets.load_dataset(dataset_path, split=split, revision=revision)
    except Exception as err:  # noqa: BLE001  (offline, gated, missing: one message)
        raise errors.ResourceUnavailableError(
            f"the dataset {dataset_path!r} (split {split!r}) cannot be loaded: {errors.first_line(err)}. "
            f"{DATA_WAYS_OUT}"
        ) from None
    return ds, {
        "dataset_path": dataset_path,
        "revision": revision or "default branch",
        "dataset_fingerprint": getattr(ds, "_fingerprint", None),
    }


def _load_without_datasets_cache(builder: str, path: Path, split: str, err: Exception):
    """A local file's rows when the datasets cache cannot be written (a file in its place, a read-only or full file
    system: an OSError under ``err``): read through a temporary folder and kept in memory, with one warning; None
    when the cache is not the cause (the file itself cannot be read)."""
    import shutil
    import tempfile
    import warnings

    import datasets

    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    folder = tempfile.mkdtemp(prefix="lm_eval_longctx_datasets_")
    try:
        ds = datasets.load_dataset(
            builder, data_files={split: str(path)}, split=split, cache_dir=folder, keep_in_memory=True
        )
    except Exception:  # noqa: BLE001  (not the cache: the caller names the first failure)
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    msg = (
        f"the datasets cache {datasets.config.HF_DATASETS_CACHE} cannot be used ({errors.first_line(cause)}); the run "
        f"continues without the cache ({path} is read into memory)"
    )
    logging.getLogger("lm_eval_longctx").warning(msg)
    warnings.warn(msg, errors.LongctxWarning, stacklevel=3)
    return ds


def load_tokenizer(name: str, role: str, **kwargs):
    """``AutoTokenizer.from_pretrained``, with one clear message when it cannot be had."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except Exception as err:  # noqa: BLE001  (offline, gated, missing, malformed: one message)
        raise errors.ResourceUnavailableError(
            f"{role}, {name!r}, cannot be loaded: {errors.first_line(err)}. Ways out: a reachable hub (unset "
            "HF_HUB_OFFLINE, log in for gated models), a local folder that holds the tokenizer, or the offline "
            "demo (lm-eval-longctx demo)."
        ) from None


_IDENTITIES: dict[int, tuple[weakref.ref, dict]] = {}  # id(tokenizer) -> (a reference to it, its identity)


def tokenizer_identity(tokenizer) -> dict:
    """What a tokenizer is, exactly enough to tell two apart: its name or path, class, number of token ids
    (``len(tokenizer)``, added tokens included) and the SHA-256 of its vocabulary (every token with its id, in id
    order). Computed once per tokenizer object."""
    known = _IDENTITIES.get(id(tokenizer))
    if known is not None and known[0]() is tokenizer:
        return dict(known[1])
    try:
        vocab = sorted((int(i), str(t)) for t, i in tokenizer.get_vocab().items())
        digest: str | None = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()
    except (AttributeError, NotImplementedError, TypeError, ValueError):  # a tokenizer that cannot list its vocabulary
        digest = None
    identity = {
        "name_or_path": str(getattr(tokenizer, "name_or_path", "") or ""),
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "vocab_sha256": digest,
    }
    try:
        _IDENTITIES[id(tokenizer)] = (weakref.ref(tokenizer), identity)
    except TypeError:  # an object without weak references: computed each time
        pass
    return dict(identity)


_JSON_WHITESPACE = " \t\r\n"  # what JSON allows around a value (str.strip would also take U+2028 etc.)


def _check_json_rows(path: Path, expected: str) -> None:
    """JSON lines (or one JSON list) of objects, UTF-8: checked here so the error names the file and line."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"data_files {path}: not UTF-8 text ({err.reason} at byte {err.start}); expected "
            f"JSON lines with {expected or 'one record per line'}"
        ) from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as err:
            raise ValueError(f"data_files {path}: not valid JSON ({err})") from None
        bad = next((k for k, r in enumerate(rows) if not isinstance(r, dict)), None) if isinstance(rows, list) else 0
        if bad is not None:
            raise ValueError(f"data_files {path}: item {bad} is not a JSON object; expected {expected}")
        return
    # JSON lines are separated by "\n" only: a JSON string may hold U+2028, U+2029 or U+0085 unescaped
    for k, line in enumerate(text.split("\n")):
        line = line.removesuffix("\r")
        if not line.strip(_JSON_WHITESPACE):
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise ValueError(
                f"data_files {path}, line {k + 1}: not JSON ({err}); expected JSON lines with "
                f"{expected or 'one record per line'}"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(f"data_files {path}, line {k + 1}: not a JSON object; expected {expected}")


def load_govreport(
    dataset_path: str = GOVREPORT_DATASET,
    revision: str | None = None,
    split: str = GOVREPORT_SPLIT,
    decode_tokenizer: str = GOVREPORT_DECODE_TOKENIZER,
    min_tokens: int = GOVREPORT_MIN_TOKENS,
    max_tokens: int = GOVREPORT_MAX_TOKENS,
    num_docs: int = GOVREPORT_NUM_DOCS,
    data_files: str | None = None,
    warn_short: bool = True,
) -> Documents:
    """The reference GovReport texts: selected rows' Llama-2 ids decoded with default settings.

    Fewer rows than ``num_docs`` matching the selection is a warning (``warn_short``; a task warns itself, with its
    name and what its run uses).

    ``data_files`` (a local json/jsonl/parquet file) replaces the hub dataset: rows with
    ``input_ids`` and ``tokenized_len`` go through the same selection and decoding; rows with a
    ``text`` field are used as they are (first ``num_docs``). Rows are checked as data before use: all of
    one kind, ``tokenized_len`` whole numbers, ``input_ids`` ids of the decode tokenizer's vocabulary; a
    violation is a ValueError naming the file (or dataset), the row and the field.
    """
    expected = "a 'text' field, or 'input_ids' and 'tokenized_len' fields"
    ds, source = load_rows(dataset_path, revision, split, data_files, expected)
    where = f"data_files {data_files}" if data_files else f"dataset {dataset_path}"

    if "text" in ds.column_names and not {"input_ids", "tokenized_len"} & set(ds.column_names):
        texts = [ds[k]["text"] for k in range(min(num_docs, len(ds)))]
        bad = next((k for k, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise ValueError(f"{where}, row {bad}: 'text' is {texts[bad]!r}; expected a string. Fix or remove the row")
    elif {"input_ids", "tokenized_len"} <= set(ds.column_names):
        _check_one_kind(ds, where)
        tok = load_tokenizer(decode_tokenizer, "the decode tokenizer of the GovReport token ids")
        ids = select_tokenized_rows(ds, min_tokens, max_tokens, num_docs, len(tok), where)
        texts = [tok.decode(x) for x in ids]
    else:
        raise ValueError(f"{where}: its rows have the columns {ds.column_names}; expected {expected}")
    selection: dict[str, int | str]
    if "input_ids" not in ds.column_names:
        selection = {"num_docs": len(texts)}
    else:
        selection = {
            "min_tokens": min_tokens,
            "max_tokens": max_tokens,
            "num_docs": len(texts),
            "decode_tokenizer": decode_tokenizer,
        }
    if len(texts) < num_docs and warn_short:
        import warnings

        msg = f"only {len(texts)} documents match the selection (asked for {num_docs})"
        logging.getLogger("lm_eval_longctx").warning(msg)
        warnings.warn(msg, errors.LongctxWarning, stacklevel=2)
    return Documents(texts, {**source, **selection, "split": split, "texts_sha256": texts_sha256(texts)})


# ---------------------------------------------------------------- forgetting curve
#
# The Forgetting Curve paper's data (1azybug/ForgettingCurve; docs/tasks/forgetting_curve.md): PG-19 test
# books, each as title + "\n" and text + "\n", tokenized by the evaluated model's tokenizer and
# concatenated into one token stream T; samples are cut from T.

PG19_DATASET = "emozilla/pg19-test"
PG19_SPLIT = "test"
FORGETTING_CURVE_MIN_LEN = 8


def load_book_pieces(
    dataset_path: str = PG19_DATASET,
    revision: str | None = None,
    split: str = PG19_SPLIT,
    data_files: str | None = None,
) -> Documents:
    """The texts that make the token stream, in order: per row ``short_book_title + "\\n"`` (when the
    row has that column) then ``text + "\\n"``, as the reference does.

    ``data_files`` (a local json/jsonl/parquet file with a ``text`` column) replaces the hub dataset.
    """
    ds, source = load_rows(dataset_path, revision, split, data_files)
    if "text" not in ds.column_names:
        raise ValueError(f"the corpus needs a 'text' column; it has {ds.column_names}")
    titles = ds["short_book_title"] if "short_book_title" in ds.column_names else [None] * len(ds)
    pieces = []
    for title, text in zip(titles, ds["text"]):
        if title is not None:
            pieces.append(f"{title}\n")
        pieces.append(f"{text}\n")
    return Documents(
        pieces,
        {
            **source,
            "split": split,
            "num_rows": len(ds),
            "num_pieces": len(pieces),
            "texts_sha256": texts_sha256(pieces),
        },
    )


def token_stream(tokenizer, pieces: list[str], add_special_tokens: bool = True):
    """Tokenize every piece and concatenate the ids into one int64 array.

    ``add_special_tokens=True`` is the reference's ``tokenizer(piece)``: a tokenizer that adds BOS
    puts one at the start of every piece.
    """
    import numpy as np

    if not pieces:
        raise ValueError("no text to tokenize")
    parts: list[np.ndarray] = []
    # a few pieces per call: a fast tokenizer encodes a batch in parallel, and only that batch's
    # ids exist as Python lists (PG-19 test is about 10M tokens)
    for a in range(0, len(pieces), 8):
        # verbose=False: whole books exceed the model's maximum; nothing is fed to the model as is
        ids = tokenizer(pieces[a : a + 8], add_special_tokens=add_special_tokens, verbose=False)["input_ids"]
        parts.extend(np.asarray(x, dtype=np.int64) for x in ids)
    return np.concatenate(parts)


def copy_lengths(
    max_len: int, num: int = 32, spacing: str = "linear", min_len: int = FORGETTING_CURVE_MIN_LEN
) -> list[int]:
    """The tested copy lengths, as the reference: ``numpy.linspace(min_len, max_len, num, dtype=int)``
    (linear) or ``numpy.geomspace(...)`` (geometric; ``log`` is the reference's name), cast to int by
    truncation as the reference does (this gives its published lengths 523, 4134, ... for 16000), then
    sorted without duplicates.
    """
    import numpy as np

    if int(min_len) < 1 or int(max_len) < int(min_len):
        raise ValueError(f"copy lengths need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if int(num) < 1:
        raise ValueError(f"the number of lengths must be >= 1, got {num}")
    if spacing == "linear":
        grid = np.linspace(int(min_len), int(max_len), int(num), dtype=int)
    elif spacing in ("geometric", "log"):
        grid = np.geomspace(int(min_len), int(max_len), int(num), dtype=int)
    else:
        raise ValueError(f"spacing must be 'linear' or 'geometric', got {spacing!r}")
    return [int(x) for x in np.unique(grid)]


def sample_starts(n_tokens: int, lengths: list[int], samples_per_length: int, seed: int = 0) -> dict[int, list[int]]:
    """Start b of S = T[b : b + l] for every sample: ``b = randint(0, n_tokens - 3 l)`` (inclusive)
    from Python's ``random`` seeded with ``seed``, lengths in increasing order and samples within a
    length, which is the reference's draw order (so its samples are reproduced for the same stream
    and lengths). The unrelated text I = T[-l:] never overlaps S, because b + l <= n_tokens - 2 l.
    """
    starts = SampleStarts(n_tokens, lengths, samples_per_length, seed)
    return {length: [starts.start(length, k) for k in range(samples_per_length)] for length in sorted(lengths)}


class SampleStarts:
    """``sample_starts`` drawn as they are read: the starts of a length are drawn (in the reference's draw order) when
    a sample of it, or of a longer length, is first asked for, so that reading a few samples draws few starts."""

    def __init__(self, n_tokens: int, lengths: list[int], samples_per_length: int, seed: int = 0):
        import random

        too_long = [length for length in sorted(lengths) if 3 * length > n_tokens]
        if too_long:  # every length checked now, as sample_starts does, not when its samples are read
            raise ValueError(
                f"copy length {too_long[0]} needs a corpus of at least {3 * too_long[0]} tokens; it has {n_tokens}"
            )
        self.n_tokens = n_tokens
        self.samples_per_length = samples_per_length
        self._undrawn = sorted(lengths)
        self._rng = random.Random(seed)
        self._drawn: dict[int, list[int]] = {}

    def start(self, length: int, sample: int) -> int:
        """The start of sample ``sample`` of copy length ``length``."""
        while length not in self._drawn:
            if not self._undrawn:
                raise KeyError(f"copy length {length} is not among the lengths of these samples")
            drawn = self._undrawn.pop(0)
            self._drawn[drawn] = [
                self._rng.randint(0, self.n_tokens - 3 * drawn) for _ in range(self.samples_per_length)
            ]
        return self._drawn[length][sample]


def forgetting_curve_sample(stream, length: int, start: int, mode: str, bos_id: int, eos_id: int):
    """One sample's token ids: copy = [BOS] S [BOS] S [EOS]; lm = [BOS] I [BOS] S [EOS], with
    S = stream[start : start + length] and I = stream[-length:] (the reference's unrelated text)."""
    import numpy as np

    stream = np.asarray(stream, dtype=np.int64)
    s = stream[start : start + length]
    if len(s) != length or start < 0:
        raise ValueError(f"S = T[{start}:{start + length}] is outside the {len(stream)}-token stream")
    if mode == "copy":
        first = s
    elif mode == "lm":
        first = stream[len(stream) - length :]
    else:
        raise ValueError(f"mode must be 'copy' or 'lm', got {mode!r}")
    return np.concatenate([[bos_id], first, [bos_id], s, [eos_id]]).astype(np.int64)


def forgetting_curve_scored_targets(length: int) -> tuple[int, int]:
    """Positions [first, stop) of the sample whose prediction is scored: the last ceil(l / 2)
    tokens of the second S (the first half is the in-context demonstration). The second S
    occupies positions [l + 2, 2 l + 2); the EOS at 2 l + 2 is not scored."""
    stop = 2 * length + 2
    return stop - (length + 1) // 2, stop


def cut_to_tokens(tokenizer, text: str, n_tokens: int, add_special_tokens: bool = False) -> str:
    """``text`` up to the end of its ``n_tokens``-th token (special tokens counted with ``add_special_tokens``), so
    that it tokenizes to at most ``n_tokens`` tokens; the text itself when it already does. A cut inside a word can
    tokenize to more tokens than it held in the whole text: the cut then moves back by the excess until it fits."""

    def encode(part: str) -> dict:
        return tokenizer(part, add_special_tokens=add_special_tokens, return_offsets_mapping=True, verbose=False)

    enc = encode(text)
    if len(enc["input_ids"]) <= n_tokens:
        return text
    keep = int(n_tokens)
    while keep >= 1:
        end = max((int(b) for _, b in enc["offset_mapping"][:keep]), default=0)
        cut = text[:end]
        n = len(encode(cut)["input_ids"])
        if n <= n_tokens:
            return cut
        keep -= n - n_tokens
    raise ValueError(
        f"a text cannot be cut to {n_tokens} tokens of the tokenizer {getattr(tokenizer, 'name_or_path', '')}"
    )


class LazyDocuments(Sequence):
    """A task's documents, each built when it is read: ``--limit k`` builds the first k (a ``datasets.Dataset``
    holds every one, built when the task is built). lm-eval reads a split's ``len``, items, iteration and the keys of
    ``features`` (the column names)."""

    def __init__(self, n_docs: int, build: Callable[[int], dict], columns: Sequence[str]):
        self._n_docs = int(n_docs)
        self._build = build
        self.features = dict.fromkeys(columns)

    def __len__(self) -> int:
        return self._n_docs

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(self._n_docs))]
        i = operator.index(index)
        if i < 0:
            i += self._n_docs
        if not 0 <= i < self._n_docs:
            raise IndexError(f"document {index} of {self._n_docs}")
        return self._build(i)

    def __iter__(self) -> Iterator[dict]:
        return (self._build(i) for i in range(self._n_docs))
