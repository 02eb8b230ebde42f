"""LongEval "lines" (LongChat): answer-token perplexity beside retrieval accuracy.

Two tasks over the same test cases (``lm_eval_longctx.data.longeval_cases``), run together as the group
``longeval_lines``:

* ``longeval_lines_ppl`` (our ``longctx_scores`` requests, ``--model hf``): the reference response
  ``The <REGISTER_CONTENT> in line {name} is <{n}>.`` is read teacher-forced after the prompt, one
  request per case; ``answer_ppl`` is the perplexity of the tokens of the number, ``non_answer_ppl``
  that of the response's other tokens (LongPPL paper, section 2.1, Table 9).
* ``longeval_lines_acc`` (our ``longctx_scores`` requests; the YAML says ``generate_until``, so
  ``--apply_chat_template``, ``--system_instruction`` and ``--gen_kwargs`` work as for any generating task):
  greedy generation of at most 100 new tokens by the engine (``engine/generation.py``: batched, on the
  model's own cache, each case stopping at the end-of-sequence token); correct iff the last integer of the
  output equals the expected number (LongChat).

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
maximum length minus ``max_gen_toks``; every prompt's tokens are counted before any generation runs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from lm_eval.utils import simple_parse_args_string

from ..data import documents, longeval_cases, longeval_words
from ..engine import generation, scoring
from ..harness import evaluation, request_type
from ..keytokens import text_scoring
from ..metrics import per_token
from ..records import StateRecord
from ..settings import (
    BOOLEAN,
    GIVEN,
    LOCATION_OR_LIST,
    Declaration,
    Setting,
    SettingsError,
    choice,
    integer,
    integer_list,
)
from . import declarations, run_options, sizing, token_export
from .base import LongContextTask, ReportSection, refuse_inert_settings

log = logging.getLogger("lm_eval_longctx")

ANSWER_KIND = "longeval_lines_answer"
GENERATION_KIND = "longeval_lines_generation"
# what --gen_kwargs may set for the accuracy task (the engine's generation takes these; anything else is refused)
GENERATION_KEYS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p", "top_k")


def refuse_generation_keys(task_name: str, gen_kwargs: dict) -> None:
    """Refuse a generation setting the engine's generation does not apply."""
    unknown = sorted(set(gen_kwargs) - set(GENERATION_KEYS))
    if unknown:
        raise run_options.UnsupportedOptionError(
            f"{task_name}: generation setting(s) {', '.join(unknown)} (--gen_kwargs or the YAML's "
            f"generation_kwargs) are not applied by this task's generation, which takes "
            f"{', '.join(GENERATION_KEYS)}. Leave them out."
        )


SETTINGS = Declaration(
    "longeval_lines",
    [
        *declarations.sizing_settings(),
        Setting(
            "num_lines",
            integer_list(1, declarations.MAX_NUM_LINES, declarations.MAX_LIST_ENTRIES),
            None,
            "numbers of lines (configurations); default: a prompt of about each length L (W/8, W/4, W/2 and W of "
            "the model's window W, or each max_seq_lengths) with room for the answer (max_gen_toks), lines counted "
            "in the evaluated model's tokens (LongChat's: 200 ... 1350)",
            optional=True,
        ),
        Setting(
            "num_cases",
            integer(1, declarations.MAX_SAMPLES),
            longeval_cases.DEFAULT_NUM_CASES,
            "cases per configuration",
        ),
        Setting("seed", integer(0, 2**32 - 1), 0, "seed of the generated cases"),
        Setting(
            "trailing_space",
            choice("reference", "true", "false", aliases={"1": "true", "yes": "true", "0": "false", "no": "false"}),
            "reference",
            "prompt ends with a space: as LongChat's files (200-680 lines), always, or never",
        ),
        Setting(
            "testcases",
            LOCATION_OR_LIST,
            None,
            "LongChat's files: a folder or URL prefix holding {N}_lines.jsonl, "
            "a .jsonl, or a list of them (default: generate the cases)",
            optional=True,
        ),
        Setting(
            "over_length",
            choice("error", "skip"),
            "error",
            "a prompt longer than the model allows: stop with an error, or record the case as skipped",
        ),
        Setting("allow_beyond_max_length", BOOLEAN, False, "answer-token PPL only: " + declarations.ALLOW_BEYOND_DOC),
        *declarations.long_pass_settings(),
        declarations.export_tokens_setting("answer-token PPL only: "),
    ],
    presets={
        "ci": {"max_seq_lengths": declarations.CI_LENGTHS, "num_cases": declarations.CI_DOCUMENTS},
        "paper": {"num_lines": list(longeval_cases.DEFAULT_NUM_LINES), "num_cases": longeval_cases.DEFAULT_NUM_CASES},
    },
)
DEFAULTS = SETTINGS.defaults()
# The room a sized prompt leaves for the answer: LongChat's 100 new tokens (the accuracy task's max_gen_toks), or
# --gen_kwargs max_gen_toks when larger; the same for both tasks, so that they read the same cases
ANSWER_ROOM = 100


def resolve_settings(metadata: dict | None) -> dict:
    return declarations.parse(SETTINGS, metadata)


# ------------------------------------------------------------------ request kinds (no lm-eval here)


def _add_special_tokens(tokenizer, text: str, mode) -> bool:
    """``auto`` as the harness encodes: the tokenizer's own special tokens, unless the text already
    starts with the BOS string (a chat template that writes it)."""
    if mode not in (None, "auto"):
        return bool(mode)
    bos = getattr(tokenizer, "bos_token", None)
    return not (isinstance(bos, str) and bos and text.startswith(bos))


@dataclass(repr=False)
class AnswerScores(StateRecord):
    """Log-probs of the response tokens of one case, read after its prompt."""

    n_tokens: int  # prompt + response
    prompt_tokens: int  # tokens before the first response token
    offsets: np.ndarray  # int64 [m, 2]: response tokens' character spans, relative to the response start
    logprob: np.ndarray  # float32 [m]
    skipped: bool = False  # longer than the model's maximum, over_length = skip: not scored

    def summary(self) -> dict:
        """Token counts and the response's NLL sum (float64); a skipped case has no NLL. No per-token array."""
        out: dict = {"n_tokens": self.n_tokens, "prompt_tokens": self.prompt_tokens, "skipped": self.skipped}
        if not self.skipped:
            out["response_tokens"] = int(len(self.logprob))
            out["response_nll_sum"] = float(-np.sum(self.logprob.astype(np.float64))) + 0.0  # + 0.0: no -0.0
        return out


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
    assert offsets is not None  # the request asks for them
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


@dataclass(repr=False)
class PromptLength(StateRecord):
    """How many tokens generation reads for a prompt, and whether they fit."""

    n_tokens: int
    limit: int | None  # max_length - max_gen_toks (None: no known maximum)
    skipped: bool = False

    def summary(self) -> dict:
        return {"n_tokens": self.n_tokens, "limit": self.limit, "skipped": self.skipped}


def prompt_length(tokenizer, text: str, spec: dict, max_length: int | None) -> PromptLength:
    """The prompt's token count as generation reads it (the tokenizer's special tokens unless the text starts
    with BOS, as HFLM encodes a prompt), against max_length - max_gen_toks."""
    n = len(tokenizer(text, add_special_tokens=_add_special_tokens(tokenizer, text, "auto"))["input_ids"])
    max_gen = int(spec["max_gen_toks"])
    limit = max_length - max_gen if max_length else None
    if limit is not None and n > limit:
        if spec.get("over_length") == "skip":
            return PromptLength(n, limit, skipped=True)
        raise scoring.ScoringError(
            f"longeval_lines_acc: a {n}-token prompt plus {max_gen} generated tokens exceeds the model's maximum "
            f"length {max_length}. "
            f"{text_scoring.RAISE_MAX_LENGTH}, use fewer num_lines, or pass --metadata "
            '\'{"over_length": "skip"}\' to record such cases as skipped.'
        )
    return PromptLength(n, limit)


serve_answers = request_type.serve_each(
    lambda ctx, text, spec: score_answer(ctx.model, ctx.tokenizer, text, spec, ctx.max_length)
)


def _text_tokens(tokenizer, text: str) -> int:
    return len(
        tokenizer(text, add_special_tokens=_add_special_tokens(tokenizer, text, "auto"), verbose=False)["input_ids"]
    )


@dataclass(repr=False)
class GeneratedAnswer(StateRecord):
    """What the model generated after one prompt (decoded, cut at the first stop string), or a skipped case."""

    prompt_tokens: int
    limit: int | None  # max_length - max_gen_toks (None: no known maximum)
    text: str = ""
    generated_tokens: int = 0
    skipped: bool = False

    def summary(self) -> dict:
        return {name: getattr(self, name) for name in ("prompt_tokens", "limit", "generated_tokens", "skipped", "text")}


def _stop_token_ids(model, tokenizer) -> tuple[int, ...]:
    """The tokenizer's end of sequence and the model's own generation config's: where LongChat's generation stops."""
    ids = {tokenizer.eos_token_id} if getattr(tokenizer, "eos_token_id", None) is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured if isinstance(configured, (list, tuple)) else [configured] if configured is not None else [])
    return tuple(sorted(int(i) for i in ids))


def generation_settings(model, tokenizer, spec: dict) -> generation.GenerationSettings:
    pad = getattr(tokenizer, "pad_token_id", None)
    stops = _stop_token_ids(model, tokenizer)
    return generation.GenerationSettings(
        max_new_tokens=int(spec["max_gen_toks"]),
        stop_token_ids=stops,
        pad_token_id=int(pad if pad is not None else (stops[0] if stops else 0)),
        stop_strings=tuple(spec.get("until") or ()),
        do_sample=bool(spec.get("do_sample", False)),
        temperature=spec.get("temperature"),
        top_p=spec.get("top_p"),
        top_k=spec.get("top_k"),
    )


def _cut_at_stop_strings(text: str, until) -> str:
    """The text up to the first stop string, as lm-eval cuts generate_until's outputs."""
    for stop in until or ():
        if stop:
            text = text.split(stop)[0]
    return text


def serve_generations(ctx: request_type.ScoringContext, items: list) -> list[GeneratedAnswer]:
    """Every prompt's length checked first (an over-long prompt stops the run before any generation, or is skipped
    with over_length: skip), then the prompts of one set of generation settings generated together, up to
    --batch_size per generate call (``engine/generation.py``)."""
    lengths = [prompt_length(ctx.tokenizer, text, spec, ctx.max_length) for text, spec in items]
    out: list[GeneratedAnswer | None] = [None] * len(items)
    groups: dict[str, list[int]] = {}
    for i, ((_, spec), length) in enumerate(zip(items, lengths, strict=True)):
        if length.skipped:
            out[i] = GeneratedAnswer(length.n_tokens, length.limit, skipped=True)
            ctx.progress(1)
            continue
        groups.setdefault(json.dumps({k: v for k, v in spec.items() if k != "over_length"}, sort_keys=True), []).append(
            i
        )
    for idx in groups.values():
        spec = items[idx[0]][1]
        prompts = [
            ctx.tokenizer(text, add_special_tokens=_add_special_tokens(ctx.tokenizer, text, "auto"))["input_ids"]
            for text, _ in (items[i] for i in idx)
        ]
        settings = generation_settings(ctx.model, ctx.tokenizer, spec)
        generated = generation.generate(
            ctx.model, prompts, settings, batch_size=ctx.batch_size, tokenizer=ctx.tokenizer
        )
        for i, tokens in zip(idx, generated, strict=True):
            text = _cut_at_stop_strings(
                ctx.tokenizer.decode(tokens.tolist(), skip_special_tokens=True), spec.get("until")
            )
            out[i] = GeneratedAnswer(lengths[i].n_tokens, lengths[i].limit, text, int(len(tokens)))
            ctx.progress(1)
    return [o for o in out if o is not None]


# ------------------------------------------------------------------ the per-token export (answer-token PPL)

EXPORT_COLUMNS = {
    "char_start": "response token's start, relative to the response's first character [m]",
    "char_end": "response token's end, relative to the response's first character [m]",
    "logprob": "log p(response token | prompt and earlier response tokens) [m]",
    "nll": "-logprob [m]",
    "answer": "the token overlaps the number's digits (answer_ppl) [m]; others with width > 0: non_answer_ppl",
    "doc_id, num_lines, response, answer_start, answer_end, prompt_tokens, n_tokens, skipped": "the case",
}


def longeval_arrays(doc: dict, scores: AnswerScores) -> dict:
    """One case's export file (EXPORT_COLUMNS)."""
    offsets = np.asarray(scores.offsets, dtype=np.int64).reshape(-1, 2)
    lp = np.asarray(scores.logprob, dtype=np.float32)
    answer = (
        per_token.overlapping_token_mask(offsets, (doc["answer_start"], doc["answer_end"]))
        if len(offsets)
        else np.zeros(0, dtype=bool)
    )
    return {
        "doc_id": np.asarray(int(doc["doc_id"])),
        "num_lines": np.asarray(int(doc["num_lines"])),
        "response": np.asarray(doc["response"]),
        "answer_start": np.asarray(int(doc["answer_start"])),
        "answer_end": np.asarray(int(doc["answer_end"])),
        "prompt_tokens": np.asarray(scores.prompt_tokens),
        "n_tokens": np.asarray(scores.n_tokens),
        "skipped": np.asarray(bool(scores.skipped)),
        "char_start": offsets[:, 0],
        "char_end": offsets[:, 1],
        "logprob": lp,
        "nll": -lp,
        "answer": np.asarray(answer, dtype=bool),
    }


# ------------------------------------------------------------------ the tasks


class _LinesTask(LongContextTask):
    """Shared: the cases as harness documents, per-configuration metric names, settings record."""

    SETTINGS = SETTINGS

    resolve_settings = staticmethod(resolve_settings)
    GROUP = "longeval_lines"
    SCORES_PER_TOKEN = False  # the scoring subclass says so; the accuracy task generates
    # metric stem -> aggregation name, reported per configuration and pooled (directions: METRIC_DIRECTIONS)
    PER_CONFIG: dict[str, str] = {}
    POOLED: tuple[str, ...] = ()
    SCORES_RAW_DOCUMENTS = False  # a prompt the model answers: --apply_chat_template, --system_instruction apply
    NO_SHOTS_BECAUSE = "the prompt is LongChat's, fixed by the LongEval paper; shots would change what is measured"
    # the two tasks are one section of the report card
    REPORT_SECTION: dict[str, Any] = {
        "section": "longeval_lines",
        "title": "LongEval lines (longeval_lines_acc, longeval_lines_ppl)",
        "lead": "LongChat's line lookup: a prompt lists N lines and asks for the number in one of them; accuracy "
        "beside the perplexity of the answer's digits, by number of lines.",
        "order": 5,
        "settings": ("num_lines", "num_cases", "seed", "over_length", "testcases", "data.prompts_sha256"),
        "pictures": ("longeval_curves", "longeval_by_size"),
    }
    # the settings that do nothing when LongChat's files give the cases
    GENERATOR_ONLY_SETTINGS = ("seed", "trailing_space")

    def sampling_seed(self) -> int | None:
        return None if self.settings["testcases"] else self.settings["seed"]  # files hold their cases

    SEQUENCE_ITEM = "case"

    def _sequence_tokens(self, tokenizer, ctx: str, doc: dict) -> int:
        """Tokens of the sequence the task's request reads for a prompt ``ctx``."""
        raise NotImplementedError

    def longest_sequence(self, tokenizer, doc: dict) -> int | None:
        """The prompt built as lm-eval will build it; nothing to check with over_length: skip, or with a chat template
        (applied later: the requests check it)."""
        options = evaluation.prompt_options()
        if self.settings["over_length"] == "skip" or options is None or options[0]:
            return None
        # as lm-eval 0.4.13's build_all_requests calls it (num_fewshot is 0: run_options refuses others)
        ctx = self.fewshot_context(
            doc, num_fewshot=0, system_instruction=options[1], gen_prefix=self.doc_to_prefix(doc)
        )
        return self._sequence_tokens(tokenizer, ctx, doc)

    def too_long_ways_out(self) -> str:
        return (
            f"use fewer num_lines (now up to {self.configurations[-1]}), or pass --metadata "
            '\'{"over_length": "skip"}\' to record such cases as skipped'
        )

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

    @classmethod
    def _inert_settings(cls, s: dict) -> dict:
        """The generator's settings, which do nothing when LongChat's files give the cases, each with why."""
        return {name: f"testcases {s['testcases']} give the cases" for name in cls.GENERATOR_ONLY_SETTINGS}

    @classmethod
    def _check_settings_before_model(cls, task_name: str, settings: dict, run) -> None:
        if settings["testcases"]:
            refuse_inert_settings(task_name, settings, cls._inert_settings(settings))

    def _answer_room(self) -> int:
        """Tokens a sized prompt leaves for the answer (``ANSWER_ROOM``, or a larger --gen_kwargs max_gen_toks)."""
        given = (evaluation.generation_options() or {}).get("max_gen_toks")
        return max(ANSWER_ROOM, int(given)) if given is not None else ANSWER_ROOM

    def _prompt_tokens(self, tokenizer) -> Callable[[int], int]:
        """``prompt_tokens(N)``: the most tokens of the run's generated prompts of N lines (every case of the
        configuration, whatever --limit evaluates, so that a size is the same in every run), as the model reads them:
        with the chat template and system instruction when the run applies them."""
        s = self.settings
        options = evaluation.prompt_options() or (False, None)
        model = self.evaluated_model

        def render(prompt: str) -> str:
            if not options[0] or model is None or not hasattr(model.lm, "apply_chat_template"):
                # without a template a system instruction goes before the prompt: its tokens, about
                return prompt if not options[1] else f"{options[1]}\n\n{prompt}"
            system = [{"role": "system", "content": options[1]}] if options[1] else []
            return model.lm.apply_chat_template([*system, {"role": "user", "content": prompt}])

        @functools.cache
        def prompt_tokens(n: int) -> int:
            cases = range(s["num_cases"])
            texts = [render(longeval_cases.generated_case(n, i, s["seed"], s["trailing_space"]).prompt) for i in cases]
            return max(
                len(tokenizer(x, add_special_tokens=_add_special_tokens(tokenizer, x, "auto"))["input_ids"])
                for x in texts
            )

        return prompt_tokens

    def _num_lines_for(self, lengths: list[int], given: bool) -> dict:
        """num_lines for ``lengths`` (the task's function for max_seq_lengths: ``num_lines_for_lengths``) counted with
        the evaluated model's tokenizer."""
        tokenizer = self.evaluated_tokenizer()
        if tokenizer is None:
            raise SettingsError(
                "longeval_lines: sizing num_lines counts the prompts' tokens with the evaluated model's tokenizer: run "
                "the task through lm_eval (or simple_evaluate), give --model_args pretrained=..., or give num_lines"
            )
        num_lines, notes = longeval_cases.num_lines_for_lengths(
            lengths, self._prompt_tokens(tokenizer), self._answer_room(), drop_short=not given
        )
        self._sizing_notes = notes
        return {"num_lines": num_lines}

    def _size_num_lines(self) -> None:
        s = self.settings
        paper = SETTINGS.presets["paper"]
        if s["testcases"]:  # LongChat's files hold their sizes: the papers' unless num_lines names others
            files = {"num_lines": paper["num_lines"]}
            self._size(lambda lengths: files, lambda window: files, files)
            if self.sized_by is not None and self.sized_by.lengths_from != sizing.PAPER_SOURCE:
                self.sized_by.notes.append(
                    "testcases: LongChat's files hold their own sizes; num_lines picks the files"
                )
            return
        self._sizing_notes = []
        given = getattr(s, "sources", {}).get(sizing.LENGTHS_KEY) == GIVEN
        self._size(
            lambda lengths: self._num_lines_for(lengths, given),
            lambda window: self._num_lines_for(sizing.window_ladder(window), False),
            paper,
            ("num_lines",),
        )
        if self.sized_by is not None:
            for note in self._sizing_notes:  # each a size left out (num_lines_for_lengths)
                self.sized_by.drop(note)

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        s = self.settings
        task_name = str(self.config.task or self.SUITE_TASK_NAME)
        if s["testcases"]:  # the files hold the cases
            refuse_inert_settings(task_name, s, self._inert_settings(s))
        self._size_num_lines()
        n_cases, case = longeval_cases.case_reader(
            s["testcases"], s["num_lines"], s["num_cases"], s["seed"], s["trailing_space"]
        )
        if s["testcases"]:
            self.configurations = sorted({case(i).num_lines for i in range(n_cases)})
        else:
            self.configurations = list(s["num_lines"])
        # zero-padded so that lm-eval's lexicographic metric sort is numeric
        self._width = max(4, len(str(self.configurations[-1])))
        # what identifies the data: the cases this run evaluates (all of them without --limit or --samples)
        self.provenance = longeval_cases.provenance(
            [case(i) for i in evaluation.documents_evaluated(n_cases, str(self.config.task))]
        )
        columns = list(longeval_cases.to_doc(case(0), 0))
        self.dataset = {"test": documents.LazyDocuments(n_cases, lambda i: longeval_cases.to_doc(case(i), i), columns)}

    def doc_to_text(self, doc, doc_to_text=None):
        return doc["prompt"]

    def config_key(self, num_lines: int) -> str:
        return f"{int(num_lines):0{self._width}d}"

    def settings_record(self, record: dict) -> dict:
        s = self.settings
        rec = dict(record)
        rec["num_lines"] = self.configurations
        if s["testcases"]:
            for unused in self.GENERATOR_ONLY_SETTINGS:  # the files hold the cases
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
        return rec

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
                out[name] = self.declare(agg, name)  # one configuration's cases, by design
        return out

    def _skipped(self, key: str, skipped: bool) -> dict:
        return {f"skipped_{key}": float(skipped)} if self.settings["over_length"] == "skip" else {}


class LongEvalLinesPPLTask(_LinesTask):
    REQUEST_KIND = request_type.RequestKind(
        ANSWER_KIND,
        serve_answers,
        AnswerScores.from_state,
        n_tokens=lambda r: None if r.skipped else r.n_tokens,
        planned_tokens=lambda ctx, items: sum(_text_tokens(ctx.tokenizer, text) for text, _ in items),
    )
    SUITE_TASK_NAME = "longeval_lines_ppl"
    PER_CONFIG = {
        "answer_ppl": "token_weighted_perplexity",
        "non_answer_ppl": "token_weighted_perplexity",
        "prompt_tokens": "mean",
    }
    POOLED = ("answer_ppl", "non_answer_ppl")
    SCORES_PER_TOKEN = True
    # answer_ppl_0200: one per number of lines, zero-padded (config_key)
    METRIC_DIRECTIONS = (
        ("answer_ppl", False),
        ("non_answer_ppl", False),
        ("answer_ppl_[0-9]*", False),
        ("non_answer_ppl_[0-9]*", False),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),  # the share of cases skipped as over-long (over_length: skip)
    )
    REPORT = ReportSection(
        **_LinesTask.REPORT_SECTION,
        headlines=(
            (
                "answer_ppl",
                "perplexity of the answer's digits in the reference response, read teacher-forced; near 1 when the "
                "model finds the line",
            ),
            ("non_answer_ppl", "perplexity of the response's other tokens, which need no lookup, for comparison"),
        ),
    )
    EXPORT_COLUMNS = EXPORT_COLUMNS

    def _sequence_tokens(self, tokenizer, ctx: str, doc: dict) -> int:
        text = ctx + self._separator(ctx, templated=False) + doc["response"]
        return len(tokenizer(text, add_special_tokens=_add_special_tokens(tokenizer, text, "auto"))["input_ids"])

    @staticmethod
    def _separator(ctx: str, templated: bool) -> str:
        # One space between "I need the number." and the response, whether or not the prompt brings it
        # (the 200-680 files do), so every configuration reads the same response text.
        return "" if templated or ctx[-1:].isspace() else " "

    def _extra_settings(self) -> dict:
        return {
            "response_template": longeval_cases.RESPONSE_TEMPLATE,
            "join": "prompt + ' ' + response (no space when the prompt ends with whitespace or a chat template "
            "was applied)",
            "answer_tokens": "response tokens whose character span overlaps the number's digits",
            "allow_beyond_max_length": self.settings["allow_beyond_max_length"],
        }

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        sep = self._separator(ctx, templated)
        spec = {
            "kind": ANSWER_KIND,
            "response_start": len(ctx) + len(sep),
            "add_special_tokens": "auto",
            "chunk_size": self.settings["chunk_size"],
            "long_pass": self.settings["long_pass"],
            "over_length": self.settings["over_length"],
            "allow_beyond_max_length": self.settings["allow_beyond_max_length"],
        }
        return [(ctx + sep + doc["response"], spec)]

    def doc_to_target(self, doc, doc_to_target=None):
        # the reference response, the text read teacher-forced after the prompt
        return doc["response"]

    def process_results(self, doc, results):
        scores: AnswerScores = results[0]
        key = self.config_key(doc["num_lines"])
        token_export.write_document(self, doc, lambda: longeval_arrays(doc, scores))
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
    REQUEST_KIND = request_type.RequestKind(
        GENERATION_KIND,
        serve_generations,
        GeneratedAnswer.from_state,
        n_tokens=lambda r: None if r.skipped else r.prompt_tokens,
        # each prompt, then its steps, as the engine plans them before any ran (it revises the plan as they run)
        planned_tokens=lambda ctx, items: sum(
            generation.planned_work(_text_tokens(ctx.tokenizer, text), int(spec["max_gen_toks"]))
            for text, spec in items
        ),
    )
    SUITE_TASK_NAME = "longeval_lines_acc"
    PER_CONFIG = {"acc": "mean", "prompt_tokens": "mean"}
    POOLED = ("acc",)
    SCORES_PER_TOKEN = True  # its requests are longctx_scores: the engine's batched generation
    REQUEST_TYPE_NOTE = (
        f"{request_type.REQUEST_TYPE} (this plugin's type): every prompt's length checked, then greedy generation by the "
        "engine, batched, on the model's own cache; the YAML says generate_until so that --gen_kwargs and "
        "--apply_chat_template apply as for any generating task"
    )

    METRIC_DIRECTIONS = (
        ("acc", True),
        ("acc_[0-9]*", True),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),
    )
    REPORT = ReportSection(
        **_LinesTask.REPORT_SECTION,
        headlines=(
            ("acc", "share of the questions answered with the right number (greedy generation); higher is better"),
        ),
    )

    def _max_gen_toks(self) -> int:
        """Tokens generated at most: the YAML's or --gen_kwargs' max_gen_toks, else HFLM's own default."""
        gen_kwargs = {**(self.config.generation_kwargs or {}), **(evaluation.generation_options() or {})}
        return int(gen_kwargs.get("max_gen_toks", 256))

    def sequence_limit(self) -> tuple[int | None, str]:
        model = self.evaluated_model
        if model is None or model.max_length is None:
            return None, ""
        max_gen = self._max_gen_toks()
        return model.max_length - max_gen, (
            f"the model's maximum length {model.max_length} less the {max_gen} generated tokens "
            f"({model.max_length_words()})"
        )

    def _sequence_tokens(self, tokenizer, ctx: str, doc: dict) -> int:
        return len(tokenizer(ctx, add_special_tokens=_add_special_tokens(tokenizer, ctx, "auto"))["input_ids"])

    def _extra_settings(self) -> dict:
        return {"correct": "last integer of the output (re.findall(r'\\d+')[-1]) == expected_number"}

    def generation_spec(self) -> dict:
        """The generation settings of the task's requests: the YAML's generation_kwargs with --gen_kwargs merged
        in (lm-eval merges them), HFLM's default of 256 new tokens when none is given; other keys are refused."""
        gen_kwargs = copy.deepcopy(self.config.generation_kwargs or {})
        refuse_generation_keys(str(self.config.task), gen_kwargs)
        until = gen_kwargs.get("until") or []
        return {
            "kind": GENERATION_KIND,
            "max_gen_toks": int(gen_kwargs.get("max_gen_toks", 256)),
            "until": [until] if isinstance(until, str) else list(until),
            "do_sample": bool(gen_kwargs.get("do_sample", False)),
            "temperature": gen_kwargs.get("temperature"),
            "top_p": gen_kwargs.get("top_p"),
            "top_k": gen_kwargs.get("top_k"),
            "over_length": self.settings["over_length"],
        }

    @classmethod
    def _check_settings_before_model(cls, task_name: str, settings: dict, run) -> None:
        super()._check_settings_before_model(task_name, settings, run)
        given = run.get("gen_kwargs")  # simple_evaluate merges them into the YAML's after it has built the task
        refuse_generation_keys(task_name, simple_parse_args_string(given) if isinstance(given, str) else given or {})

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        return [(ctx, self.generation_spec())]

    def doc_to_target(self, doc, doc_to_target=None):
        # the expected answer: correct iff the output's last integer is this number
        return str(int(doc["expected_number"]))

    def process_results(self, doc, results):
        answer: GeneratedAnswer = results[0]
        key = self.config_key(doc["num_lines"])
        if answer.skipped:
            return self._skipped(key, True)
        correct = float(longeval_cases.last_integer(answer.text) == int(doc["expected_number"]))
        return {
            "acc": correct,
            f"acc_{key}": correct,
            f"prompt_tokens_{key}": answer.prompt_tokens,
            **self._skipped(key, False),
        }
