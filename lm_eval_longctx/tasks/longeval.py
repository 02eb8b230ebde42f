"""LongEval "lines" (LongChat): answer-token perplexity beside retrieval accuracy.

Two tasks over the same test cases (``lm_eval_longctx.data.longeval_cases``), run together as the group
``longeval_lines``:

* ``longeval_lines_ppl`` (our ``longctx_scores`` requests, ``--model hf``): the reference response
  ``The <REGISTER_CONTENT> in line {name} is <{n}>.`` is read teacher-forced after the prompt, one
  request per case; ``answer_ppl`` is the perplexity of the tokens of the number, ``non_answer_ppl``
  that of the response's other tokens (LongPPL paper, section 2.1, Table 9).
* ``longeval_lines_acc`` (the harness's ``generate_until``, so ``--apply_chat_template``,
  ``--system_instruction`` and ``--gen_kwargs`` work as for any task): greedy generation of at most
  100 new tokens; correct iff the last integer of the output equals the expected number (LongChat).

Two tasks because a task has one OUTPUT_TYPE, the request type the harness pads under data
parallelism. Each reports every configuration (number of lines N) separately, N zero-padded so the
results table sorts by it: ``answer_ppl_0200``, ``non_answer_ppl_0200``, ``acc_0200``, and
``prompt_tokens_0200``, the mean prompt length in the evaluated model's tokens; ``answer_ppl``,
``non_answer_ppl`` and ``acc`` pool all configurations. Perplexities are token-weighted corpus values
(exp of total NLL over total tokens) with a bootstrap stderr over cases.

Answer tokens: prompt + response are tokenized together, with character offsets. The response's
tokens are those whose span ends after the response starts (a token merging the prompt's last
character with the response's first belongs to the response); an answer token is a response token
whose span overlaps the digits of the number, so a token merging "<" or ">" with a digit counts and
no digit is ever in a non-answer token. Special (zero-width) tokens are in neither part.

A prompt longer than the model allows is an error (default) or, with ``over_length: skip``, a skip
recorded as ``skipped_{N}``; never a silent truncation. For accuracy the limit is the model's
maximum length minus ``max_gen_toks``, where the harness would cut the prompt's left end: a cheap
``longctx_scores`` request per case counts the prompt's tokens before any generation runs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
from dataclasses import dataclass

import numpy as np
from lm_eval.api.instance import Instance

from ..data import longeval_cases, longeval_words
from ..engine import scoring
from ..harness import glue
from ..keytokens import text_scoring
from ..metrics import per_token
from . import declarations, token_export
from .base import LongContextTask

log = logging.getLogger("lm_eval_longctx")

ANSWER_KIND = "longeval_lines_answer"
LENGTH_KIND = "longeval_lines_prompt_length"

SETTINGS = declarations.LONGEVAL_LINES
DEFAULTS = SETTINGS.defaults()


def resolve_settings(metadata: dict | None) -> dict:
    return SETTINGS.parse(metadata)


@functools.lru_cache(maxsize=4)
def _generated(num_lines: tuple[int, ...], num_cases: int, seed: int, trailing_space) -> tuple:
    # both tasks of the group build the same cases: generate them once per process
    return tuple(longeval_cases.generate_cases(num_lines, num_cases, seed, trailing_space))


def build_cases(s: dict) -> list[longeval_cases.TestCase]:
    if s["testcases"]:
        cases = longeval_cases.load_testcases(s["testcases"], s["num_lines"], max_cases=s["num_cases"])
    else:
        longeval_cases.check_word_lists()
        cases = list(_generated(tuple(s["num_lines"]), s["num_cases"], s["seed"], s["trailing_space"]))
    return longeval_cases.interleave(cases)


# ------------------------------------------------------------------ request kinds (no lm-eval here)


def _add_special_tokens(tokenizer, text: str, mode) -> bool:
    """``auto`` as the harness encodes: the tokenizer's own special tokens, unless the text already
    starts with the BOS string (a chat template that writes it)."""
    if mode not in (None, "auto"):
        return bool(mode)
    bos = getattr(tokenizer, "bos_token", None)
    return not (isinstance(bos, str) and bos and text.startswith(bos))


@dataclass
class AnswerScores:
    """Log-probs of the response tokens of one case, read after its prompt."""

    n_tokens: int  # prompt + response
    prompt_tokens: int  # tokens before the first response token
    offsets: np.ndarray  # int64 [m, 2]: response tokens' character spans, relative to the response start
    logprob: np.ndarray  # float32 [m]
    skipped: bool = False  # longer than the model's maximum, over_length = skip: not scored

    def to_state(self) -> dict:
        return {
            "n_tokens": self.n_tokens,
            "prompt_tokens": self.prompt_tokens,
            "offsets": self.offsets,
            "logprob": self.logprob,
            "skipped": self.skipped,
        }

    @classmethod
    def from_state(cls, state: dict) -> AnswerScores:
        return cls(
            int(state["n_tokens"]),
            int(state["prompt_tokens"]),
            np.asarray(state["offsets"]),
            np.asarray(state["logprob"]),
            bool(state["skipped"]),
        )

    def summary(self) -> dict:
        """Token counts and the response's NLL sum (float64); a skipped case has no NLL. No per-token array."""
        out: dict = {"n_tokens": self.n_tokens, "prompt_tokens": self.prompt_tokens, "skipped": self.skipped}
        if not self.skipped:
            out["response_tokens"] = int(len(self.logprob))
            out["response_nll_sum"] = float(-np.sum(self.logprob.astype(np.float64))) + 0.0  # + 0.0: no -0.0
        return out

    def __str__(self) -> str:
        # lm-eval writes str() of every response into --log_samples files: make it JSON text a user can parse
        return json.dumps(self.summary(), separators=(",", ":"))

    def __repr__(self) -> str:
        return f"AnswerScores({self})"


def score_answer(model, tokenizer, text: str, spec: dict, max_length: int | None) -> AnswerScores:
    """Tokenize prompt + response with offsets, find the response's first token, score from there."""
    request = text_scoring.TextRequest(
        add_special_tokens=_add_special_tokens(tokenizer, text, spec.get("add_special_tokens")),
        offsets=True,
        long_pass=str(spec.get("long_pass", "auto")),
        chunk_size=int(spec.get("chunk_size", scoring.DEFAULT_CHUNK_SIZE)),
        allow_beyond_max_length=bool(spec.get("allow_beyond_max_length", False)),
    )
    ids, offsets = text_scoring.tokenize(tokenizer, text, request)
    start = int(spec["response_start"])
    try:
        first = text_scoring.first_token_after(offsets, start)
    except scoring.ScoringError:
        raise scoring.ScoringError("longeval_lines: no token of the tokenized text covers the response") from None
    if first < 1:
        raise scoring.ScoringError(
            "longeval_lines: the response's first token starts the sequence; nothing precedes it"
        )
    n = len(ids)
    if (
        spec.get("over_length") == "skip"
        and max_length
        and n > max_length
        and not spec.get("allow_beyond_max_length", False)
    ):
        empty = np.zeros((0, 2), dtype=np.int64)
        return AnswerScores(n, first, empty, np.zeros(0, dtype=np.float32), skipped=True)
    try:
        text_scoring.check_length(n, max_length, request.allow_beyond_max_length)
    except scoring.ScoringError as err:
        raise scoring.ScoringError(
            f'longeval_lines_ppl: {err} Or pass --metadata \'{{"over_length": "skip"}}\' '
            "to record such cases as skipped, or fewer num_lines."
        ) from err
    scored = text_scoring.score_tokens(model, ids, offsets, dataclasses.replace(request, score_from=first))
    lp = scored.long.logprob[first - 1 :]
    return AnswerScores(n, first, offsets[first:] - start, lp.astype(np.float32))


@dataclass
class PromptLength:
    """How many tokens the harness's generate_until will read for a prompt, and whether they fit."""

    n_tokens: int
    limit: int | None  # max_length - max_gen_toks (None: no known maximum)
    skipped: bool = False

    def to_state(self) -> dict:
        return {"n_tokens": self.n_tokens, "limit": self.limit, "skipped": self.skipped}

    @classmethod
    def from_state(cls, state: dict) -> PromptLength:
        limit = state["limit"]
        return cls(int(state["n_tokens"]), None if limit is None else int(limit), bool(state["skipped"]))

    def summary(self) -> dict:
        return {"n_tokens": self.n_tokens, "limit": self.limit, "skipped": self.skipped}

    def __str__(self) -> str:
        # lm-eval writes str() of every response into --log_samples files: make it JSON text a user can parse
        return json.dumps(self.summary(), separators=(",", ":"))

    def __repr__(self) -> str:
        return f"PromptLength({self})"


def prompt_length(tokenizer, text: str, spec: dict, max_length: int | None) -> PromptLength:
    """The prompt's token count as HFLM.generate_until encodes it (the tokenizer's special tokens
    unless the text starts with BOS; an ``add_bos_token`` model argument can only remove tokens, so
    this count is never below the harness's), against max_length - max_gen_toks."""
    n = len(tokenizer(text, add_special_tokens=_add_special_tokens(tokenizer, text, "auto"))["input_ids"])
    max_gen = int(spec["max_gen_toks"])
    limit = max_length - max_gen if max_length else None
    if limit is not None and n > limit:
        if spec.get("over_length") == "skip":
            return PromptLength(n, limit, skipped=True)
        raise scoring.ScoringError(
            f"longeval_lines_acc: a {n}-token prompt plus {max_gen} generated tokens exceeds the model's maximum "
            f"length {max_length}; the harness would silently cut the prompt's beginning. "
            f"{text_scoring.RAISE_MAX_LENGTH}, use fewer num_lines, or pass --metadata "
            '\'{"over_length": "skip"}\' to record such cases as skipped.'
        )
    return PromptLength(n, limit)


serve_answers = glue.serve_each(
    lambda ctx, text, spec: score_answer(ctx.model, ctx.tokenizer, text, spec, ctx.max_length)
)
serve_prompt_lengths = glue.serve_each(lambda ctx, text, spec: prompt_length(ctx.tokenizer, text, spec, ctx.max_length))
glue.register_request_kind(
    ANSWER_KIND, serve_answers, AnswerScores.from_state, n_tokens=lambda r: None if r.skipped else r.n_tokens
)
glue.register_request_kind(LENGTH_KIND, serve_prompt_lengths, PromptLength.from_state)


# ------------------------------------------------------------------ the tasks


class _LinesTask(LongContextTask):
    """Shared: the cases as harness documents, per-configuration metric names, settings record."""

    resolve_settings = staticmethod(resolve_settings)
    SCORES_PER_TOKEN = False  # the scoring subclass says so; the accuracy task generates
    # metric stem -> aggregation name, reported per configuration and pooled (directions: metrics/directions.py)
    PER_CONFIG: dict[str, str] = {}
    POOLED: tuple[str, ...] = ()
    SCORES_RAW_DOCUMENTS = False  # a prompt the model answers: --apply_chat_template, --system_instruction apply
    NO_SHOTS_BECAUSE = "the prompt is LongChat's, fixed by the LongEval paper; shots would change what is measured"

    def sampling_seed(self) -> int | None:
        return None if self.settings["testcases"] else self.settings["seed"]  # files hold their cases

    def build_all_requests(self, **kwargs) -> None:
        # the prompt's form changes the numbers: recorded when a chat template or system instruction shapes it
        given = {
            "apply_chat_template": bool(kwargs.get("apply_chat_template")),
            "system_instruction": kwargs.get("system_instruction") or None,
        }
        record = self.config.metadata["longctx_settings"]
        record.pop("prompt_format", None)
        if any(given.values()):
            record["prompt_format"] = given
        super().build_all_requests(**kwargs)

    # ---------------------------------------------------------------- data

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        import datasets

        cases = build_cases(self.settings)
        self.configurations = sorted({c.num_lines for c in cases})
        # zero-padded so that lm-eval's lexicographic metric sort is numeric
        self._width = max(4, len(str(self.configurations[-1])))
        self.provenance = longeval_cases.provenance(cases)
        self.dataset = datasets.DatasetDict(
            {"test": datasets.Dataset.from_list([longeval_cases.to_doc(c, i) for i, c in enumerate(cases)])}
        )

    def doc_to_text(self, doc, doc_to_text=None):
        return doc["prompt"]

    def config_key(self, num_lines: int) -> str:
        return f"{int(num_lines):0{self._width}d}"

    def _record_settings(self) -> None:
        """Everything that changes the numbers goes into the results JSON (configs -> metadata)."""
        s = self.settings
        rec = SETTINGS.record(s)
        rec["num_lines"] = self.configurations
        if s["testcases"]:
            for unused in ("seed", "trailing_space"):  # the files hold the cases
                rec.pop(unused)
            rec["source"] = {"testcases": s["testcases"], "max_cases_per_file": s["num_cases"]}
        else:
            rec["source"] = {
                "generated": True,
                "num_cases": s["num_cases"],
                "seed": s["seed"],
                "trailing_space": s["trailing_space"],
                "generator_version": longeval_cases.GENERATOR_VERSION,
                "wordlist_version": longeval_words.WORDLIST_VERSION,
                "wordlist_sha256": longeval_cases.wordlist_fingerprint(),
            }
        rec["data"] = self.provenance
        rec.update(self._extra_settings())
        self._store_settings(rec)

    def _extra_settings(self) -> dict:
        return {}

    # ---------------------------------------------------------------- metrics

    def metric_declarations(self):
        out = {m: self.declare(self.PER_CONFIG[m], m) for m in self.POOLED}
        stems = dict(self.PER_CONFIG)
        if self.settings["over_length"] == "skip":
            stems["skipped"] = "mean"
        for n in self.configurations:
            for stem, agg in stems.items():
                name = f"{stem}_{self.config_key(n)}"
                out[name] = self.declare(agg, name, subset=True)  # one configuration's cases, by design
        return out

    def _skipped(self, key: str, skipped: bool) -> dict:
        return {f"skipped_{key}": float(skipped)} if self.settings["over_length"] == "skip" else {}


class LongEvalLinesPPLTask(_LinesTask):
    SUITE_TASK_NAME = "longeval_lines_ppl"
    PER_CONFIG = {
        "answer_ppl": "token_weighted_perplexity",
        "non_answer_ppl": "token_weighted_perplexity",
        "prompt_tokens": "mean",
    }
    POOLED = ("answer_ppl", "non_answer_ppl")
    SCORES_PER_TOKEN = True

    def _extra_settings(self) -> dict:
        return {
            "response_template": longeval_cases.RESPONSE_TEMPLATE,
            "join": "prompt + ' ' + response (no space when the prompt ends with whitespace or a chat template "
            "was applied)",
            "answer_tokens": "response tokens whose character span overlaps the number's digits",
            "allow_beyond_max_length": self.settings["allow_beyond_max_length"],
        }

    def construct_requests(self, doc, ctx, **kwargs):
        templated = bool(kwargs.pop("apply_chat_template", False))
        kwargs.pop("chat_template", None)
        # One space between "I need the number." and the response, whether or not the prompt brings it
        # (the 200-680 files do), so every configuration reads the same response text.
        sep = "" if templated or ctx[-1:].isspace() else " "
        spec = {
            "kind": ANSWER_KIND,
            "response_start": len(ctx) + len(sep),
            "add_special_tokens": "auto",
            "chunk_size": self.settings["chunk_size"],
            "long_pass": self.settings["long_pass"],
            "over_length": self.settings["over_length"],
            "allow_beyond_max_length": self.settings["allow_beyond_max_length"],
        }
        return [Instance(glue.REQUEST_TYPE, doc, (ctx + sep + doc["response"], spec), 0, **kwargs)]

    def doc_to_target(self, doc, doc_to_target=None):
        # the reference response, the text read teacher-forced after the prompt
        return doc["response"]

    def process_results(self, doc, results):
        scores: AnswerScores = results[0]
        key = self.config_key(doc["num_lines"])
        token_export.write_document(self, doc, results)
        if scores.skipped:
            return self._skipped(key, True)
        answer, other = per_token.answer_nll_split(
            scores.logprob, scores.offsets, (doc["answer_start"], doc["answer_end"])
        )
        return {
            "answer_ppl": answer,
            "non_answer_ppl": other,
            f"answer_ppl_{key}": answer,
            f"non_answer_ppl_{key}": other,
            f"prompt_tokens_{key}": scores.prompt_tokens,
            **self._skipped(key, False),
        }


class LongEvalLinesAccTask(_LinesTask):
    SUITE_TASK_NAME = "longeval_lines_acc"
    PER_CONFIG = {"acc": "mean", "prompt_tokens": "mean"}
    POOLED = ("acc",)
    REQUEST_TYPE_NOTE = (
        f"generate_until, after one {glue.REQUEST_TYPE} request per case (this plugin's type: the prompt's token "
        "count, checked before any generation)"
    )

    def _extra_settings(self) -> dict:
        return {"correct": "last integer of the output (re.findall(r'\\d+')[-1]) == expected_number"}

    def construct_requests(self, doc, ctx, **kwargs):
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        gen_kwargs = copy.deepcopy(self.config.generation_kwargs or {})
        # HFLM's own default when the YAML or --gen_kwargs give none
        max_gen = int(gen_kwargs.get("max_gen_toks", 256))
        length_spec = {"kind": LENGTH_KIND, "max_gen_toks": max_gen, "over_length": self.settings["over_length"]}
        # The length check comes first, so its request type runs before generate_until: an over-long
        # prompt stops the run before any generation. (Under data parallelism the harness pads
        # generate_until by the difference in instance counts, two per case: at most a few extra
        # generations, no wrong numbers.)
        return [
            Instance(glue.REQUEST_TYPE, doc, (ctx, length_spec), 0, **kwargs),
            Instance("generate_until", doc, (ctx, gen_kwargs), 1, **kwargs),
        ]

    def doc_to_target(self, doc, doc_to_target=None):
        # the expected answer: correct iff the output's last integer is this number
        return str(int(doc["expected_number"]))

    def process_results(self, doc, results):
        length, output = results
        key = self.config_key(doc["num_lines"])
        if length.skipped:
            return self._skipped(key, True)
        correct = float(longeval_cases.last_integer(output) == int(doc["expected_number"]))
        return {
            "acc": correct,
            f"acc_{key}": correct,
            f"prompt_tokens_{key}": length.n_tokens,
            **self._skipped(key, False),
        }
