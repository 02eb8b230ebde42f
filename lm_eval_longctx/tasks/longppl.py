"""``longppl_govreport``: LongPPL and PPL of the evaluated model on the reference GovReport documents.

Key tokens come from one of (``--metadata``):
* ``evaluator``: an HF model id or local path (default ``meta-llama/Llama-3.1-8B``, as in the paper),
  run once per document at request-building time and cached on disk;
* ``evaluator: self``: the evaluated model judges its own tokens (two requests per document);
* ``key_spans_dir``: precomputed spans, ``slice_{i}.txt`` per document (reference format).
With spans available, the task costs one long pass of the evaluated model per document.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
from lm_eval.api.instance import Instance

from .. import data, harness, key_tokens, keyspans, metrics
from .base import LongContextTask, govreport_documents

harness.install()
log = logging.getLogger("lm_eval_longctx")

DEFAULTS = {
    "trunc_len": 4096,  # K
    "sliding_window": 1024,  # d
    "alpha": 2.0,
    "beta": -2.0,
    "evaluator": "meta-llama/Llama-3.1-8B",
    "evaluator_revision": None,
    "evaluator_device": None,  # default: this rank's CUDA device, else CPU; "auto": split over the GPUs
    "evaluator_max_memory": None,  # with "auto": {"0": "70GiB", ...}, "cpu" only to offload (dict or JSON)
    "evaluator_dtype": None,  # default: bfloat16 on CUDA, float32 on CPU
    "evaluator_trust_remote_code": False,
    "key_spans_dir": None,
    "span_cache_dir": None,  # default: ~/.cache/lm_eval_longctx/key_spans; "none" disables
    "soft_gamma": None,  # e.g. 5 adds longppl_soft
    "chunk_size": 1024,
    "short_batch_size": None,  # windows per forward; default: the harness --batch_size (or 8)
    "allow_beyond_max_length": False,
    **data.GOVREPORT_SETTINGS,
}
_INT = {"trunc_len", "sliding_window", "chunk_size", "num_docs", "min_tokens", "max_tokens"}
_FLOAT = {"alpha", "beta"}


def resolve_settings(metadata: dict | None) -> dict:
    md = dict(metadata or {})
    s = {k: md.get(k, v) for k, v in DEFAULTS.items()}
    for k in _INT:
        s[k] = int(s[k])
    for k in _FLOAT:
        s[k] = float(s[k])
    if s["soft_gamma"] is not None:
        s["soft_gamma"] = float(s["soft_gamma"])
    if s["short_batch_size"] is not None:
        s["short_batch_size"] = int(s["short_batch_size"])
    s["evaluator_max_memory"] = key_tokens.parse_max_memory(s["evaluator_max_memory"])
    if s["evaluator_max_memory"] is not None and s["evaluator_device"] != "auto":
        raise ValueError("evaluator_max_memory applies to evaluator_device 'auto' only; add \"evaluator_device\": \"auto\"")
    for k in ("evaluator_trust_remote_code", "allow_beyond_max_length"):
        s[k] = str(s[k]).lower() in ("1", "true", "yes")
    if s["trunc_len"] < 1 or s["sliding_window"] < 1:
        raise ValueError("trunc_len (K) and sliding_window (d) must be >= 1")
    if s["key_spans_dir"]:
        s["key_source"] = "spans_dir"
    elif str(s["evaluator"]).lower() == "self":
        s["key_source"] = "self"
    else:
        s["key_source"] = "evaluator"
    return s


class LongPPLTask(LongContextTask):
    resolve_settings = staticmethod(resolve_settings)

    def __init__(self, config: dict | None = None):
        self._judgements: dict[int, key_tokens.EvaluatorJudgement] = {}
        self._evaluator = None
        super().__init__(config)

    # ---------------------------------------------------------------- data

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings
        self.dataset, self.provenance = govreport_documents(s)
        if s["key_source"] == "spans_dir":
            n_docs = len(self.dataset["test"])
            self._spans_from_dir, manifest = keyspans.read_span_dir(s["key_spans_dir"], n_docs)
            self._check_manifest(manifest)

    def _check_manifest(self, manifest: dict) -> None:
        sha = manifest.get("texts_sha256")
        if sha and sha != self.provenance["texts_sha256"]:
            raise ValueError(
                f"{self.settings['key_spans_dir']} was computed for other documents (texts_sha256 {sha[:12]}... "
                f"vs {self.provenance['texts_sha256'][:12]}...): its character spans do not index these texts"
            )
        self.span_manifest = manifest

    def _record_settings(self) -> None:
        """Everything that changes the numbers goes into the results JSON (configs -> metadata)."""
        s = self.settings
        rec = {k: s[k] for k in ("trunc_len", "sliding_window", "alpha", "beta", "soft_gamma", "key_source")}
        if s["key_source"] == "evaluator":
            rec.update(evaluator=s["evaluator"], evaluator_revision=s["evaluator_revision"],
                       evaluator_dtype=s["evaluator_dtype"] or "auto")
        elif s["key_source"] == "spans_dir":
            rec.update(key_spans_dir=str(Path(s["key_spans_dir"]).resolve()),
                       key_spans_manifest=getattr(self, "span_manifest", {}) or None)
        else:
            rec.update(evaluator="self")
        rec["data"] = self.provenance
        rec["span_algorithm_version"] = key_tokens.SPAN_ALGORITHM_VERSION
        self._store_settings(rec)

    # ---------------------------------------------------------------- requests

    def build_all_requests(self, **kwargs) -> None:
        super().build_all_requests(**kwargs)
        self._release_evaluator()

    def _spec(self, judge: bool) -> dict:
        s = self.settings
        spec = {"add_special_tokens": judge, "offsets": True, "chunk_size": s["chunk_size"],
                "allow_beyond_max_length": s["allow_beyond_max_length"]}
        if judge:
            spec["truncated"] = {"trunc_len": s["trunc_len"], "stride": s["sliding_window"]}
            spec["batch_size"] = s["short_batch_size"]
        return spec

    def construct_requests(self, doc, ctx, **kwargs):
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        reqs = [Instance(harness.REQUEST_TYPE, doc, (doc["text"], self._spec(judge=False)), 0, **kwargs)]
        if self.settings["key_source"] == "self":
            # The reference tokenizes the evaluator's text with its special tokens (BOS) and the
            # evaluated text without: two sequences, two requests.
            reqs.append(Instance(harness.REQUEST_TYPE, doc, (doc["text"], self._spec(judge=True)), 1, **kwargs))
        elif self.settings["key_source"] == "evaluator":
            self._judgements[doc["doc_id"]] = self._judge_with_evaluator(doc["text"])
        return reqs

    # ---------------------------------------------------------------- evaluator

    def _evaluator_settings(self) -> dict:
        s = self.settings
        return {k: s[k] for k in ("evaluator", "evaluator_revision", "trunc_len", "sliding_window", "alpha", "beta")} | {
            "evaluator_dtype": self._evaluator_dtype_name()}

    def _evaluator_device(self) -> str:
        return self.settings["evaluator_device"] or key_tokens.default_evaluator_device()

    def _evaluator_dtype_name(self) -> str:
        return key_tokens.evaluator_dtype_name(self._evaluator_device(), self.settings["evaluator_dtype"])

    def _load_evaluator(self):
        if self._evaluator is None:
            s = self.settings
            name = s["evaluator"]
            log.info("loading the key-token evaluator %s on %s", name, self._evaluator_device())
            model, tok = key_tokens.load_evaluator(
                name, revision=s["evaluator_revision"], dtype=self._evaluator_dtype_name(),
                device=self._evaluator_device(), max_memory=s["evaluator_max_memory"],
                trust_remote_code=s["evaluator_trust_remote_code"])
            self._evaluator = (model, tok)
            self.config.metadata["longctx_settings"]["evaluator_fingerprint"] = key_tokens.model_fingerprint(name, model)
        return self._evaluator

    def _release_evaluator(self) -> None:
        if self._evaluator is not None:
            self._evaluator = None
            import gc

            import torch

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def _span_cache(self) -> key_tokens.SpanCache:
        d = self.settings["span_cache_dir"]
        if d is not None and str(d).lower() == "none":
            return key_tokens.SpanCache(None)
        return key_tokens.SpanCache(d or key_tokens.default_cache_dir())

    def _judge_with_evaluator(self, text: str) -> key_tokens.EvaluatorJudgement:
        cache = self._span_cache()
        settings = self._evaluator_settings()
        if Path(str(settings["evaluator"])).is_dir():
            settings["evaluator_fingerprint"] = key_tokens.model_fingerprint(settings["evaluator"])
        key = cache.key(text, settings)
        hit = cache.get(key)
        if hit is not None:
            return hit
        model, tok = self._load_evaluator()
        s = self.settings
        scores = key_tokens.score_text(model, tok, text, s["trunc_len"], s["sliding_window"],
                                       chunk_size=s["chunk_size"], batch_size=s["short_batch_size"] or 4)
        judgement = key_tokens.judge_from_scores(scores, s["alpha"], s["beta"])
        cache.put(key, judgement, settings)
        return judgement

    # ---------------------------------------------------------------- results

    def _judgement(self, doc, results) -> key_tokens.EvaluatorJudgement:
        src = self.settings["key_source"]
        if src == "self":
            return key_tokens.judge_from_scores(results[1], self.settings["alpha"], self.settings["beta"])
        if src == "spans_dir":
            return key_tokens.EvaluatorJudgement(self._spans_from_dir[doc["doc_id"]])
        return self._judgements[doc["doc_id"]]

    def process_results(self, doc, results):
        scored = results[0]
        judgement = self._judgement(doc, results)
        lp = scored.long.logprob.astype(np.float64)
        key_idx = keyspans.key_target_indices(scored.offsets, judgement.spans)
        n_key = int(len(key_idx))
        if n_key == 0:
            why = ""
            if judgement.offsets is not None and len(judgement.offsets) <= self.settings["trunc_len"]:
                why = (f" (it has {len(judgement.offsets)} evaluator tokens, not more than trunc_len = "
                       f"{self.settings['trunc_len']}, so no token has a truncated context)")
            msg = (f"longppl_govreport: document {doc['doc_id']} has no key tokens{why}; it is left out of "
                   "longppl and kept in ppl (as the reference does)")
            log.warning(msg)
            warnings.warn(msg, stacklevel=2)
        out = {
            "longppl": (metrics.nll_sum(lp[key_idx]), n_key),
            "ppl": (metrics.nll_sum(lp), int(len(lp))),
            "key_token_fraction": (n_key, int(len(lp))),
            "n_key_tokens": n_key,
        }
        gamma = self.settings["soft_gamma"]
        if gamma is not None:
            w = judgement.soft_weights_for(scored.offsets, gamma)
            out["longppl_soft"] = (float(np.sum(w * -lp)), float(np.sum(w)))
        return out

    def _metric_names(self):
        names = ["longppl", "ppl", "key_token_fraction", "n_key_tokens"]
        return names + (["longppl_soft"] if self.settings["soft_gamma"] is not None else [])

    def aggregation(self):
        return {m: harness.aggregation_fn(harness.METRICS[m][0]) for m in self._metric_names()}

    def higher_is_better(self):
        return {m: harness.METRICS[m][1] for m in self._metric_names()}
