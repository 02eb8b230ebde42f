"""What the suite's tasks declare for the report card (``configs.<task>.metadata.longctx_report``), for results files
built by hand in the report tests: the sections, headlines, settings shown and pictures the card showed before the
tasks wrote them into their results."""

from __future__ import annotations

import copy
import fnmatch

_LONGPPL_LEAD = (
    "Perplexity over the key tokens only: the tokens that an evaluator model predicts much better with the long "
    "context than with a truncated window of K tokens (LSD > α and LCL > β)."
)
_LONGEVAL = {
    "section": "longeval_lines",
    "title": "LongEval lines (longeval_lines_acc, longeval_lines_ppl)",
    "lead": "LongChat's line lookup: a prompt lists N lines and asks for the number in one of them; accuracy beside "
    "the perplexity of the answer's digits, by number of lines.",
    "order": 5,
    "pictures": ["longeval_curves", "longeval_by_size"],
}
_LONGEVAL_SETTINGS = ["num_lines", "num_cases", "seed", "over_length", "testcases", "data.prompts_sha256"]

LONGCTX_REPORT = {
    "longppl_govreport": {
        "section": "longppl_govreport",
        "title": "LongPPL (longppl_govreport)",
        "lead": _LONGPPL_LEAD,
        "order": 1,
        "headlines": [
            [
                "longppl",
                "perplexity on the key tokens; lower is better, and well below PPL when the model uses its context",
            ],
            ["ppl", "perplexity on every token of the same documents, for comparison; lower is better"],
            ["key_token_fraction", "share of the tokens that are key tokens (informational)"],
            ["n_key_tokens", "key tokens per document (informational)"],
            ["longppl_soft", "every token weighted by min(exp(LSD), γ) (soft_gamma); lower is better"],
        ],
        "settings": [
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
        ],
        "pictures": [],
    },
    "forgetting_curve": {
        "section": "forgetting_curve",
        "title": "Forgetting curve (forgetting_curve)",
        "lead": "Copy accuracy (the text S was read once before) against LM accuracy (unrelated text before) by copy "
        "length l: the model still holds S where copy accuracy stays above LM accuracy.",
        "order": 2,
        "headlines": [
            [
                "fine_memory_length",
                "longest copy length copied almost perfectly (copy accuracy above fine_threshold); higher is better, "
                "a lower bound when it equals the longest length tested",
            ],
            [
                "coarse_memory_length",
                "longest copy length at which copying still beats LM accuracy by coarse_margin; higher is better",
            ],
            ["n_failed_lengths", "copy lengths that could not run (the reason is in the log); 0 expected"],
        ],
        "settings": [
            "lengths",
            "spacing",
            "samples_per_length",
            "fine_threshold",
            "coarse_margin",
            "claimed_length",
            "tokenizer",
            "dataset_path",
            "data_files",
            "data.texts_sha256",
            "data.stream_sha256",
        ],
        "pictures": ["forgetting_curve"],
    },
    "retrieval_gain": {
        "section": "retrieval_gain",
        "title": "Retrieval gain (retrieval_gain)",
        "lead": "How much reading the document lowers the NLL of a passage from it (a query Q, then its answer A): "
        "whether the model looks things up in its own context.",
        "order": 3,
        "headlines": [
            [
                "retrieval_gain",
                "nats per answer token that reading the document saves (nll_without − nll_with); higher is better, "
                "near 0 when the model does not look back",
            ],
            ["nll_with", "answer NLL (nats per token) with the document before the query; lower is better"],
            ["nll_without", "answer NLL without the document"],
        ],
        "settings": [
            "doc_tokens",
            "query_tokens",
            "answer_tokens",
            "n_queries",
            "with_context",
            "dataset_path",
            "data_files",
            "data.texts_sha256",
        ],
        "pictures": [],
    },
    "retrieval_gain_map": {
        "section": "retrieval_gain_map",
        "title": "Retrieval-gain map (retrieval_gain_map)",
        "lead": "The retrieval gain cell by cell over context length L and depth of the passage: up to which length, "
        "and from which depth, the model uses what it reads.",
        "order": 4,
        "headlines": [
            ["gain", "retrieval gain averaged over every cell (context length × depth); higher is better"],
            [
                "effective_length",
                "largest context length up to which the gain stays above effective_fraction of its value at the "
                "shortest length (relative rule); higher is better",
            ],
            [
                "effective_length_abs",
                "largest context length up to which the gain stays above effective_threshold nats (absolute rule)",
            ],
        ],
        "settings": [
            "context_lengths",
            "depths",
            "query_tokens",
            "answer_tokens",
            "anchors_per_cell",
            "effective_fraction",
            "effective_threshold",
            "effective_rule",
            "data.texts_sha256",
        ],
        "pictures": ["gain_map"],
    },
    "longeval_lines_acc": {
        **_LONGEVAL,
        "headlines": [
            ["acc", "share of the questions answered with the right number (greedy generation); higher is better"]
        ],
        "settings": _LONGEVAL_SETTINGS,
    },
    "longeval_lines_ppl": {
        **_LONGEVAL,
        "headlines": [
            [
                "answer_ppl",
                "perplexity of the answer's digits in the reference response, read teacher-forced; near 1 when the "
                "model finds the line",
            ],
            ["non_answer_ppl", "perplexity of the response's other tokens, which need no lookup, for comparison"],
        ],
        "settings": _LONGEVAL_SETTINGS,
    },
}


# what the tasks declare as their metrics' directions (first match wins), as lm-eval writes them into higher_is_better
DIRECTIONS = {
    "longppl_govreport": (
        ("longppl", False),
        ("longppl_soft", False),
        ("ppl", False),
        ("key_token_fraction", None),
        ("n_key_tokens", None),
    ),
    "forgetting_curve": (
        ("copy_acc@[0-9]*", True),
        ("lm_acc@[0-9]*", True),
        ("fine_memory_length", True),
        ("coarse_memory_length", True),
        ("n_failed_lengths", False),
        ("skipped_lengths", None),
    ),
    "retrieval_gain": (("retrieval_gain", True), ("nll_with", False), ("nll_without", False)),
    "retrieval_gain_map": (
        ("gain@L[0-9]*", True),
        ("gain", True),
        ("effective_length", True),
        ("effective_length_abs", True),
    ),
    "longeval_lines_ppl": (
        ("answer_ppl", False),
        ("non_answer_ppl", False),
        ("answer_ppl_[0-9]*", False),
        ("non_answer_ppl_[0-9]*", False),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),
    ),
    "longeval_lines_acc": (
        ("acc", True),
        ("acc_[0-9]*", True),
        ("prompt_tokens_[0-9]*", None),
        ("skipped_[0-9]*", False),
    ),
}


def direction(task: str, metric: str) -> bool | None:
    """The direction a task of the suite declares for ``metric`` (None: informational, or not declared)."""
    for pattern, value in DIRECTIONS.get(task, ()):
        if fnmatch.fnmatchcase(metric, pattern):
            return value
    return None


def declaration(task: str) -> dict:
    """The task's ``longctx_report`` (a copy), or {} for a task of another suite."""
    return copy.deepcopy(LONGCTX_REPORT.get(task, {}))


def with_declarations(data: dict) -> dict:
    """``data`` (a results dict) with every suite task's ``longctx_report`` in its config, as the tasks write it."""
    for task, cfg in (data.get("configs") or {}).items():
        if task in LONGCTX_REPORT:
            cfg.setdefault("metadata", {})["longctx_report"] = declaration(task)
    return data
