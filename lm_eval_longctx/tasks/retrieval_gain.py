"""``retrieval_gain``: how much a document helps the model recover its own continuation.

For a document x (its first ``doc_tokens`` tokens in the evaluated model's tokenizer, T tokens) and an
anchor a, the query is Q = x[a : a+q] and the answer A = x[a+q : a+q+r]. The answer's mean NLL is taken
twice, token by token:

* with the document:    [BOS] x[0:T] sep Q A   (the document holds Q A at the anchor: a model that
  looks things up in its context finds Q there and copies the A that follows it);
* without the document: [BOS] Q A.

gain = nll_without - nll_with; the task reports its mean over (document, anchor) pairs.

One harness doc is one DOCUMENT, its anchors inside it: ``--limit`` counts documents, the stderr is
over documents (the anchors of a document share its text, so they are not independent samples), and
under data parallelism all anchors of a document stay on one rank, where its prefix is shared.

Cost: per document, the prefix is fed once in KV-cache chunks and each Q A continuation is read on
top of it (``engine.score_continuations``); the without-document sequences of all documents are
batched (``engine.score_sequence_ends``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..data import documents, retrieval_cases
from ..engine import scoring
from ..harness import request_type
from ..metrics import per_token
from ..records import StateRecord
from ..settings import TEXT, Declaration, Setting, SettingsError, choice, integer, number
from . import declarations, token_export
from .base import (
    ALLOW_BEYOND_WAY_OUT,
    GovReportTask,
    ReportSection,
    resolve_embedded_corpus,
)

log = logging.getLogger("lm_eval_longctx")

KIND = "retrieval_gain"

SETTINGS = Declaration(
    "retrieval_gain",
    [
        *declarations.sizing_settings(),
        Setting(
            "doc_tokens",
            integer(1, declarations.MAX_TOKENS),
            None,
            "document = its first doc_tokens tokens (evaluated tokenizer); default: what fills L, the model's window "
            "or the longest max_seq_lengths, with BOS, separator, Q and A (the paper: 8192)",
            optional=True,
        ),
        *declarations.query_answer_settings(),
        Setting("n_queries", integer(1, declarations.MAX_ANCHORS), 2, "anchors per document"),
        Setting("anchor_min", number(0.0, 1.0), 0.1, "anchors lie in [anchor_min U, anchor_max U], U = T - q - r"),
        Setting("anchor_max", number(0.0, 1.0), 0.6, "see anchor_min"),
        Setting(
            "anchor_spacing",
            choice("endpoints", "centered"),
            "endpoints",
            "`endpoints`: both ends included; `centered`: centres of n equal parts",
        ),
        Setting(
            "with_context",
            choice("document", "before_anchor"),
            "document",
            "what precedes Q A in the with-document condition: the whole document, or x[0:a]",
        ),
        Setting("separator", TEXT, "", "text between the document and Q (tokenized without special tokens)"),
        declarations.bos_setting(
            "BOS at the start of both conditions: `auto` when the tokenizer itself adds one (Llama, Mistral; "
            "not GPT-2, Qwen2); `always` (an error if it has none); `never`"
        ),
        *declarations.govreport_task_settings(declarations.without_batch_size_setting()),
    ],
    presets={
        "ci": dict(declarations.GOVREPORT_CI_PRESET),
        "paper": {"doc_tokens": 8192, "num_docs": documents.GOVREPORT_NUM_DOCS},
    },
)
DEFAULTS = SETTINGS.defaults()


def resolve_settings(metadata: dict | None) -> dict:
    s = declarations.parse(SETTINGS, metadata)
    resolve_embedded_corpus(SETTINGS.owner, s)
    if not s["anchor_min"] <= s["anchor_max"]:
        raise SettingsError(f"retrieval_gain: need anchor_min <= anchor_max, got {s['anchor_min']}, {s['anchor_max']}")
    return s


def settings_for_lengths(lengths: list[int], extra_tokens: int) -> dict:
    """retrieval_gain sized for the longest length L of ``max_seq_lengths`` (or the model's window): the document's
    first L - ``extra_tokens`` tokens (BOS, separator, Q and A), so that the with-document sequence holds L tokens."""
    longest = max(lengths)
    if longest <= extra_tokens:
        raise SettingsError(
            f"retrieval_gain: a length of {longest} tokens leaves no room for a document beside BOS, separator, Q and "
            f"A ({extra_tokens} tokens); raise max_seq_lengths or give doc_tokens"
        )
    return {"doc_tokens": longest - extra_tokens}


# ------------------------------------------------------------------ the request kind


@dataclass(repr=False)
class RetrievalScores(StateRecord):
    """Answer log-probs of one document's anchors, with and without the document."""

    anchors: np.ndarray  # int64 [n_queries]
    n_doc_tokens: int  # T: document tokens read (after truncation to doc_tokens)
    n_source_tokens: int  # the whole document's tokens
    n_with_tokens: int  # longest with-document sequence
    with_logprob: np.ndarray  # float32 [n_queries, answer_tokens]
    without_logprob: np.ndarray  # float32 [n_queries, answer_tokens]

    def summary(self) -> dict:
        """The document's token counts and, per anchor, the answer's mean NLL with and without the document and
        their difference (the gain); no per-token array."""
        gain, nll_with, nll_without = per_token.retrieval_gain_per_pair(self.with_logprob, self.without_logprob)
        return {
            "n_doc_tokens": self.n_doc_tokens,
            "n_source_tokens": self.n_source_tokens,
            "n_with_tokens": self.n_with_tokens,
            "answer_tokens": int(self.with_logprob.shape[1]),
            "anchors": [int(a) for a in self.anchors],
            "nll_with": nll_with.tolist(),
            "nll_without": nll_without.tolist(),
            "gain": gain.tolist(),
        }


def serve(ctx: request_type.ScoringContext, items: list) -> list[RetrievalScores]:
    """All uncached ``retrieval_gain`` requests: build both conditions, check lengths, score."""
    cases = []
    for text, spec in items:
        case = retrieval_cases.retrieval_case_for_text(ctx.tokenizer, text, spec)
        try:
            request_type.check_length(case.max_with_length, ctx.max_length, spec)
        except scoring.ScoringError as err:
            raise scoring.ScoringError(
                f"retrieval_gain: {err} Or lower --metadata doc_tokens (now {spec['doc_tokens']})."
            ) from err
        cases.append(case)
    short = sum(c.n_doc_tokens < spec["doc_tokens"] for c, (_, spec) in zip(cases, items))
    if short:
        log.warning(
            "retrieval_gain: %d of %d documents are shorter than doc_tokens and are read whole", short, len(cases)
        )

    # without the document: every pair of every document, batched
    batch = min(int(spec.get("without_batch_size") or ctx.batch_size) for _, spec in items) if items else 1
    flat = [(i, j) for i, c in enumerate(cases) for j in range(len(c.without))]
    without = scoring.score_sequence_ends(
        ctx.model, [cases[i].without[j] for i, j in flat], [cases[i].answer_tokens for i, _ in flat], batch
    )
    without_by_case: list[list] = [[None] * len(c.without) for c in cases]
    for (i, j), res in zip(flat, without, strict=True):
        without_by_case[i][j] = res.logprob

    # with the document: each prefix fed once, its continuations read on top of it
    out = []
    for case, (_, spec), wo in zip(cases, items, without_by_case):
        with_lp: list = [None] * len(case.anchors)
        for prefix, idx in case.groups:
            scored = scoring.score_continuations(
                ctx.model,
                prefix,
                [case.continuations[i] for i in idx],
                n_scored=case.answer_tokens,
                chunk_size=int(spec["chunk_size"]),
                long_pass=str(spec["long_pass"]),
                batch_size=batch,
            )
            for i, res in zip(idx, scored, strict=True):
                with_lp[i] = res.logprob
        out.append(
            RetrievalScores(
                np.asarray(case.anchors, dtype=np.int64),
                case.n_doc_tokens,
                case.n_source_tokens,
                case.max_with_length,
                np.stack(with_lp).astype(np.float32),
                np.stack(wo).astype(np.float32),
            )
        )
        ctx.progress(1)
    return out


def tokens_to_forward(ctx: request_type.ScoringContext, items: list) -> int:
    """About the token positions serving ``items`` runs through the model (the progress bar's plan): every
    with-document prefix, continuation and without-document sequence."""
    total = 0
    for text, spec in items:
        case = retrieval_cases.retrieval_case_for_text(ctx.tokenizer, text, spec)
        total += sum(len(prefix) for prefix, _ in case.groups)
        total += sum(map(len, case.continuations)) + sum(map(len, case.without))
    return total


# ------------------------------------------------------------------ the per-token export

EXPORT_COLUMNS = {
    "anchors": "anchor token positions in the document [q]",
    "with_logprob": "answer tokens' log-probs read after the document [q, r]",
    "without_logprob": "answer tokens' log-probs without the document [q, r]",
    "gain, nll_with, nll_without": "per anchor [q] (gain = nll_without - nll_with)",
    "n_doc_tokens, n_source_tokens, doc_id, text, text_sha256": "the document",
}


def retrieval_gain_arrays(doc: dict, scores: RetrievalScores) -> dict:
    """One document's export file (EXPORT_COLUMNS)."""
    gain, nll_with, nll_without = per_token.retrieval_gain_per_pair(scores.with_logprob, scores.without_logprob)
    return {
        "doc_id": np.asarray(int(doc["doc_id"])),
        **token_export.text_fields(doc["text"]),
        "anchors": np.asarray(scores.anchors, dtype=np.int64),
        "n_doc_tokens": np.asarray(scores.n_doc_tokens),
        "n_source_tokens": np.asarray(scores.n_source_tokens),
        "with_logprob": np.asarray(scores.with_logprob, dtype=np.float32),
        "without_logprob": np.asarray(scores.without_logprob, dtype=np.float32),
        "gain": gain,
        "nll_with": nll_with,
        "nll_without": nll_without,
    }


# ------------------------------------------------------------------ the task


class RetrievalGainTask(GovReportTask):
    SETTINGS = SETTINGS
    REQUEST_KIND = request_type.RequestKind(
        KIND, serve, RetrievalScores.from_state, lambda r: r.n_with_tokens, planned_tokens=tokens_to_forward
    )
    SCORING_SETTINGS = (
        "doc_tokens",
        "query_tokens",
        "answer_tokens",
        "n_queries",
        "anchor_min",
        "anchor_max",
        "anchor_spacing",
        "with_context",
        "separator",
        "bos",
    )
    SUITE_TASK_NAME = "retrieval_gain"
    resolve_settings = staticmethod(resolve_settings)
    AGGREGATIONS = {"retrieval_gain": "mean", "nll_with": "mean", "nll_without": "mean"}
    METRIC_DIRECTIONS = (("retrieval_gain", True), ("nll_with", False), ("nll_without", False))
    REPORT = ReportSection(
        section="retrieval_gain",
        title="Retrieval gain (retrieval_gain)",
        lead="How much reading the document lowers the NLL of a passage from it (a query Q, then its answer A): "
        "whether the model looks things up in its own context.",
        order=3,
        headlines=(
            (
                "retrieval_gain",
                "nats per answer token that reading the document saves (nll_without − nll_with); higher is better, "
                "near 0 when the model does not look back",
            ),
            ("nll_with", "answer NLL (nats per token) with the document before the query; lower is better"),
            ("nll_without", "answer NLL without the document"),
        ),
        settings=(
            "doc_tokens",
            "query_tokens",
            "answer_tokens",
            "n_queries",
            "with_context",
            "dataset_path",
            "data_files",
            "data.texts_sha256",
        ),
    )
    EXPORT_COLUMNS = EXPORT_COLUMNS

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings
        tokenizer = None

        def for_lengths(lengths: list[int]) -> dict:
            nonlocal tokenizer
            tokenizer = self.evaluated_tokenizer()
            return settings_for_lengths(lengths, retrieval_cases.query_extra_tokens(tokenizer, s))

        self._size(for_lengths, lambda w: for_lengths([w]), SETTINGS.presets["paper"], ("doc_tokens",))
        if s["embedded_corpus"] and tokenizer is None:
            tokenizer = self.evaluated_tokenizer()
        self.read_documents(s["doc_tokens"], tokenizer)

    def longest_sequence(self, tokenizer, doc: dict) -> int:
        return retrieval_cases.retrieval_case_for_text(tokenizer, doc["text"], self.settings).max_with_length

    def too_long_ways_out(self) -> str:
        return f"lower --metadata doc_tokens (now {self.settings['doc_tokens']}), or {ALLOW_BEYOND_WAY_OUT}"

    def doc_to_target(self, doc, doc_to_target=None):
        # no answer string to compare with: what is predicted (the anchors and values are in `resps`)
        return "the answer tokens after each anchor's query in doc.text, predicted with and without the document"

    def process_results(self, doc, results):
        scores = results[0]
        gain, nll_with, nll_without = per_token.retrieval_gain_per_pair(scores.with_logprob, scores.without_logprob)
        token_export.write_document(self, doc, lambda: retrieval_gain_arrays(doc, scores))
        # every document has n_queries anchors, so the mean over documents of these per-document
        # means is the mean over (document, anchor) pairs
        return {
            "retrieval_gain": float(gain.mean()),
            "nll_with": float(nll_with.mean()),
            "nll_without": float(nll_without.mean()),
        }
