"""The settings of every task, declared once (``settings.Declaration``): name, type, allowed values,
default, meaning. The tasks parse their metadata with these, the results record them, and the
docs' settings tables are generated from them (``python scripts/settings_tables.py``).
No lm-eval import: scripts and docs read these declarations too."""

from __future__ import annotations

from ..data import documents, longeval_cases
from ..engine import scoring
from ..keytokens import evaluator
from ..metrics import per_token
from ..settings import (
    BOOLEAN,
    LOCATION,
    LOCATION_OR_LIST,
    MAPPING,
    TEXT,
    Declaration,
    Setting,
    choice,
    integer,
    integer_list,
    number,
)

# Upper bounds of the counts and lengths, far beyond any real run (the papers' sizes times a large factor): a mistyped
# value (10**12 cases) is an error naming the setting when the settings are parsed, before any case is built.
MAX_TOKENS = 2**27  # a length in tokens: 134,217,728, 13 times the longest context window released (10M tokens)
MAX_SAMPLES = 10_000  # cases or samples per configuration: 200 times LongEval's 50, 1,000 times the curve's 10
MAX_DOCUMENTS = 1_000_000  # documents of a selection (GovReport's test split holds 973)
MAX_ANCHORS = 10_000  # anchors per document or per cell (the default: 2 and 1)
MAX_LIST_ENTRIES = 10_000  # entries of a list of lengths (the curve's 32, the ladder's about 8) and its count setting
MAX_NUM_LINES = 1_000_000  # lines of a LongEval prompt (about 24M tokens; LongChat's longest: 1,350, about 32k)
MAX_BATCH_SIZE = 65_536  # sequences per forward
MAX_TOKEN_ID = 2**31 - 1  # a token id (an int32)
MAX_SEED = 2**64 - 1

CHUNK_SIZE_DOC = "tokens per forward when the long pass runs in KV-cache chunks (long_pass chunked)"
LONG_PASS_DOC = (
    "how a long sequence is scored: `auto` (one forward when its memory estimate fits the device, else "
    "KV-cache chunks where that is exact for the model), `full` (one forward), `chunked` (KV-cache "
    "chunks; refused for models where a cache is not exact): docs/support.md"
)
ALLOW_BEYOND_DOC = "score sequences longer than the model's maximum length instead of stopping with an error"

# The presets (the `preset` setting): `model` (the default) sizes every task from the evaluated model's window,
# `paper` gives the papers' sizes, `ci` small sizes on the embedded corpus, for a CPU and a 135M model in minutes.
PRESETS = ("model", "ci", "paper")
# ci: the lengths every task tests, and enough documents, copy samples and LongEval cases per length for the gate's
# paired test over documents (report/paired.py: 10)
CI_LENGTHS = [256, 512, 1024]
CI_DOCUMENTS = 10
CI_SAMPLES_PER_LENGTH = 10
MAX_SEQ_LENGTHS_DOC = (
    "the lengths in tokens every task tests, lm-eval's own key (RULER, BABILong take it): each task maps it to its "
    "own settings (docs/running-on-your-model.md); a task's own setting given beside it wins. Default: sized from "
    "the evaluated model's window"
)
PRESET_DOC = (
    "`model`: sizes from the evaluated model's window (its config, as the audit reads it); `paper`: the papers' "
    "sizes; `ci`: max_seq_lengths 256 / 512 / 1024 on the embedded corpus, the model its own evaluator (minutes on "
    "a CPU for a 135M model). A setting given beside a preset wins"
)


def _chunk_size() -> Setting:
    return Setting(
        "chunk_size", integer(1, MAX_TOKENS), scoring.DEFAULT_CHUNK_SIZE, CHUNK_SIZE_DOC, affects_numbers=False
    )


def _long_pass() -> list[Setting]:
    return [
        Setting("long_pass", choice(*scoring.LONG_PASS_CHOICES), "auto", LONG_PASS_DOC, affects_numbers=False),
        _chunk_size(),
    ]


def _allow_beyond() -> Setting:
    return Setting("allow_beyond_max_length", BOOLEAN, False, ALLOW_BEYOND_DOC)


def _bos(doc: str) -> Setting:
    """Whether both conditions of a retrieval-gain sequence start with BOS (``base.lead_token_ids`` reads it)."""
    return Setting(
        "bos",
        choice(
            "auto",
            "always",
            "never",
            aliases={
                "true": "always",
                "1": "always",
                "yes": "always",
                "false": "never",
                "0": "never",
                "no": "never",
                "none": "never",
            },
        ),
        "auto",
        doc,
    )


def _sizing() -> list[Setting]:
    """The settings every task shares that size it: the lengths it tests and the preset."""
    return [
        Setting("preset", choice(*PRESETS), "model", PRESET_DOC),
        Setting(
            "max_seq_lengths",
            integer_list(1, MAX_TOKENS, MAX_LIST_ENTRIES),
            None,
            MAX_SEQ_LENGTHS_DOC,
            optional=True,
        ),
    ]


def _embedded_corpus(reads: str) -> Setting:
    return Setting(
        "embedded_corpus",
        BOOLEAN,
        False,
        f"read the embedded corpus (Python's own reference text, pydoc_data.topics; offline) instead of the dataset: "
        f"{reads}",
    )


def _export_tokens(tasks: str = "") -> Setting:
    return Setting(
        "export_tokens",
        LOCATION,
        None,
        f"{tasks}folder for the per-token export (one .npz per document, "
        "docs/tools/token-export-and-viewer.md); a non-empty folder it did not write is refused",
        optional=True,
        affects_numbers=False,
    )


def _govreport() -> list[Setting]:
    """The documents of every task that reads the LongPPL paper's GovReport selection."""
    return [
        Setting("dataset_path", LOCATION, documents.GOVREPORT_DATASET, "hub dataset of tokenized GovReport rows"),
        Setting("dataset_revision", TEXT, None, "dataset revision (default: its default branch)", optional=True),
        Setting(
            "decode_tokenizer",
            LOCATION,
            documents.GOVREPORT_DECODE_TOKENIZER,
            "tokenizer that decodes the rows' Llama-2 ids into the texts every model reads",
        ),
        Setting(
            "data_files",
            LOCATION,
            None,
            "local json/jsonl/parquet file used instead of the hub dataset "
            "(rows with `text`, or with `input_ids` and `tokenized_len`)",
            optional=True,
        ),
        Setting(
            "num_docs",
            integer(1, MAX_DOCUMENTS),
            documents.GOVREPORT_NUM_DOCS,
            "number of documents (first in dataset order)",
        ),
        Setting(
            "min_tokens", integer(1, MAX_TOKENS), documents.GOVREPORT_MIN_TOKENS, "rows need tokenized_len >= this"
        ),
        Setting(
            "max_tokens", integer(1, MAX_TOKENS), documents.GOVREPORT_MAX_TOKENS, "keep each row's first max_tokens ids"
        ),
        _embedded_corpus("num_docs documents, each at least as long as the task reads, cut at paragraph boundaries"),
    ]


LONGPPL = Declaration(
    "longppl_govreport",
    [
        *_sizing(),
        Setting(
            "trunc_len",
            integer(1, MAX_TOKENS),
            None,
            "K: tokens of short context of the truncated windows; default: the paper's 4096, a quarter of the "
            "documents' length L where L < 16384",
            optional=True,
        ),
        Setting(
            "sliding_window",
            integer(1, MAX_TOKENS),
            None,
            "d: stride of the truncated windows; default: K / 4 (the paper's 1024 at K = 4096)",
            optional=True,
        ),
        Setting(
            "cut_tokens",
            integer(1, MAX_TOKENS),
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
        *_long_pass(),
        Setting(
            "short_batch_size",
            integer(1, MAX_BATCH_SIZE),
            None,
            "truncated windows per forward (default: the harness --batch_size; auto: up to --max_batch_size, "
            "as memory allows)",
            optional=True,
            affects_numbers=False,
        ),
        _allow_beyond(),
        _export_tokens(),
        *_govreport(),
    ],
    presets={
        "ci": {
            "max_seq_lengths": CI_LENGTHS,
            "embedded_corpus": True,
            "evaluator": "self",
            "num_docs": CI_DOCUMENTS,
        },
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

RETRIEVAL_GAIN = Declaration(
    "retrieval_gain",
    [
        *_sizing(),
        Setting(
            "doc_tokens",
            integer(1, MAX_TOKENS),
            None,
            "document = its first doc_tokens tokens (evaluated tokenizer); default: what fills L, the model's window "
            "or the longest max_seq_lengths, with BOS, separator, Q and A (the paper: 8192)",
            optional=True,
        ),
        Setting("query_tokens", integer(1, MAX_TOKENS), 24, "q: query tokens Q = x[a : a+q]"),
        Setting("answer_tokens", integer(1, MAX_TOKENS), 24, "r: answer tokens A = x[a+q : a+q+r], the scored ones"),
        Setting("n_queries", integer(1, MAX_ANCHORS), 2, "anchors per document"),
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
        _bos(
            "BOS at the start of both conditions: `auto` when the tokenizer itself adds one (Llama, Mistral; "
            "not GPT-2, Qwen2); `always` (an error if it has none); `never`"
        ),
        *_long_pass(),
        Setting(
            "without_batch_size",
            integer(1, MAX_BATCH_SIZE),
            None,
            "sequences per forward of the batched passes: the "
            "without-document sequences, and the continuations read on one prefix (default: the harness "
            "--batch_size; auto: up to --max_batch_size, as memory allows)",
            optional=True,
            affects_numbers=False,
        ),
        _allow_beyond(),
        _export_tokens(),
        *_govreport(),
    ],
    presets={
        "ci": {"max_seq_lengths": CI_LENGTHS, "embedded_corpus": True, "num_docs": CI_DOCUMENTS},
        "paper": {"doc_tokens": 8192, "num_docs": documents.GOVREPORT_NUM_DOCS},
    },
)

RETRIEVAL_GAIN_MAP = Declaration(
    "retrieval_gain_map",
    [
        *_sizing(),
        Setting(
            "context_lengths",
            integer_list(1, MAX_TOKENS, MAX_LIST_ENTRIES),
            None,
            "context lengths L (document tokens x[0:L]) of the ladder; with max_seq_lengths: each length less BOS, "
            "separator, Q and A (the whole sequence fills it); default: min_context doubled while the with-document "
            "sequence fits the model's window and every document has L + q + r tokens",
            optional=True,
        ),
        Setting("min_context", integer(1, MAX_TOKENS), 1024, "first rung of the default doubling ladder"),
        Setting(
            "max_context",
            integer(1, MAX_TOKENS),
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
        Setting("query_tokens", integer(1, MAX_TOKENS), 24, "q: query tokens Q = x[a : a+q]"),
        Setting("answer_tokens", integer(1, MAX_TOKENS), 24, "r: answer tokens A = x[a+q : a+q+r], the scored ones"),
        Setting(
            "anchors_per_cell",
            integer(1, MAX_ANCHORS),
            1,
            "anchors per cell: a, a + s, ..., a + (n-1) s with s = anchor_stride; the cell's gain is their mean",
        ),
        Setting(
            "anchor_stride",
            integer(1, MAX_TOKENS),
            None,
            "s: tokens between the anchors of a cell (default q + r: consecutive Q A spans)",
            optional=True,
        ),
        Setting("separator", TEXT, "", "text between x[0:L] and Q (tokenized without special tokens)"),
        _bos("BOS at the start of both conditions, as in retrieval_gain"),
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
        *_long_pass(),
        Setting(
            "without_batch_size",
            integer(1, MAX_BATCH_SIZE),
            None,
            "sequences per forward of the batched passes: the "
            "without-document sequences, and the continuations read on one prefix (default: the harness "
            "--batch_size; auto: up to --max_batch_size, as memory allows)",
            optional=True,
            affects_numbers=False,
        ),
        _allow_beyond(),
        *_govreport(),
    ],
    presets={
        "ci": {
            "max_seq_lengths": CI_LENGTHS,
            "embedded_corpus": True,
            "num_docs": CI_DOCUMENTS,
            "depths": [10, 50, 90],
        },
        "paper": {"num_docs": documents.GOVREPORT_NUM_DOCS, "depths": list(range(0, 100, 10))},
    },
)

FORGETTING_CURVE = Declaration(
    "forgetting_curve",
    [
        *_sizing(),
        Setting(
            "max_len",
            integer(1, MAX_TOKENS),
            None,
            "largest copy length l; default: the largest whose sample fits the model's window W, (W - 3) // 2",
            optional=True,
        ),
        Setting("min_len", integer(1, MAX_TOKENS), documents.FORGETTING_CURVE_MIN_LEN, "smallest copy length"),
        Setting("num_lengths", integer(1, MAX_LIST_ENTRIES), 32, "number of copy lengths"),
        Setting(
            "spacing",
            choice("linear", "geometric", aliases={"log": "geometric"}),
            "linear",
            "copy lengths `numpy.linspace(min_len, max_len, num_lengths, dtype=int)` or `numpy.geomspace(...)`, "
            "duplicates dropped",
        ),
        Setting(
            "lengths",
            integer_list(1, MAX_TOKENS, MAX_LIST_ENTRIES),
            None,
            "explicit copy lengths; replace max_len, min_len, num_lengths and spacing. With max_seq_lengths: "
            "(L - 3) // 2 for each length L (the sample's 2l + 3 tokens fit it), or max_len from the longest L when "
            "min_len, num_lengths or spacing is given",
            optional=True,
        ),
        Setting("samples_per_length", integer(1, MAX_SAMPLES), 10, "samples per copy length"),
        Setting(
            "seed", integer(0, MAX_SEED), 0, "seed of the sample starts (Python random, the reference's draw order)"
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
        _allow_beyond(),
        *_long_pass(),
        Setting(
            "batch_size",
            integer(1, MAX_BATCH_SIZE),
            None,
            "samples per forward (default: the harness --batch_size; auto: up to --max_batch_size, as memory allows)",
            optional=True,
            affects_numbers=False,
        ),
        Setting(
            "bos_token_id",
            integer(0, MAX_TOKEN_ID),
            None,
            "BOS of the samples (default: the tokenizer's BOS, else its EOS)",
            optional=True,
        ),
        Setting(
            "eos_token_id",
            integer(0, MAX_TOKEN_ID),
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
            integer(1, MAX_TOKENS),
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
        _embedded_corpus("every document, one after another, makes the token stream"),
    ],
    presets={
        "ci": {"max_seq_lengths": CI_LENGTHS, "embedded_corpus": True, "samples_per_length": CI_SAMPLES_PER_LENGTH},
        "paper": {"num_lengths": 32, "samples_per_length": 10},
    },
)

LONGEVAL_LINES = Declaration(
    "longeval_lines",
    [
        *_sizing(),
        Setting(
            "num_lines",
            integer_list(1, MAX_NUM_LINES, MAX_LIST_ENTRIES),
            None,
            "numbers of lines (configurations); default: a prompt of about each length L (W/8, W/4, W/2 and W of "
            "the model's window W, or each max_seq_lengths) with room for the answer (max_gen_toks), lines counted "
            "in the evaluated model's tokens (LongChat's: 200 ... 1350)",
            optional=True,
        ),
        Setting("num_cases", integer(1, MAX_SAMPLES), longeval_cases.DEFAULT_NUM_CASES, "cases per configuration"),
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
        Setting("allow_beyond_max_length", BOOLEAN, False, "answer-token PPL only: " + ALLOW_BEYOND_DOC),
        *_long_pass(),
        _export_tokens("answer-token PPL only: "),
    ],
    presets={
        "ci": {"max_seq_lengths": CI_LENGTHS, "num_cases": CI_DOCUMENTS},
        "paper": {"num_lines": list(longeval_cases.DEFAULT_NUM_LINES), "num_cases": longeval_cases.DEFAULT_NUM_CASES},
    },
)

TASK_DECLARATIONS = {
    d.owner: d for d in (LONGPPL, RETRIEVAL_GAIN, RETRIEVAL_GAIN_MAP, FORGETTING_CURVE, LONGEVAL_LINES)
}


# ------------------------------------------------------------------ the docs' settings tables
# Markdown between "<!-- settings: OWNER -->" and "<!-- /settings -->" is generated from the declaration
# (scripts/settings_tables.py writes it; a test fails when it differs).

TABLE_START = "<!-- settings: {owner} -->"
TABLE_END = "<!-- /settings -->"


def all_declarations() -> dict:
    from ..training import longce  # torch: imported only for the docs

    return {**TASK_DECLARATIONS, longce.SETTINGS.owner: longce.SETTINGS}


def render_settings_tables(markdown: str) -> str:
    """``markdown`` with every settings block replaced by the table generated from its declaration."""
    import re

    declarations = all_declarations()

    def table(match):
        owner = match.group(1)
        if owner not in declarations:
            raise KeyError(f"settings block for unknown owner {owner!r}; known: {sorted(declarations)}")
        return f"{TABLE_START.format(owner=owner)}\n{declarations[owner].markdown_table()}\n{TABLE_END}"

    return re.sub(r"<!-- settings: ([\w.-]+) -->\n.*?<!-- /settings -->", table, markdown, flags=re.S)
