"""``forgetting_curve``: teacher-forced copy accuracy vs language-model accuracy across copy lengths.

Forgetting Curve (EMNLP 2024, reference 1azybug/ForgettingCurve). For each copy length l, samples
cut from one token stream T (PG-19 test, tokenized by the evaluated model's tokenizer):

* copy sample  [BOS] S [BOS] S [EOS]  with S = T[b : b + l];
* LM sample    [BOS] I [BOS] S [EOS]  with I = T[-l:] (unrelated text, as the reference).

Accuracy: argmax == next token (teacher forced) over the last ceil(l/2) tokens of the second S.
Copy accuracy far above LM accuracy means the model remembers S; where they meet, it forgot.

Docs are (sample, length) pairs in sample-major order (s0: l1..ln, s1: l1..ln, ...), so any
``--limit`` >= n covers every length. Each doc makes two requests (copy, LM) of the kind
``forgetting_curve``, served in batches of equal-length samples with one long pass each.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import weakref
from dataclasses import dataclass

import numpy as np

from ..data import documents, embedded_corpus
from ..engine import scoring
from ..harness import evaluated_model, request_type
from ..harness.evaluated_model import (
    add_model_settings,
    position_table_words,
    resolve_model_max_length,
    settings_tokenizer,
)
from ..metrics import per_token
from ..records import StateRecord
from ..settings import (
    BOOLEAN,
    LOCATION,
    TEXT,
    Declaration,
    Setting,
    SettingsError,
    choice,
    integer,
    integer_list,
    number,
)
from . import declarations, preflight
from .base import (
    DOCUMENT_SOURCE_SETTINGS,
    HUB_ONLY_SETTINGS,
    LongContextTask,
    ReportSection,
    inert_settings,
    refuse_inert_settings,
    resolve_embedded_corpus,
    zero_padded_width,
)

log = logging.getLogger("lm_eval_longctx")

KIND = "forgetting_curve"

SETTINGS = Declaration(
    "forgetting_curve",
    [
        *declarations.sizing_settings(),
        Setting(
            "max_len",
            integer(1, declarations.MAX_TOKENS),
            None,
            "largest copy length l; default: the largest whose sample fits the model's window W, (W - 3) // 2",
            optional=True,
        ),
        Setting(
            "min_len", integer(1, declarations.MAX_TOKENS), documents.FORGETTING_CURVE_MIN_LEN, "smallest copy length"
        ),
        Setting("num_lengths", integer(1, declarations.MAX_LIST_ENTRIES), 32, "number of copy lengths"),
        Setting(
            "spacing",
            choice("linear", "geometric", aliases={"log": "geometric"}),
            "linear",
            "copy lengths `numpy.linspace(min_len, max_len, num_lengths, dtype=int)` or `numpy.geomspace(...)`, "
            "duplicates dropped",
        ),
        Setting(
            "lengths",
            integer_list(1, declarations.MAX_TOKENS, declarations.MAX_LIST_ENTRIES),
            None,
            "explicit copy lengths; replace max_len, min_len, num_lengths and spacing. With max_seq_lengths: "
            "(L - 3) // 2 for each length L (the sample's 2l + 3 tokens fit it), or max_len from the longest L when "
            "min_len, num_lengths or spacing is given",
            optional=True,
        ),
        Setting("samples_per_length", integer(1, declarations.MAX_SAMPLES), 10, "samples per copy length"),
        Setting(
            "seed",
            integer(0, declarations.MAX_SEED),
            0,
            "seed of the sample starts (Python random, the reference's draw order)",
        ),
        Setting(
            "fine_threshold", number(0.0, 1.0), per_token.FINE_THRESHOLD, "fine memory length: copy accuracy > this"
        ),
        Setting(
            "coarse_margin",
            number(0.0, 1.0),
            per_token.COARSE_MARGIN,
            "coarse memory length: copy accuracy > LM accuracy + this",
        ),
        Setting(
            "fine_rule",
            choice(*per_token.MEMORY_LENGTH_RULES),
            "largest",
            "how the fine memory length reads the "
            "curve: the largest passing length, or the end of the first run of passing lengths",
        ),
        Setting("coarse_rule", choice(*per_token.MEMORY_LENGTH_RULES), "contiguous", "the same for the coarse length"),
        declarations.allow_beyond_setting(),
        *declarations.long_pass_settings(),
        declarations.batch_size_setting("batch_size", "samples per forward"),
        Setting(
            "bos_token_id",
            integer(0, declarations.MAX_TOKEN_ID),
            None,
            "BOS of the samples (default: the tokenizer's BOS, else its EOS)",
            optional=True,
        ),
        Setting(
            "eos_token_id",
            integer(0, declarations.MAX_TOKEN_ID),
            None,
            "final EOS of the samples (default: the tokenizer's EOS, else BOS)",
            optional=True,
        ),
        Setting(
            "tokenizer",
            LOCATION,
            None,
            "tokenizer that builds the samples (default: model_args `pretrained`)",
            optional=True,
        ),
        Setting(
            "claimed_length",
            integer(1, declarations.MAX_TOKENS),
            None,
            "length marked on the plot (default: the model's maximum)",
            optional=True,
            affects_numbers=False,
        ),
        Setting("dataset_path", LOCATION, documents.PG19_DATASET, "hub dataset of books (PG-19 test)"),
        Setting("dataset_revision", TEXT, None, "dataset revision (default: its default branch)", optional=True),
        Setting("dataset_split", TEXT, documents.PG19_SPLIT, "dataset split"),
        Setting(
            "data_files",
            LOCATION,
            None,
            "local json/jsonl/parquet file with a `text` column instead of the hub dataset",
            optional=True,
        ),
        Setting(
            "corpus_add_special_tokens",
            BOOLEAN,
            True,
            "tokenize each corpus piece with the tokenizer's special tokens (the reference does)",
        ),
        declarations.embedded_corpus_setting("every document, one after another, makes the token stream"),
    ],
    presets={
        "ci": {
            "max_seq_lengths": declarations.CI_LENGTHS,
            "embedded_corpus": True,
            "samples_per_length": declarations.CI_SAMPLES_PER_LENGTH,
        },
        "paper": {"num_lengths": 32, "samples_per_length": 10},
    },
)
DEFAULTS = SETTINGS.defaults()

# token streams by fingerprint, for the serve function (requests carry only the fingerprint and
# the sample's start, so cache keys and --log_samples stay small); the task holds the array
_STREAMS: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()


# the settings of the grid of copy lengths (max_len ends it)
GRID_SETTINGS = ("min_len", "num_lengths", "spacing")


def resolve_settings(metadata: dict | None) -> dict:
    s = declarations.parse(SETTINGS, metadata)
    resolve_embedded_corpus(SETTINGS.owner, s, (*DOCUMENT_SOURCE_SETTINGS, "dataset_split"))
    if s["max_len"] is not None and not s["lengths"] and s["min_len"] > s["max_len"]:
        raise SettingsError(
            f"forgetting_curve: setting 'min_len' = {s['min_len']} is above 'max_len' = {s['max_len']}; the copy "
            "lengths run from min_len up to max_len: lower min_len or raise max_len"
        )
    # with the model's own settings, from the model_args the harness merges into the metadata
    return add_model_settings(s, metadata)


def load_tokenizer(s: dict, model: evaluated_model.EvaluatedModel | None = None):
    """The tokenizer named by the ``tokenizer`` setting, else the evaluated model's own, else ``pretrained``'s."""
    return settings_tokenizer(
        s,
        model,
        "the tokenizer that builds the forgetting-curve samples",
        "forgetting_curve builds its samples with the model's tokenizer: give "
        '--model_args pretrained=... or --metadata \'{"tokenizer": "NAME_OR_PATH"}\' (Python API: '
        'simple_evaluate(model=HFLM(...)) passes the model\'s own, or metadata={"tokenizer": ...})',
    )


def special_token_ids(tokenizer, bos_override: int | None = None, eos_override: int | None = None) -> tuple[int, int]:
    """BOS and EOS of the samples, from the tokenizer (never hard-coded ids).

    Without a BOS the tokenizer's EOS stands in (lm-eval's prefix token does the same); without an
    EOS the BOS id is used. The final EOS follows every scored position, so with a causal model it
    cannot change any score.
    """
    bos = bos_override if bos_override is not None else getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        bos = getattr(tokenizer, "eos_token_id", None)
    if bos is None:
        raise ValueError(
            "the tokenizer has neither a BOS nor an EOS token: pass --metadata "
            '\'{"bos_token_id": ID, "eos_token_id": ID}\''
        )
    eos = eos_override if eos_override is not None else getattr(tokenizer, "eos_token_id", None)
    bos, eos = int(bos), int(bos if eos is None else eos)
    vocab = len(tokenizer)
    for name, value in (("bos_token_id", bos), ("eos_token_id", eos)):
        if not 0 <= value < vocab:
            raise SettingsError(
                f"forgetting_curve: setting {name!r} = {value} is outside the tokenizer's vocabulary "
                f"(ids 0..{vocab - 1})"
            )
    return bos, eos


def sample_tokens(length: int) -> int:
    """Tokens in one sample of copy length l: [BOS] S [BOS] S [EOS]."""
    return 2 * length + 3


def copy_length_for(length: int) -> int:
    """The longest copy length whose sample fits ``length`` tokens (2l + 3 <= length)."""
    return (length - 3) // 2


def settings_for_lengths(lengths: list[int], s) -> dict:
    """The curve for ``max_seq_lengths`` (or a preset's lengths): one copy length per length L, the longest whose
    sample fits it, (L - 3) // 2; when a setting of the grid is given (max_len, min_len, num_lengths, spacing), the
    grid up to the longest L's instead (max_len, unless given)."""
    too_short = [n for n in lengths if copy_length_for(n) < 1]
    if too_short:
        raise SettingsError(
            f"forgetting_curve: lengths {too_short} of max_seq_lengths hold no copy sample (2l + 3 tokens, l >= 1); "
            "give lengths of 5 tokens or more"
        )
    if any(name in getattr(s, "explicit", ()) for name in (*GRID_SETTINGS, "max_len")):
        return {"max_len": copy_length_for(max(lengths))}
    return {"lengths": sorted({copy_length_for(n) for n in lengths})}


def resolve_lengths(s: dict, model_max_length: int, model: evaluated_model.EvaluatedModel | None = None) -> list[int]:
    """The tested copy lengths; samples longer than the model's maximum need allow_beyond_max_length."""
    if s["lengths"]:
        lengths = list(s["lengths"])
    else:
        max_len = s["max_len"] if s["max_len"] is not None else (model_max_length - 3) // 2
        lengths = documents.copy_lengths(max_len, s["num_lengths"], s["spacing"], s["min_len"])
        if len(lengths) < s["num_lengths"]:
            log.warning(
                "forgetting_curve: %d distinct copy lengths between %d and %d (asked for %d)",
                len(lengths),
                s["min_len"],
                max_len,
                s["num_lengths"],
            )
    table = model.position_table if model is not None else None
    past_table = [x for x in lengths if table is not None and sample_tokens(x) > table]
    if past_table and table is not None:  # (past_table is empty without a table)
        raise ValueError(
            f"forgetting_curve: copy lengths {past_table} make samples of up to {sample_tokens(past_table[-1])} "
            f"tokens (2l + 3), beyond {position_table_words(table)}. The longest copy length that fits is "
            f"{(table - 3) // 2}: lower max_len or lengths."
        )
    beyond = [x for x in lengths if sample_tokens(x) > model_max_length]
    if beyond and not s["allow_beyond_max_length"]:
        raise ValueError(
            f"forgetting_curve: copy lengths {beyond} make samples of up to {sample_tokens(beyond[-1])} tokens "
            f"(2l + 3), beyond the model's maximum length {model_max_length} "
            f"({model.max_length_words() if model is not None else 'from --model_args max_length or the config'}). "
            "The longest copy length that fits "
            f"is {(model_max_length - 3) // 2}. To probe beyond the maximum (as the paper does), pass "
            "--metadata '{\"allow_beyond_max_length\": true}'."
        )
    return lengths


# ---------------------------------------------------------------- the request kind


@dataclass(repr=False)
class CurveSampleScore(StateRecord):
    """One sample's result: scored and correctly predicted tokens, or the error of its length."""

    length: int
    mode: str  # "copy" or "lm"
    n_scored: int
    n_correct: int
    error: str = ""

    @property
    def accuracy(self) -> float:
        return float("nan") if self.error or self.n_scored == 0 else self.n_correct / self.n_scored

    @property
    def cacheable(self) -> bool:
        """A failure (e.g. out of memory) may not happen again: never store it in --use_cache."""
        return not self.error

    def summary(self) -> dict:
        """The sample's counts: scored tokens and greedy hits (a failed length: 0 and 0, and its error)."""
        out: dict = {"mode": self.mode, "length": self.length, "n_scored": self.n_scored, "n_correct": self.n_correct}
        if self.error:
            out["error"] = self.error[:200]
        return out


def serve(ctx: request_type.ScoringContext, items: list) -> list:
    """All uncached forgetting-curve requests: grouped by copy length, each group batched.

    A sample the engine cannot score (too long for the model, a model it refuses) ends the run with the error,
    before any length is scored where that can be known. A length that runs out of memory at one sample per
    forward is skipped: its samples are failed results (NaN accuracies), the log and the results' ``skipped_lengths``
    name it with the reason, and the other lengths still run.
    """
    groups: dict[tuple, list[int]] = {}
    for i, (_, spec) in enumerate(items):
        key = (
            spec["stream"],
            int(spec["length"]),
            int(spec["chunk_size"]),
            spec.get("batch_size"),
            bool(spec.get("allow_beyond_max_length", False)),
            str(spec.get("long_pass", "auto")),
        )
        groups.setdefault(key, []).append(i)
    # before any length runs: every sample fits the model, and the engine can score the longest one
    for key, idx in groups.items():
        request_type.check_length(sample_tokens(key[1]), ctx.max_length, items[idx[0]][1])
    longest: dict[tuple[str, int], int] = {}  # (long_pass, chunk_size) -> the longest copy length
    for _, length, chunk_size, _, _, long_pass in groups:
        longest[long_pass, chunk_size] = max(longest.get((long_pass, chunk_size), 0), length)
    for (long_pass, chunk_size), length in longest.items():
        scoring.choose_long_pass(ctx.model, long_pass, sample_tokens(length), 1, chunk_size)
    out: list = [None] * len(items)
    for (stream_key, length, chunk_size, batch_size, _, long_pass), idx in sorted(
        groups.items(), key=lambda kv: kv[0][1]
    ):
        specs = [items[i][1] for i in idx]
        stream = _STREAMS.get(stream_key)
        if stream is None:
            raise RuntimeError(
                f"forgetting_curve: token stream {stream_key} is not loaded (requests outlived their task)"
            )
        first, stop = documents.forgetting_curve_scored_targets(length)
        seqs = [
            documents.forgetting_curve_sample(stream, length, int(s["start"]), s["mode"], int(s["bos"]), int(s["eos"]))
            for s in specs
        ]
        try:
            scores = scoring.score_long_batch(
                ctx.model,
                seqs,
                chunk_size=chunk_size,
                score_from=first,
                long_pass=long_pass,
                batch_size=batch_size or ctx.batch_size,
            )
            # target t lives at array index t - 1
            results = [
                CurveSampleScore(length, s["mode"], stop - first, int(sc.greedy[first - 1 : stop - 1].sum()))
                for s, sc in zip(specs, scores, strict=True)
            ]
        except scoring.OutOfMemoryScoringError as e:
            msg = f"out of memory at one sample per forward ({e})"
            log.warning(
                "forgetting_curve: copy length %d (%d-token samples) is skipped: %s; it is named in the "
                "results' skipped_lengths and the other lengths still run",
                length,
                sample_tokens(length),
                msg,
            )
            results = [CurveSampleScore(length, s["mode"], 0, 0, error=msg) for s in specs]
        except scoring.ScoringError as e:
            raise scoring.ScoringError(
                f"forgetting_curve: copy length {length} ({sample_tokens(length)}-token samples): {e}"
            ) from e
        for i, res in zip(idx, results, strict=True):
            out[i] = res
        ctx.progress(len(idx))
    return out


# ---------------------------------------------------------------- the task


class ForgettingCurveTask(LongContextTask):
    SETTINGS = SETTINGS
    REQUEST_KIND = request_type.RequestKind(
        KIND,
        serve,
        CurveSampleScore.from_state,
        n_tokens=lambda r: sample_tokens(r.length),
        planned_tokens=lambda ctx, items: sum(sample_tokens(int(spec["length"])) for _, spec in items),
    )
    SUITE_TASK_NAME = "forgetting_curve"
    HUB_ONLY_SETTINGS = (*HUB_ONLY_SETTINGS, "dataset_split")
    resolve_settings = staticmethod(resolve_settings)
    # copy_acc@00512 and lm_acc@00512: one per copy length, zero-padded (self._name)
    METRIC_DIRECTIONS = (
        ("copy_acc@[0-9]*", True),
        ("lm_acc@[0-9]*", True),
        ("fine_memory_length", True),
        ("coarse_memory_length", True),
        ("n_failed_lengths", False),
        ("skipped_lengths", None),  # a text note: which lengths were skipped, and why
    )
    REPORT = ReportSection(
        section="forgetting_curve",
        title="Forgetting curve (forgetting_curve)",
        lead="Copy accuracy (the text S was read once before) against LM accuracy (unrelated text before) by copy "
        "length l: the model still holds S where copy accuracy stays above LM accuracy.",
        order=2,
        headlines=(
            (
                "fine_memory_length",
                "longest copy length copied almost perfectly (copy accuracy above fine_threshold); higher is better, "
                "a lower bound when it equals the longest length tested",
            ),
            (
                "coarse_memory_length",
                "longest copy length at which copying still beats LM accuracy by coarse_margin; higher is better",
            ),
            ("n_failed_lengths", "copy lengths that could not run (the reason is in the log); 0 expected"),
        ),
        settings=(
            "lengths",
            "spacing",
            "samples_per_length",
            "fine_threshold",
            "coarse_margin",
            "claimed_length",
            "tokenizer.name_or_path",
            "dataset_path",
            "data_files",
            "data.texts_sha256",
            "data.stream_sha256",
        ),
        pictures=("forgetting_curve",),
    )

    @classmethod
    def hub_resources(cls, settings: dict) -> list[preflight.Resource]:
        s = settings
        out = []
        if not s.get("data_files") and not s.get("embedded_corpus"):
            out.append(preflight.Resource("dataset", s["dataset_path"], s.get("dataset_revision")))
        if not preflight.is_local(s.get("tokenizer")):
            out.append(preflight.Resource("tokenizer", s["tokenizer"]))
        return out

    # ---------------------------------------------------------------- data

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings
        model = self.evaluated_model  # served as its requests will be: its tokenizer, its max_length
        tokenizer = load_tokenizer(s, model)
        self.samples_tokenizer = documents.tokenizer_identity(tokenizer)
        self.bos_id, self.eos_id = special_token_ids(tokenizer, s["bos_token_id"], s["eos_token_id"])
        self.model_max_length = resolve_model_max_length(s, tokenizer, model)

        def for_window(window: int) -> dict:
            # the grid up to the longest copy length the window holds (explicit lengths replace the grid)
            return {} if s["lengths"] else {"max_len": copy_length_for(min(window, self.model_max_length))}

        self._size(
            lambda lengths: settings_for_lengths(lengths, s), for_window, SETTINGS.presets["paper"], ("lengths",)
        )
        self.lengths = resolve_lengths(s, self.model_max_length, model)
        self.width = zero_padded_width(self.lengths, 5)

        if s["embedded_corpus"]:
            # every document of the embedded corpus, as rows of text (each piece ends with a newline, as PG-19's)
            pieces = [f"{text}\n" for text in embedded_corpus.embedded_documents()]
            docs = documents.Documents(pieces, {**embedded_corpus.provenance(pieces), "num_pieces": len(pieces)})
        else:
            docs = documents.load_book_pieces(
                dataset_path=s["dataset_path"],
                revision=s["dataset_revision"],
                split=s["dataset_split"],
                data_files=s["data_files"],
            )
        # a data_files file replaces the hub dataset, its revision and split
        self.inert = inert_settings(s, docs.provenance, hub_only=self.HUB_ONLY_SETTINGS)
        refuse_inert_settings(KIND, s, self.inert)
        self.stream = documents.token_stream(tokenizer, docs.texts, add_special_tokens=s["corpus_add_special_tokens"])
        self.stream_sha256 = hashlib.sha256(self.stream.tobytes()).hexdigest()
        # the key names the tokens and the ids that frame them: cached results are reused only for both
        self.stream_key = f"{self.stream_sha256[:24]}-{self.bos_id}-{self.eos_id}"
        _STREAMS[self.stream_key] = self.stream
        self.provenance = {**docs.provenance, "n_tokens": int(len(self.stream)), "stream_sha256": self.stream_sha256}

        starts = documents.SampleStarts(len(self.stream), self.lengths, s["samples_per_length"], s["seed"])
        lengths = self.lengths

        def sample(i: int) -> dict:
            k, j = divmod(i, len(lengths))  # sample-major: any --limit >= n covers every length
            return {"doc_id": i, "sample": k, "length": lengths[j], "start": starts.start(lengths[j], k)}

        # built as read: --limit k draws the starts of the lengths its k samples reach
        rows = documents.LazyDocuments(
            s["samples_per_length"] * len(lengths), sample, ("doc_id", "sample", "length", "start")
        )
        self.dataset = {"test": rows}

    def settings_record(self, record: dict) -> dict:
        """The task's facts, and what the plot needs."""
        s = self.settings
        # `tokenizer` is the evaluated model's (base class); the samples are built with this one
        rec = {k: v for k, v in record.items() if k != "tokenizer"}
        rec.update(
            task_kind=KIND,
            lengths=self.lengths,
            metric_name_width=self.width,
            model_max_length=self.model_max_length,
            claimed_length=s["claimed_length"] or self.model_max_length,
            samples_tokenizer=self.samples_tokenizer,
            bos_token_id=self.bos_id,
            eos_token_id=self.eos_id,
            scored="last ceil(l/2) tokens of the second S, teacher-forced greedy",
            per_length_std="population std (ddof=0, as the reference) = stderr * sqrt(n - 1)",
            data=self.provenance,
        )
        return rec

    # ---------------------------------------------------------------- requests

    def build_all_requests(self, **kwargs) -> None:
        limit = kwargs.get("limit")
        if limit is not None and int(limit) < len(self.lengths):
            log.warning(
                "forgetting_curve: --limit %s covers only the first %s of %d copy lengths (docs are "
                "sample-major: a limit of k * %d gives k samples at every length)",
                limit,
                limit,
                len(self.lengths),
                len(self.lengths),
            )
        super().build_all_requests(**kwargs)

    def _spec(self, doc, mode: str) -> dict:
        s = self.settings
        return {
            "kind": KIND,
            "stream": self.stream_key,
            "mode": mode,
            "length": int(doc["length"]),
            "start": int(doc["start"]),
            "bos": self.bos_id,
            "eos": self.eos_id,
            "chunk_size": s["chunk_size"],
            "long_pass": s["long_pass"],
            "batch_size": s["batch_size"],
            "allow_beyond_max_length": s["allow_beyond_max_length"],
        }

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        # the text must be a str (the harness hashes it); a label keeps --log_samples small
        label = f"l={doc['length']} sample={doc['sample']} start={doc['start']}"
        return [(f"forgetting_curve {mode} {label}", self._spec(doc, mode)) for mode in ("copy", "lm")]

    # ---------------------------------------------------------------- results

    def doc_to_target(self, doc, doc_to_target=None):
        # no answer string to compare with: what is predicted, with this document's numbers (hits in `resps`)
        length, start = int(doc["length"]), int(doc["start"])
        first, stop = documents.forgetting_curve_scored_targets(length)
        return (
            f"greedy predictions of the last {stop - first} tokens of S = stream[{start}:{start + length}], "
            "read after S (copy) and after unrelated text (lm)"
        )

    def _name(self, what: str, length: int) -> str:
        return f"{what}@{int(length):0{self.width}d}"

    def process_results(self, doc, results):
        copy, lm = results
        length = int(doc["length"])
        point = (length, copy.accuracy, lm.accuracy)
        return {
            self._name("copy_acc", length): copy.accuracy,
            self._name("lm_acc", length): lm.accuracy,
            "fine_memory_length": point,
            "coarse_memory_length": point,
            "n_failed_lengths": point,
            "skipped_lengths": (length, copy.error or lm.error),
        }

    def metric_declarations(self):
        s = self.settings
        names = [self._name(w, x) for x in self.lengths for w in ("copy_acc", "lm_acc")]
        # one length's documents each, by design
        out = {name: self.declare("mean", name) for name in names}
        # partials of module-level functions: they pickle; they get no stderr (a threshold statistic)
        out["fine_memory_length"] = self.declare(
            functools.partial(
                per_token.fine_memory_length_from_samples, threshold=s["fine_threshold"], rule=s["fine_rule"]
            ),
            "fine_memory_length",
        )
        out["coarse_memory_length"] = self.declare(
            functools.partial(
                per_token.coarse_memory_length_from_samples, margin=s["coarse_margin"], rule=s["coarse_rule"]
            ),
            "coarse_memory_length",
        )
        out["n_failed_lengths"] = self.declare(per_token.n_failed_lengths_from_samples, "n_failed_lengths")
        # a text: which lengths were skipped, and why
        out["skipped_lengths"] = self.declare(per_token.skipped_lengths_text, "skipped_lengths")
        return out
