"""``retrieval_gain_map``: retrieval gain over a grid of context length x depth, one pass per document.

On the documents of ``retrieval_gain`` (x: a document in the evaluated model's tokenizer), for a
ladder of context lengths L and depths p (percent), cell (L, p) has the anchor
a = round(p/100 * (L - q - r)) (halves rounded up), the query Q = x[a : a+q] and the answer
A = x[a+q : a+q+r], both inside x[0:L]. The answer's mean NLL is taken

* with the context:    [BOS] x[0:L] sep Q A,
* without it:          [BOS] Q A,

and gain = nll_without - nll_with. With ``anchors_per_cell`` n > 1 the cell holds the anchors
a, a + s, ..., a + (n-1) s (s = ``anchor_stride``, default q + r), and its gain is their mean.

Metrics (names sort as strings, the order lm-eval prints them in): ``gain@L01024_d50`` per cell,
``gain@L01024`` per length (mean over depths), ``gain`` (mean over all cells), the effective context
lengths ``effective_length`` (relative: the mean gain over depths stays above ``effective_fraction`` of its
value at the shortest L) and ``effective_length_abs`` (stays above ``effective_threshold``), both with every
depth's gain above ``effective_threshold``: a length counts only when the model reaches its farthest depth,
not when a mean over depths is carried by the near ones. Stderrs are over documents (one harness doc is one
document: its cells share its text).

Cost: per document, [BOS] x[0:L_max] is fed once in KV-cache chunks; at each rung L the cells of that
length are read on top of the cache of [BOS] x[0:L] and cropped off again (``engine.score_prefix_ladder``).
The without-document sequences of all documents are deduplicated and batched.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import numpy as np

from ..data import documents, retrieval_cases
from ..engine import scoring
from ..harness import request_type
from ..harness.evaluated_model import add_model_settings, resolve_model_max_length, settings_tokenizer
from ..metrics import gain_map, per_token
from ..records import StateRecord
from ..settings import LOCATION, TEXT, Declaration, Setting, SettingsError, choice, integer, integer_list, number
from ..training import context_use
from . import declarations, sizing
from .base import (
    ALLOW_BEYOND_WAY_OUT,
    GovReportTask,
    ReportSection,
    resolve_embedded_corpus,
    zero_padded_width,
)

log = logging.getLogger("lm_eval_longctx")

KIND = "retrieval_gain_map"
SETTINGS = Declaration(
    "retrieval_gain_map",
    [
        *declarations.sizing_settings(),
        Setting(
            "context_lengths",
            integer_list(1, declarations.MAX_TOKENS, declarations.MAX_LIST_ENTRIES),
            None,
            "context lengths L (document tokens x[0:L]) of the ladder; with max_seq_lengths: each length less BOS, "
            "separator, Q and A (the whole sequence fills it); default: min_context doubled while the with-document "
            "sequence fits the model's window and every document has L + q + r tokens",
            optional=True,
        ),
        Setting("min_context", integer(1, declarations.MAX_TOKENS), 1024, "first rung of the default doubling ladder"),
        Setting(
            "max_context",
            integer(1, declarations.MAX_TOKENS),
            None,
            "cap on L of the default ladder (default: the model's maximum length and the shortest document)",
            optional=True,
        ),
        Setting(
            "depths",
            integer_list(0, 100),
            list(range(0, 100, 10)),
            "depths p in percent: the anchor of cell (L, p) is a = round(p/100 (L - q - r)), halves up",
        ),
        *declarations.query_answer_settings(),
        Setting(
            "anchors_per_cell",
            integer(1, declarations.MAX_ANCHORS),
            1,
            "anchors per cell: a, a + s, ..., a + (n-1) s with s = anchor_stride; the cell's gain is their mean",
        ),
        Setting(
            "anchor_stride",
            integer(1, declarations.MAX_TOKENS),
            None,
            "s: tokens between the anchors of a cell (default q + r: consecutive Q A spans)",
            optional=True,
        ),
        Setting("separator", TEXT, "", "text between x[0:L] and Q (tokenized without special tokens)"),
        declarations.bos_setting("BOS at the start of both conditions, as in retrieval_gain"),
        Setting(
            "effective_fraction",
            number(0.0, 1.0),
            0.5,
            "relative effective length: the largest L up to which "
            "the mean gain over depths stays above this fraction of its value at the shortest L and every depth's "
            "gain above effective_threshold",
        ),
        Setting(
            "effective_threshold",
            number(0.0),
            0.5,
            "absolute effective length: the largest L up to which "
            "every depth's gain (nats per answer token, mean over documents) stays above this",
        ),
        Setting(
            "tokenizer",
            LOCATION,
            None,
            "tokenizer that counts the documents' tokens for the default ladder "
            "(default: model_args `pretrained`); the model's own tokenizer is checked again when scoring",
            optional=True,
            affects_numbers=False,
        ),
        Setting(
            "effective_rule",
            choice(*per_token.MEMORY_LENGTH_RULES),
            "contiguous",
            "`contiguous`: every shorter L passes too; `largest`: the largest passing L",
        ),
        *declarations.govreport_task_settings(declarations.without_batch_size_setting(), export_tokens=False),
    ],
    presets={
        "ci": {**declarations.GOVREPORT_CI_PRESET, "depths": [10, 50, 90]},
        "paper": {"num_docs": documents.GOVREPORT_NUM_DOCS, "depths": list(range(0, 100, 10))},
    },
)
DEFAULTS = SETTINGS.defaults()


def resolve_settings(metadata: dict | None) -> dict:
    s = declarations.parse(SETTINGS, metadata)  # depths are percents: declared 0..100
    resolve_embedded_corpus(SETTINGS.owner, s)
    if s["anchor_stride"] is None:
        s["anchor_stride"] = s["query_tokens"] + s["answer_tokens"]
    # the model's own settings, from the model_args the harness merges into the metadata
    add_model_settings(s, metadata)
    if s["context_lengths"]:
        check_ladder(s["context_lengths"], s)
    return s


def check_ladder(lengths, s: dict) -> None:
    """Every cell of every length must have room for its anchors: a + (n-1) s + q + r <= L."""
    need = s["query_tokens"] + s["answer_tokens"] + (s["anchors_per_cell"] - 1) * s["anchor_stride"]
    short = [L for L in lengths if L < need]
    if short:
        raise SettingsError(
            f"retrieval_gain_map: context lengths {short} are too short for query {s['query_tokens']} "
            f"+ answer {s['answer_tokens']} tokens and {s['anchors_per_cell']} anchors per cell "
            f"{s['anchor_stride']} apart ({need} tokens); drop them from `context_lengths`"
        )


def settings_for_lengths(lengths: list[int], extra_tokens: int, s: dict, drop_short: bool = False) -> dict:
    """The map's ladder for ``max_seq_lengths`` (or a preset's lengths, or the window's W/8 ... W): each length L less
    ``extra_tokens`` (BOS, separator, Q and A), so that the whole with-context sequence holds L tokens. A rung too
    short for its cells is an error, or (``drop_short``: lengths the user did not give) left out."""
    contexts = sorted({n - extra_tokens for n in lengths})
    if drop_short:
        need = s["query_tokens"] + s["answer_tokens"] + (s["anchors_per_cell"] - 1) * s["anchor_stride"]
        contexts = [c for c in contexts if c >= need] or contexts[-1:]
    try:
        check_ladder(contexts, s)
    except SettingsError as err:
        raise SettingsError(
            f"{err} (context lengths of max_seq_lengths {list(lengths)}, less {extra_tokens} tokens of BOS, separator, "
            "Q and A); raise max_seq_lengths or give context_lengths"
        ) from None
    return {"context_lengths": contexts}


# ------------------------------------------------------------------ the request kind


@dataclass(repr=False)
class GainMapScores(StateRecord):
    """Answer log-probs of one document's cells, with and without the context."""

    lengths: np.ndarray  # int64 [nL]
    depths: np.ndarray  # int64 [nD] (percent)
    anchors: np.ndarray  # int64 [nL, nD, n]
    n_source_tokens: int
    n_with_tokens: int  # longest with-context sequence
    with_logprob: np.ndarray  # float32 [nL, nD, n, answer_tokens]
    without_logprob: np.ndarray  # float32 [nL, nD, n, answer_tokens]

    def gain(self) -> np.ndarray:
        """float64 [nL, nD]: per cell, the mean over its anchors of nll_without - nll_with."""
        return gain_map.cell_gains(self.with_logprob, self.without_logprob)

    def summary(self) -> dict:
        """The document's token counts, the ladder, and per cell [length][depth] the answer's mean NLL with and
        without the context (mean over the cell's anchors) and the gain; no per-token array."""
        nll_with = -np.asarray(self.with_logprob, dtype=np.float64).mean(axis=-1).mean(axis=-1)
        nll_without = -np.asarray(self.without_logprob, dtype=np.float64).mean(axis=-1).mean(axis=-1)
        return {
            "n_source_tokens": self.n_source_tokens,
            "n_with_tokens": self.n_with_tokens,
            "answer_tokens": int(self.with_logprob.shape[-1]),
            "anchors_per_cell": int(self.anchors.shape[-1]),
            "lengths": [int(x) for x in self.lengths],
            "depths": [int(x) for x in self.depths],
            "nll_with": nll_with.tolist(),
            "nll_without": nll_without.tolist(),
            "gain": self.gain().tolist(),
        }


def serve(ctx: request_type.ScoringContext, items: list) -> list[GainMapScores]:
    """All uncached ``retrieval_gain_map`` requests: build the ladders, check lengths, score."""
    cases = []
    for text, spec in items:
        case = retrieval_cases.map_case_for_text(ctx.tokenizer, text, spec, [int(x) for x in spec["lengths"]])
        try:
            request_type.check_length(case.max_with_length, ctx.max_length, spec)
        except scoring.ScoringError as err:
            raise scoring.ScoringError(
                f"retrieval_gain_map: {err} Or lower --metadata max_context / context_lengths "
                f"(now up to {spec['lengths'][-1]})."
            ) from err
        cases.append(case)

    batch = min(int(spec.get("without_batch_size") or ctx.batch_size) for _, spec in items) if items else 1
    # the requests of one engine plan (chunk size, long pass) are scored together
    groups: dict[tuple[int, str], list[int]] = {}
    for i, (_, spec) in enumerate(items):
        groups.setdefault((int(spec["chunk_size"]), str(spec["long_pass"])), []).append(i)
    scored: list = [None] * len(items)
    for (chunk_size, long_pass), idx in groups.items():
        group = context_use.score_map_cases(
            ctx.model, [cases[i] for i in idx], chunk_size, long_pass, batch, progress=ctx.progress
        )
        for i, pair in zip(idx, group, strict=True):
            scored[i] = pair
    return [
        GainMapScores(
            np.asarray(case.lengths, dtype=np.int64),
            np.asarray(case.depths, dtype=np.int64),
            case.anchors,
            case.n_source_tokens,
            case.max_with_length,
            with_logprob,
            without_logprob,
        )
        for case, (with_logprob, without_logprob) in zip(cases, scored, strict=True)
    ]


def tokens_to_forward(ctx: request_type.ScoringContext, items: list) -> int:
    """About the token positions serving ``items`` runs through the model (the progress bar's plan): each ladder's
    longest prefix, every cell's continuation and every distinct without-context sequence."""
    total = 0
    for text, spec in items:
        case = retrieval_cases.map_case_for_text(ctx.tokenizer, text, spec, [int(x) for x in spec["lengths"]])
        total += len(case.prefix) + sum(len(c) for rung in case.continuations for c in rung)
        total += sum(len(w) for w in {tuple(w) for rung in case.without for w in rung})
    return total


# ------------------------------------------------------------------ the task


def default_ladder(
    s: dict, n_tokens: list[int], extra_tokens: int, model_max_length: int | None, position_table: int | None = None
) -> list[int]:
    """min_context doubled while L fits: every document has L tokens, the with-context sequence
    (L + ``extra_tokens``) fits the model unless allow_beyond_max_length (a learned position table always), and
    L <= max_context."""
    cap = min(n_tokens)
    if s["max_context"]:
        cap = min(cap, s["max_context"])
    if model_max_length and not s["allow_beyond_max_length"]:
        cap = min(cap, model_max_length - extra_tokens)
    if position_table:
        cap = min(cap, position_table - extra_tokens)
    lengths, L = [], s["min_context"]
    while L <= cap:
        lengths.append(L)
        L *= 2
    if not lengths:
        raise SettingsError(
            f"retrieval_gain_map: no context length of the default ladder (from min_context "
            f"{s['min_context']}) fits: the shortest document has {min(n_tokens)} tokens, the model's "
            f"maximum length is {model_max_length} ({extra_tokens} tokens go to BOS, separator, Q "
            f"and A); lower min_context or give `context_lengths`"
        )
    return lengths


class RetrievalGainMapTask(GovReportTask):
    SETTINGS = SETTINGS
    REQUEST_KIND = request_type.RequestKind(
        KIND, serve, GainMapScores.from_state, lambda r: r.n_with_tokens, planned_tokens=tokens_to_forward
    )
    SCORING_SETTINGS = ("query_tokens", "answer_tokens", "anchors_per_cell", "anchor_stride", "separator", "bos")
    SUITE_TASK_NAME = "retrieval_gain_map"
    resolve_settings = staticmethod(resolve_settings)
    # gain@L01024_d50 (a cell) and gain@L01024 (a length's mean over depths): gain_map.cell_metric, length_metric
    METRIC_DIRECTIONS = (("gain@L[0-9]*", True), ("gain", True), ("effective_length", True),
                         ("effective_length_abs", True))  # fmt: skip
    REPORT = ReportSection(
        section="retrieval_gain_map",
        title="Retrieval-gain map (retrieval_gain_map)",
        lead="The retrieval gain cell by cell over context length L and depth of the passage: up to which length, "
        "and from which depth, the model uses what it reads.",
        order=4,
        headlines=(
            ("gain", "retrieval gain averaged over every cell (context length × depth); higher is better"),
            (
                "effective_length",
                "largest context length up to which the mean gain stays above effective_fraction of its value at "
                "the shortest length and every depth's gain above effective_threshold (relative rule); higher is "
                "better",
            ),
            (
                "effective_length_abs",
                "largest context length up to which every depth's gain stays above effective_threshold nats "
                "(absolute rule)",
            ),
        ),
        settings=(
            "context_lengths",
            "depths",
            "query_tokens",
            "answer_tokens",
            "anchors_per_cell",
            "effective_fraction",
            "effective_threshold",
            "effective_rule",
            "data.texts_sha256",
        ),
        pictures=("gain_map",),
    )

    def _ladder_tokenizer(self):
        return settings_tokenizer(
            self.settings,
            self.evaluated_model,
            "the tokenizer that sets the retrieval_gain_map ladder",
            "retrieval_gain_map: the ladder counts tokens with the "
            "model's tokenizer: give --model_args pretrained=... or --metadata "
            "'{\"context_lengths\": [1024, 2048, ...]}' (Python API: simple_evaluate(model=HFLM(...)) "
            "passes the model's own)",
        )

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings
        model = self.evaluated_model  # its tokenizer and max_length, as its requests will be served
        tokenizer = None

        def for_lengths(lengths: list[int], drop_short: bool = False) -> dict:
            nonlocal tokenizer
            tokenizer = self._ladder_tokenizer()
            return settings_for_lengths(lengths, retrieval_cases.query_extra_tokens(tokenizer, s), s, drop_short)

        def for_window(window: int) -> dict:
            # W/8 ... W, as the audit's ladder; the doubling ladder below when its own settings are given
            if {"min_context", "max_context"} & set(getattr(s, "explicit", ())):
                return {}
            return for_lengths(sizing.window_ladder(window), drop_short=True)

        self._size(for_lengths, for_window, SETTINGS.presets["paper"], ("context_lengths",))
        if s["embedded_corpus"] and tokenizer is None:
            tokenizer = self._ladder_tokenizer()
        longest = s["context_lengths"][-1] if s["context_lengths"] else s["min_tokens"]
        self.read_documents(longest, tokenizer)
        self.model_max_length = None
        if s["context_lengths"] and self.sized_by is not None and sizing.sized(self.sized_by, "context_lengths"):
            self._fit_ladder_to_documents(tokenizer or self._ladder_tokenizer())
        if s["context_lengths"]:
            self.lengths = list(s["context_lengths"])
        else:
            tok = tokenizer or self._ladder_tokenizer()
            self.model_max_length = resolve_model_max_length(s, tok, model)
            window = self.sized_by.window if self.sized_by is not None else None
            if window is not None and window.tokens < self.model_max_length:
                self.model_max_length = window.tokens
            n_tokens = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in self.dataset["test"]["text"]]
            extra = retrieval_cases.query_extra_tokens(tok, s)
            self.lengths = default_ladder(
                s, n_tokens, extra, self.model_max_length, model.position_table if model is not None else None
            )
            check_ladder(self.lengths, s)
        self.width = zero_padded_width(self.lengths, 5)
        self.depth_width = zero_padded_width(s["depths"], 2)

    def _fit_ladder_to_documents(self, tokenizer) -> None:
        """A ladder sized from lengths or the window keeps the rungs every document holds (a document shorter than a
        rung cannot fill it); the rungs left out are noted."""
        s = self.settings
        shortest = min(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in self.dataset["test"]["text"])
        kept = [n for n in s["context_lengths"] if n <= shortest]
        if kept == s["context_lengths"]:
            return
        if not kept:
            raise SettingsError(
                f"retrieval_gain_map: the shortest document has {shortest} tokens, fewer than every context length "
                f"{s['context_lengths']} ({self.sized_by.settings_from['context_lengths'] if self.sized_by else ''}); "
                "give longer documents or lower max_seq_lengths"
            )
        if self.sized_by is not None:
            self.sized_by.notes.append(
                f"context lengths {[n for n in s['context_lengths'] if n > shortest]} left out: longer than the "
                f"shortest document ({shortest} tokens)"
            )
        s["context_lengths"] = kept

    def longest_sequence(self, tokenizer, doc: dict) -> int:
        return retrieval_cases.map_case_for_text(tokenizer, doc["text"], self.settings, self.lengths).max_with_length

    def too_long_ways_out(self) -> str:
        return (
            f"lower --metadata max_context / context_lengths (now up to {self.lengths[-1]}), or {ALLOW_BEYOND_WAY_OUT}"
        )

    def settings_record(self, record: dict) -> dict:
        return {
            **record,
            "task_kind": KIND,
            "lengths_used": self.lengths,
            "model_max_length": self.model_max_length,
            "metric_name_width": self.width,
            "data": self.provenance,
            "anchor_rule": "a = round(p/100 (L - q - r)), halves up",
        }

    def request_spec(self, **values) -> dict:
        return super().request_spec(lengths=self.lengths, depths=list(self.settings["depths"]), **values)

    # ---------------------------------------------------------------- metric names

    def cell_name(self, length: int, depth: int) -> str:
        return gain_map.cell_metric(length, depth, self.width, self.depth_width)

    def length_name(self, length: int) -> str:
        return gain_map.length_metric(length, self.width)

    def doc_to_target(self, doc, doc_to_target=None):
        # no answer string to compare with: what is predicted (the ladder and values are in `resps`)
        return (
            "per cell (L, depth): the answer tokens after each anchor's query in doc.text, predicted with and without "
            "the document's first L tokens"
        )

    def process_results(self, doc, results):
        scores = results[0]
        if scores.lengths.tolist() != self.lengths or scores.depths.tolist() != list(self.settings["depths"]):
            raise scoring.ScoringError("retrieval_gain_map: a result does not hold this run's ladder")
        gain = scores.gain()
        out: dict[str, float | tuple] = {}
        for i, L in enumerate(self.lengths):
            for j, d in enumerate(self.settings["depths"]):
                out[self.cell_name(L, d)] = float(gain[i, j])
            out[self.length_name(L)] = float(gain[i].mean())
        out["gain"] = float(gain.mean())
        # the effective lengths read every depth of every length (gain_map.effective_length_by_depth)
        by_cell = tuple(tuple(float(g) for g in row) for row in gain)
        out["effective_length"] = by_cell
        out["effective_length_abs"] = by_cell
        return out

    def metric_declarations(self):
        s = self.settings
        names = [self.cell_name(L, d) for L in self.lengths for d in s["depths"]]
        names += [self.length_name(L) for L in self.lengths] + ["gain"]
        out = {name: self.declare("mean", name) for name in names}
        # partials of module-level functions: they pickle; a threshold statistic gets no stderr
        lengths, rule, floor = tuple(self.lengths), s["effective_rule"], s["effective_threshold"]
        relative = functools.partial(
            gain_map.effective_length_from_docs,
            lengths=lengths,
            rule=rule,
            fraction=s["effective_fraction"],
            base_minimum=floor,
        )
        absolute = functools.partial(
            gain_map.effective_length_abs_from_docs, lengths=lengths, rule=rule, threshold=floor
        )
        out["effective_length"] = self.declare(relative, "effective_length")
        out["effective_length_abs"] = self.declare(absolute, "effective_length_abs")
        return out
