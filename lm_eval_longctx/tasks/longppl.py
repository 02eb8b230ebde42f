"""``longppl_govreport``: LongPPL and PPL of the evaluated model on the reference GovReport documents.

Key tokens come from one of (``--metadata``):
* ``evaluator``: an HF model id or local path (default ``meta-llama/Llama-3.1-8B``, as in the paper),
  run once per document at request-building time and cached on disk;
* ``evaluator: self``: the evaluated model judges its own tokens (two requests per document, one where its
  tokenizer adds no special token);
* ``key_spans_dir``: precomputed spans, ``slice_{i}.txt`` per document (reference format).
With spans available, the task costs one long pass of the evaluated model per document.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import numpy as np
from lm_eval.utils import simple_parse_args_string

from .. import errors
from ..data import documents
from ..engine import scoring
from ..harness import aggregations, request_type
from ..harness.evaluated_model import add_model_settings
from ..keytokens import evaluator, judge, span_files, spans_to_tokens, text_scoring
from ..metrics import per_token
from ..settings import (
    BOOLEAN,
    GIVEN,
    LOCATION,
    MAPPING,
    TEXT,
    Declaration,
    Setting,
    Settings,
    SettingsError,
    choice,
    integer,
    number,
)
from . import declarations, preflight, sizing, token_export
from .base import (
    ALLOW_BEYOND_WAY_OUT,
    GovReportTask,
    ReportSection,
    longest_document_words,
    resolve_embedded_corpus,
)

log = logging.getLogger("lm_eval_longctx")

SETTINGS = Declaration(
    "longppl_govreport",
    [
        *declarations.sizing_settings(),
        Setting(
            "trunc_len",
            integer(1, declarations.MAX_TOKENS),
            None,
            "K: tokens of short context of the truncated windows; default: the paper's 4096, a quarter of the "
            "documents' length L where L < 16384",
            optional=True,
        ),
        Setting(
            "sliding_window",
            integer(1, declarations.MAX_TOKENS),
            None,
            "d: stride of the truncated windows; default: K / 4 (the paper's 1024 at K = 4096)",
            optional=True,
        ),
        Setting(
            "cut_tokens",
            integer(1, declarations.MAX_TOKENS),
            None,
            "each document ends after its first cut_tokens tokens in the evaluated model's tokenizer (the longest "
            "sequence the model reads for it), cut at a token boundary; default: L, the model's window or the "
            "longest max_seq_lengths (the selection then holds documents of L/2 to L tokens: min_tokens, max_tokens)",
            optional=True,
        ),
        Setting("alpha", number(), 2.0, "key token iff LSD > alpha (and LCL > beta)"),
        Setting("beta", number(), -2.0, "key token iff LCL > beta (and LSD > alpha)"),
        Setting(
            "evaluator",
            LOCATION,
            evaluator.DEFAULT_EVALUATOR,
            "key-token evaluator: HF model id, local folder, or `self` (the evaluated model judges itself)",
        ),
        Setting(
            "evaluator_revision",
            TEXT,
            None,
            "hub revision of the evaluator (resolved to a commit and recorded)",
            optional=True,
        ),
        Setting(
            "evaluator_device",
            TEXT,
            None,
            "device of the evaluator: `cpu`, `cuda:N`, or `auto` (transformers "
            "device_map, sharded over the visible GPUs); default: this rank's GPU, else the CPU",
            optional=True,
        ),
        Setting(
            "evaluator_max_memory",
            MAPPING,
            None,
            "with evaluator_device auto: memory per device, e.g. "
            '{"0": "70GiB", "cpu": "200GiB"} (a cpu entry allows CPU offload)',
            optional=True,
            affects_numbers=False,
        ),
        Setting(
            "evaluator_dtype",
            choice("float32", "bfloat16", "float16", "float64"),
            None,
            "dtype of the evaluator; default bfloat16 on CUDA, float32 on CPU",
            optional=True,
        ),
        Setting("evaluator_trust_remote_code", BOOLEAN, False, "allow the evaluator's own code from the hub"),
        Setting(
            "key_spans_dir",
            LOCATION,
            None,
            "folder of precomputed key spans (`slice_{i}.txt`); its manifest "
            "supplies K, d, alpha, beta and the evaluator",
            optional=True,
        ),
        Setting(
            "span_cache_dir",
            LOCATION,
            "default",
            "on-disk cache of evaluator key spans: `default` "
            "(~/.cache/lm_eval_longctx/key_spans, or $LM_EVAL_LONGCTX_CACHE/key_spans), `off`, or a folder",
            affects_numbers=False,
        ),
        Setting(
            "soft_gamma",
            number(0.0, lo_open=True),
            None,
            "adds longppl_soft with weights min(exp(LSD), gamma)",
            optional=True,
        ),
        *declarations.govreport_task_settings(
            declarations.batch_size_setting("short_batch_size", "truncated windows per forward")
        ),
    ],
    presets={
        "ci": {**declarations.GOVREPORT_CI_PRESET, "evaluator": "self"},
        "paper": {
            "trunc_len": 4096,
            "sliding_window": 1024,
            "cut_tokens": None,
            "min_tokens": documents.GOVREPORT_MIN_TOKENS,
            "max_tokens": documents.GOVREPORT_MAX_TOKENS,
            "num_docs": documents.GOVREPORT_NUM_DOCS,
        },
    },
)
DEFAULTS = SETTINGS.defaults()
# With key_spans_dir these come from the span folder's manifest (what the spans were computed with).
MANIFEST_KEYS = ("trunc_len", "sliding_window", "alpha", "beta", "evaluator")
# metric -> aggregation (the directions: METRIC_DIRECTIONS of the task class)
AGGREGATIONS: dict[str, str] = {
    "longppl": "token_weighted_perplexity",
    "longppl_soft": "token_weighted_perplexity",
    "ppl": "token_weighted_perplexity",
    "key_token_fraction": "corpus_ratio",
    "n_key_tokens": "mean",
}
# a largest long-short gain below this (nats) means the long context changed nothing
NO_GAIN_NATS = 1e-3
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


# The paper's truncated context: K = 4096 on documents of 16,384 to 32,767 tokens
PAPER_TRUNC_LEN = 4096
# the settings max_seq_lengths and the window size (settings_for_lengths)
SIZED_SETTINGS = ("cut_tokens", "min_tokens", "max_tokens", "trunc_len", "sliding_window")


def settings_for_lengths(lengths: list[int]) -> dict:
    """LongPPL sized for the longest length L of ``max_seq_lengths`` (or the model's window): documents of L/2 to L
    tokens (the GovReport rows' selection, at least the paper's 16,384 tokens), each cut at L tokens of the evaluated
    model, K a quarter of L up to the paper's 4096, d = K / 4 (the paper's 1024). L = 32,768 gives the paper's
    selection and K, d."""
    longest = max(lengths)
    k = max(1, min(PAPER_TRUNC_LEN, longest // 4))
    return {
        "cut_tokens": longest,
        "min_tokens": max(1, min(longest // 2, documents.GOVREPORT_MIN_TOKENS)),
        "max_tokens": max(1, longest - 1),
        "trunc_len": k,
        "sliding_window": max(1, k // 4),
    }


def resolve_settings(metadata: dict | None) -> Settings:
    s = declarations.parse(SETTINGS, metadata)
    resolve_embedded_corpus(SETTINGS.owner, s)
    longest = s["cut_tokens"] if "cut_tokens" in s.explicit else max(s["max_seq_lengths"] or [0]) or None
    if "trunc_len" in s.explicit and longest is not None and s["trunc_len"] >= longest:
        raise SettingsError(
            f"longppl_govreport: trunc_len = {s['trunc_len']} is not below the documents' length {longest} "
            "(cut_tokens / max_seq_lengths): no token would have a truncated context, so none could be a key token. "
            "Lower trunc_len, or raise max_seq_lengths"
        )
    if s["evaluator_device"] is not None and not _DEVICE.fullmatch(s["evaluator_device"]):
        raise SettingsError(
            f"longppl_govreport: setting 'evaluator_device' = {s['evaluator_device']!r} is not "
            "allowed; it must be auto, cpu, mps, cuda or cuda:N (or null)"
        )
    if s["evaluator_max_memory"] is not None and s["evaluator_device"] != "auto":
        raise SettingsError(
            "longppl_govreport: evaluator_max_memory needs evaluator_device: auto (it is the "
            "max_memory of transformers' device_map='auto')"
        )
    if s["key_spans_dir"]:
        s["key_source"] = "spans_dir"
        given = [k for k in ("evaluator_revision", "evaluator_dtype") if k in s.explicit]
        if given:
            raise SettingsError(
                f"longppl_govreport: {given[0]} has no effect with key_spans_dir (the spans "
                "are already computed); remove it"
            )
    elif str(s["evaluator"]).lower() == "self":
        s["key_source"] = "self"
        # the evaluated model judges its own key tokens, as lm-eval loaded it: an evaluator's loading settings act
        # on nothing, and a recorded setting must have acted
        given = [k for k in EVALUATOR_LOADING_SETTINGS if k in s.explicit]
        if given:
            raise SettingsError(
                f"longppl_govreport: {given[0]} has no effect with evaluator: self (the evaluated model judges its "
                f"own key tokens, loaded by --model_args); remove {', '.join(repr(g) for g in given)}"
            )
    else:
        s["key_source"] = "evaluator"
        if "evaluator_revision" in s.explicit and Path(str(s["evaluator"])).expanduser().is_dir():
            raise SettingsError(
                f"longppl_govreport: evaluator_revision has no effect on the local folder {s['evaluator']} (a "
                "revision names a hub commit); remove it"
            )
    return s


# how an evaluator model is loaded: nothing to load with ``evaluator: self`` or key_spans_dir
EVALUATOR_LOADING_SETTINGS = (
    "evaluator_revision",
    "evaluator_dtype",
    "evaluator_device",
    "evaluator_max_memory",
    "evaluator_trust_remote_code",
)


# ---------------------------------------------------------------- the per-token export
# Two tokenizations of one text: the evaluated model's tokens i (length n; the text without special tokens, as
# scored) and the evaluator's tokens j (length m; with its special tokens). docs/tools/token-export-and-viewer.md.

EXPORT_COLUMNS = {
    "token_id": "evaluated-model token ids [n] (text tokenized without special tokens)",
    "char_start": "character offset where token i starts in `text` [n]",
    "char_end": "character offset where token i ends in `text` [n]",
    "logprob": "evaluated model: log p(token i | tokens < i), long context [n]; NaN for token 0",
    "nll": "evaluated model: -logprob [n]",
    "greedy": "evaluated model: argmax of the prediction of token i == token i [n]; False for token 0",
    "key": "token i is a key token (counted in LongPPL) [n]",
    "lsd": "evaluator LSD of the evaluator token holding token i's last character [n]; NaN: none",
    "lcl": "evaluator long-context log-prob (LCL) of that evaluator token [n]; NaN: none or not available",
    "soft_weight": "LongPPL-soft weight of token i [n] (only with soft_gamma); 1 where no LSD",
    "evaluator_token_id": "evaluator token ids [m] (with its special tokens), when available",
    "evaluator_char_start": "evaluator token j's start in `text` [m]",
    "evaluator_char_end": "evaluator token j's end in `text` [m]",
    "evaluator_logprob_long": "evaluator: log p(token j | all before), LCL [m]; NaN for j = 0; when available",
    "evaluator_logprob_short": "evaluator: log p(token j | truncated window) [m]; NaN before K; when available",
    "evaluator_lsd": "evaluator: LSD = long - short log-prob [m]; NaN where no truncated context",
    "evaluator_key": "evaluator token j is key (LSD > alpha and LCL > beta) [m]",
    "doc_id, text, text_sha256": "the document",
    "nll_sum, n_targets, key_nll_sum, n_key": "the task's per-document (NLL sum, count) pairs of ppl and longppl",
}


def longppl_arrays(
    doc: dict, scored, judgement, key_idx: np.ndarray, alpha: float, beta: float, soft_gamma: float | None = None
) -> dict:
    """One document's export file (EXPORT_COLUMNS): the evaluated model's scores token by token, which tokens are
    key, the evaluator's judgement of its own tokens and, per evaluated token, that of the evaluator token holding
    its last character (the mapping LongPPL-soft uses)."""
    lp = np.asarray(scored.long.logprob, dtype=np.float32)
    n = len(scored.token_ids)
    offsets = np.asarray(scored.offsets, dtype=np.int64).reshape(-1, 2)
    key = np.zeros(n, dtype=bool)
    key[np.asarray(key_idx, dtype=np.int64) + 1] = True
    logprob = token_export.targets_to_tokens(lp, np.float32(np.nan))
    lp64 = lp.astype(np.float64)
    out = {
        "doc_id": np.asarray(int(doc["doc_id"])),
        **token_export.text_fields(doc["text"]),
        "token_id": np.asarray(scored.token_ids, dtype=np.int64),
        "char_start": offsets[:, 0],
        "char_end": offsets[:, 1],
        "logprob": logprob,
        "nll": -logprob,
        "greedy": token_export.targets_to_tokens(np.asarray(scored.long.greedy, dtype=bool), False),
        "key": key,
        # the task's own per-document pairs: (nll_sum, count) of ppl and of longppl
        "nll_sum": np.asarray(per_token.nll_sum(lp64)),
        "n_targets": np.asarray(len(lp64)),
        "key_nll_sum": np.asarray(per_token.nll_sum(lp64[key_idx])),
        "n_key": np.asarray(len(key_idx)),
    }
    nan = np.float32(np.nan)
    lsd = lcl = np.full(n, nan, dtype=np.float32)
    if judgement.offsets is not None and judgement.lsd is not None:
        ev_off = np.asarray(judgement.offsets, dtype=np.int64).reshape(-1, 2)
        ev_lsd = token_export.targets_to_tokens(np.asarray(judgement.lsd, dtype=np.float32), nan)
        out.update(evaluator_char_start=ev_off[:, 0], evaluator_char_end=ev_off[:, 1], evaluator_lsd=ev_lsd)
        j = spans_to_tokens.token_holding_last_character(ev_off, offsets)
        lsd = ev_lsd[j]
        if judgement.long_logprob is not None and judgement.short_logprob is not None:
            ev_long = token_export.targets_to_tokens(np.asarray(judgement.long_logprob, dtype=np.float32), nan)
            ev_short = token_export.targets_to_tokens(np.asarray(judgement.short_logprob, dtype=np.float32), nan)
            out.update(
                evaluator_logprob_long=ev_long,
                evaluator_logprob_short=ev_short,
                evaluator_key=token_export.targets_to_tokens(
                    per_token.key_token_mask(judgement.long_logprob, judgement.short_logprob, alpha, beta), False
                ),
            )
            # LCL only where the token has an LSD (the same evaluator token; NaN before K like LSD)
            lcl = np.where(np.isnan(lsd), nan, ev_long[j]).astype(np.float32)
        else:
            # without LCL the spans decide: an evaluator token is key when a key span holds it
            ev_key = np.zeros(len(ev_off), dtype=bool)
            ev_key[spans_to_tokens.tokens_inside_spans(ev_off, judgement.spans)] = True
            ev_key[0] = False
            out["evaluator_key"] = ev_key
        if judgement.token_ids is not None:
            out["evaluator_token_id"] = np.asarray(judgement.token_ids, dtype=np.int64)
    out["lsd"], out["lcl"] = lsd, lcl
    if soft_gamma is not None:
        out["soft_weight"] = token_export.targets_to_tokens(judgement.soft_weights_for(offsets, soft_gamma), 1.0)
    return out


class LongPPLTask(GovReportTask):
    SETTINGS = SETTINGS
    SUITE_TASK_NAME = "longppl_govreport"
    resolve_settings = staticmethod(resolve_settings)
    settings: Settings  # resolve_settings's (its explicit keys are read)
    METRIC_DIRECTIONS = (("longppl", False), ("longppl_soft", False), ("ppl", False), ("key_token_fraction", None),
                         ("n_key_tokens", None))  # fmt: skip
    REPORT = ReportSection(
        section="longppl_govreport",
        title="LongPPL (longppl_govreport)",
        lead="Perplexity over the key tokens only: the tokens that an evaluator model predicts much better with the "
        "long context than with a truncated window of K tokens (LSD > α and LCL > β).",
        order=1,
        headlines=(
            (
                "longppl",
                "perplexity on the key tokens; lower is better, and well below PPL when the model uses its context",
            ),
            ("ppl", "perplexity on every token of the same documents, for comparison; lower is better"),
            ("key_token_fraction", "share of the tokens that are key tokens (informational)"),
            ("n_key_tokens", "key tokens per document (informational)"),
            ("longppl_soft", "every token weighted by min(exp(LSD), γ) (soft_gamma); lower is better"),
        ),
        settings=(
            "evaluator",
            "trunc_len",
            "sliding_window",
            "alpha",
            "beta",
            "key_spans_dir",
            "soft_gamma",
            "dataset_path",
            "data_files",
            "data.texts_sha256",
        ),
    )
    EXPORT_COLUMNS = EXPORT_COLUMNS
    EXPORT_VIEW = "key_tokens"  # the viewer's page of key tokens

    @classmethod
    def _check_settings_before_model(cls, task_name: str, settings: dict, run) -> None:
        """The paper's GovReport selection (no cut) on a model whose window is shorter than its shortest document is
        refused before the model loads: no document would fit."""
        s = settings
        sources = getattr(s, "sources", {})
        # documents left whole: cut_tokens null given, or the paper preset's, with no max_seq_lengths to size them
        uncut = s["cut_tokens"] is None and (
            sources.get("cut_tokens") == GIVEN
            or (sources.get("cut_tokens") == "preset paper" and sources.get(sizing.LENGTHS_KEY) != GIVEN)
        )
        if not uncut or s["data_files"] or s["embedded_corpus"] or s["allow_beyond_max_length"]:
            return
        model_args = run.get("model_args")
        if isinstance(model_args, str):
            model_args = simple_parse_args_string(model_args)
        window = sizing.model_window(None, add_model_settings({}, model_args if isinstance(model_args, dict) else {}))
        if window is not None and window.tokens < s["min_tokens"]:
            source = sources.get("min_tokens", "default")
            raise SettingsError(
                f"{task_name}: the GovReport selection's documents have at least {s['min_tokens']} tokens (min_tokens, "
                f"{source}; the rows' Llama-2 ids) and are not cut (cut_tokens null), beyond the model's window of "
                f"{window.tokens} tokens: none would fit. Ways out: the default preset (documents sized from the "
                "window), max_seq_lengths, cut_tokens, or allow_beyond_max_length"
            )

    @classmethod
    def hub_resources(cls, settings: dict) -> list[preflight.Resource]:
        s = settings
        out = super().hub_resources(s)
        if s.get("key_source") == "evaluator" and not preflight.is_local(s.get("evaluator")):
            out.append(preflight.Resource("evaluator", s["evaluator"], s.get("evaluator_revision")))
        return out

    def __init__(self, config: dict | None = None):
        self._judgements: dict[int, evaluator.EvaluatorJudgement] = {}
        self._no_key_reasons: dict[str, int] = {}
        super().__init__(config)

    # ---------------------------------------------------------------- data

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings

        def for_window(window: int) -> dict:
            # allow_beyond_max_length asks to read documents past the window: sized from it, but not cut at it
            sized = settings_for_lengths([window])
            return {k: v for k, v in sized.items() if not (k == "cut_tokens" and s["allow_beyond_max_length"])}

        self._size(settings_for_lengths, for_window, SETTINGS.presets["paper"], SIZED_SETTINGS)
        # counts and cuts the documents: the evaluated model's, loaded only when something is counted or cut
        tokenizer = self.evaluated_tokenizer() if s["cut_tokens"] is not None or s["embedded_corpus"] else None
        self.read_documents(s["cut_tokens"] or s["min_tokens"], tokenizer)
        self._cut_documents(tokenizer)
        self.span_folder = None
        self.judge: judge.EvaluatorJudge | None = None
        if s["key_source"] == "spans_dir":
            self.span_folder = span_files.read_span_dir(
                s["key_spans_dir"], list(self.dataset["test"]["text"]), self.provenance["texts_sha256"]
            )
            self._settings_from_manifest(self.span_folder.manifest)
        elif s["key_source"] == "evaluator":
            # identity and maximum length before any model runs (judge.EvaluatorJudge)
            self.judge = judge.EvaluatorJudge(
                s["evaluator"],
                s["evaluator_revision"],
                s["trunc_len"],
                s["sliding_window"],
                s["alpha"],
                s["beta"],
                judge.span_cache_for(str(s["span_cache_dir"])),
                device=s["evaluator_device"],
                dtype=s["evaluator_dtype"],
                max_memory=s["evaluator_max_memory"],
                trust_remote_code=s["evaluator_trust_remote_code"],
                chunk_size=s["chunk_size"],
                window_batch_size=s["short_batch_size"] or 4,
                long_pass=s["long_pass"],
                allow_beyond_max_length=s["allow_beyond_max_length"],
            )

    def _cut_documents(self, tokenizer) -> None:
        """Each document cut at ``cut_tokens`` tokens of the evaluated model (with the special tokens of the judging
        request when the model judges itself: the longest sequence it reads); then K and d, when sized and above half
        the shortest document, are lowered to a quarter of it (the paper's 4096 of 16,384)."""
        s = self.settings
        if s["cut_tokens"] is None:
            return
        if tokenizer is None:
            raise SettingsError(
                "longppl_govreport: cut_tokens needs the evaluated model's tokenizer: run the task through lm_eval "
                "(or simple_evaluate), or give --model_args pretrained=..."
            )
        judge = s["key_source"] == "self"
        texts = list(self.dataset["test"]["text"])
        cut = [documents.cut_to_tokens(tokenizer, text, s["cut_tokens"], judge) for text in texts]
        n_cut = sum(a != b for a, b in zip(texts, cut, strict=True))
        if n_cut:
            import datasets

            self.dataset = datasets.DatasetDict(
                {"test": datasets.Dataset.from_dict({"doc_id": list(range(len(cut))), "text": cut})}
            )
            self.provenance = {**self.provenance, "texts_sha256": documents.texts_sha256(cut)}
        self.provenance["cut"] = {"cut_tokens": s["cut_tokens"], "documents_cut": n_cut}
        if self.sized_by is None or not sizing.sized(self.sized_by, "trunc_len"):
            return
        shortest = min(len(tokenizer(x, add_special_tokens=judge, verbose=False)["input_ids"]) for x in cut)
        if s["trunc_len"] > shortest // 2:  # most tokens would have no truncated context: a quarter, as the paper's
            k = max(1, shortest // 4)
            note = f"trunc_len {s['trunc_len']} lowered to {k}, a quarter of the shortest document ({shortest} tokens)"
            s["trunc_len"] = k
            if sizing.sized(self.sized_by, "sliding_window"):
                s["sliding_window"] = max(1, k // 4)
                note += f", and sliding_window to {s['sliding_window']}"
            self.sized_by.notes.append(note)

    def longest_sequence(self, tokenizer, doc: dict) -> int:
        # with ``evaluator: self`` the judging request reads the text with its special tokens
        judge = self.settings["key_source"] == "self"
        return len(tokenizer(doc["text"], add_special_tokens=judge, verbose=False)["input_ids"])

    def too_long_ways_out(self) -> str:
        return (
            f"{longest_document_words(self.provenance)}, cut them at the model's window (cut_tokens or "
            f"max_seq_lengths; the default preset does), or {ALLOW_BEYOND_WAY_OUT}"
        )

    def _settings_from_manifest(self, manifest: dict | None) -> None:
        """K, d, alpha, beta and the evaluator are what the spans were computed with; a metadata value that
        says otherwise is an error, not a silent override."""
        s = self.settings
        if not manifest:
            return
        source = f"{Path(s['key_spans_dir']) / span_files.MANIFEST}"
        for key in MANIFEST_KEYS:
            if key not in manifest:
                continue
            # a shared folder is data: its values pass the same checks as --metadata's before they are used
            value = SETTINGS.by_name[key].parse(manifest[key], source)
            if self.sized_by is not None and key in self.sized_by.settings_from:
                self.sized_by.settings_from[key] = f"key_spans_dir {span_files.MANIFEST}"
            if key in s.explicit and s[key] != value:
                raise SettingsError(
                    f"longppl_govreport: --metadata {key} = {s[key]!r}, but {self.settings['key_spans_dir']} holds "
                    f"spans computed with {key} = {value!r} (its {span_files.MANIFEST}); remove {key} from "
                    "the metadata or precompute spans with that value"
                )
            s[key] = value

    def settings_record(self, record: dict) -> dict:
        s = self.settings
        rec = dict(record)
        rec["key_source"] = s["key_source"]
        if self.judge is not None:
            rec.update(
                evaluator_identity=self.judge.identity,
                evaluator_dtype=self.judge.dtype_name,
                evaluator_max_length=self.judge.max_length,
            )
        elif s["key_source"] == "spans_dir":
            folder = self.span_folder
            assert folder is not None  # download reads the folder with key_source spans_dir
            rec.update(
                key_spans_dir=str(Path(s["key_spans_dir"]).resolve()),
                key_spans_manifest=folder.manifest,
                key_spans_verified=folder.verified,
            )
            if folder.manifest is None:  # what the spans were computed with is not known
                for key in MANIFEST_KEYS:
                    rec[key] = None
            for key in EVALUATOR_LOADING_SETTINGS:  # an evaluator's loading settings: none was loaded
                rec.pop(key, None)
                rec["runtime"].pop(key, None)
        else:
            rec["evaluator"] = "self"
        rec["data"] = self.provenance
        rec["span_algorithm_version"] = evaluator.SPAN_ALGORITHM_VERSION
        return rec

    # ---------------------------------------------------------------- requests

    def build_all_requests(self, **kwargs) -> None:
        super().build_all_requests(**kwargs)
        if self.judge is not None:
            self.judge.release()

    def _spec(self, judge: bool) -> dict:
        """The request of the evaluated text; with ``judge``, the text the model judges itself on (``self``): with
        its special tokens, as the reference tokenizes the evaluator's text, and the truncated windows."""
        s = self.settings
        request = text_scoring.TextRequest(
            add_special_tokens=judge,
            offsets=True,
            long_pass=s["long_pass"],
            chunk_size=s["chunk_size"],
            allow_beyond_max_length=s["allow_beyond_max_length"],
            trunc_len=s["trunc_len"] if judge else None,
            stride=s["sliding_window"] if judge else None,
            window_batch_size=s["short_batch_size"] if judge else None,
        )
        return request.to_spec()

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        evaluated = (doc["text"], self._spec(judge=False))
        if self.settings["key_source"] == "self":
            # The reference tokenizes the evaluator's text with its special tokens (BOS) and the evaluated text
            # without: two sequences, two requests; where they are the same tokens, the judging request's long
            # pass is the evaluated one (the same forward of the same ids), so one request serves both.
            judging = (doc["text"], self._spec(judge=True))
            return [judging] if self._same_tokens_with_special_tokens(doc["text"]) else [evaluated, judging]
        if self.judge is not None:
            try:
                self._judgements[doc["doc_id"]] = self.judge.judge(doc["text"])
            except scoring.ScoringError as err:  # e.g. the evaluator's length check: named with the task
                raise request_type.task_error(str(self.config.task), err) from err
        return [evaluated]

    # ---------------------------------------------------------------- evaluator

    def _scoring_records(self) -> dict:
        records = super()._scoring_records()
        if self.judge is not None:
            records["evaluator_scoring"] = self.judge.scoring or "no text judged in this run (spans from the cache)"
        return records

    # ---------------------------------------------------------------- results

    def doc_to_target(self, doc, doc_to_target=None):
        # no answer string to compare with: what is predicted (the counts and NLL sums are in the metric fields)
        return "every token of doc.text but the first, each predicted from all the tokens before it (teacher forced)"

    def _same_tokens_with_special_tokens(self, text: str) -> bool:
        """Whether the evaluated model's tokenizer gives ``text`` the same ids with and without its special tokens
        (a tokenizer that adds no BOS), as the harness will tokenize it."""
        tokenizer = self.evaluated_tokenizer()
        if tokenizer is None:
            return False
        with_special, without = (
            tokenizer(text, add_special_tokens=a, verbose=False)["input_ids"] for a in (True, False)
        )
        return list(with_special) == list(without)

    def _judgement(self, doc, results) -> evaluator.EvaluatorJudgement:
        src = self.settings["key_source"]
        if src == "self":  # the judging request is the last (the only one where both tokenizations agree)
            return evaluator.judge_from_scores(results[-1], self.settings["alpha"], self.settings["beta"])
        if src == "spans_dir":
            assert self.span_folder is not None  # download reads the folder with key_source spans_dir
            return evaluator.EvaluatorJudgement(self.span_folder.spans[doc["doc_id"]])
        return self._judgements[doc["doc_id"]]

    def process_results(self, doc, results):
        scored = results[0]
        judgement = self._judgement(doc, results)
        lp = scored.long.logprob.astype(np.float64)
        key_idx = spans_to_tokens.key_target_indices(scored.offsets, judgement.spans)
        n_key = int(len(key_idx))
        if n_key == 0:
            why = self._why_no_key_tokens(judgement)
            self._no_key_reasons[why] = self._no_key_reasons.get(why, 0) + 1
            msg = (
                f"longppl_govreport: document {doc['doc_id']} has no key tokens ({why}); it is left out of "
                "longppl and kept in ppl (as the reference does)"
            )
            log.warning(msg)
            warnings.warn(msg, errors.LongctxWarning, stacklevel=2)
        out = {
            "longppl": (per_token.nll_sum(lp[key_idx]), n_key),
            "ppl": (per_token.nll_sum(lp), int(len(lp))),
            "key_token_fraction": (n_key, int(len(lp))),
            "n_key_tokens": n_key,
        }
        gamma = self.settings["soft_gamma"]
        if gamma is not None:
            w = judgement.soft_weights_for(scored.offsets, gamma)
            out["longppl_soft"] = (float(np.sum(w * -lp)), float(np.sum(w)))
        s = self.settings
        token_export.write_document(
            self,
            doc,
            lambda: longppl_arrays(doc, scored, judgement, key_idx, s["alpha"], s["beta"], s["soft_gamma"]),
        )
        return out

    def _why_no_key_tokens(self, judgement: evaluator.EvaluatorJudgement) -> str:
        """Why a text has no key token, from what its judgement holds."""
        s = self.settings
        if s["key_source"] == "spans_dir":
            return "its precomputed span file holds no key span"
        if judgement.offsets is not None and len(judgement.offsets) <= s["trunc_len"]:
            return (
                f"{len(judgement.offsets)} evaluator tokens, not more than trunc_len = {s['trunc_len']}, so no "
                "token has a truncated context"
            )
        lsd = None if judgement.lsd is None else judgement.lsd[np.isfinite(judgement.lsd)]
        if lsd is None or lsd.size == 0:
            return f"no token gains more than alpha = {s['alpha']} nats from the long context with log-prob > beta"
        gain = float(lsd.max())
        if gain < NO_GAIN_NATS:
            return (
                f"the long and truncated contexts give the same log-probs (no gain above {NO_GAIN_NATS} nats): "
                f"the judging model reads no further back than trunc_len = {s['trunc_len']} tokens (a sliding "
                "window shorter than trunc_len, or a model that ignores its context)"
            )
        if gain <= s["alpha"]:
            return f"no token gains more than alpha = {s['alpha']} nats from the long context (largest gain {gain:.3g})"
        return f"the tokens that gain more than alpha = {s['alpha']} nats all have log-prob <= beta = {s['beta']}"

    def _no_key_note(self) -> str:
        reasons = "; ".join(
            f"{why} ({n} document{'s' if n > 1 else ''})"
            for why, n in sorted(self._no_key_reasons.items(), key=lambda kv: -kv[1])
        )
        return f"n/a: no key tokens in any document: {reasons or 'none met alpha and beta'}"

    def _metric_names(self):
        names = ["longppl", "ppl", "key_token_fraction", "n_key_tokens"]
        return names + (["longppl_soft"] if self.settings["soft_gamma"] is not None else [])

    def metric_declarations(self):
        out = {m: self.declare(AGGREGATIONS[m], m) for m in self._metric_names()}
        # no key token in any document: the reason, not a bare NaN (lm-eval aggregates after every process_results)
        out["longppl"] = self.declare(aggregations.perplexity_or_note(self._no_key_note()), "longppl")
        return out
