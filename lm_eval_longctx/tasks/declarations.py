"""What the tasks' settings declarations share (``settings.Declaration``; each task declares its own in its module,
``SETTINGS``): the bounds of counts and lengths, the presets' sizes, the settings several tasks take (sizing, the
long pass, the GovReport selection, the token export), and the docs' settings tables generated from the declarations
(``python scripts/settings_tables.py``)."""

from __future__ import annotations

from ..data import documents
from ..engine import scoring
from ..settings import BOOLEAN, LOCATION, TEXT, Declaration, Setting, choice, integer, integer_list

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
# the ci preset of every task over the GovReport selection: the embedded corpus at the ci lengths
GOVREPORT_CI_PRESET = {"max_seq_lengths": CI_LENGTHS, "embedded_corpus": True, "num_docs": CI_DOCUMENTS}
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


def chunk_size_setting() -> Setting:
    return Setting(
        "chunk_size", integer(1, MAX_TOKENS), scoring.DEFAULT_CHUNK_SIZE, CHUNK_SIZE_DOC, affects_numbers=False
    )


def long_pass_settings() -> list[Setting]:
    return [
        Setting("long_pass", choice(*scoring.LONG_PASS_CHOICES), "auto", LONG_PASS_DOC, affects_numbers=False),
        chunk_size_setting(),
    ]


def query_answer_settings() -> list[Setting]:
    """The query and answer spans read after the context (retrieval gain and its map)."""
    return [
        Setting("query_tokens", integer(1, MAX_TOKENS), 24, "q: query tokens Q = x[a : a+q]"),
        Setting("answer_tokens", integer(1, MAX_TOKENS), 24, "r: answer tokens A = x[a+q : a+q+r], the scored ones"),
    ]


def batch_size_setting(name: str, per_forward: str) -> Setting:
    """A task's own batch size (``per_forward``: what one forward holds); the harness's --batch_size by default."""
    return Setting(
        name,
        integer(1, MAX_BATCH_SIZE),
        None,
        f"{per_forward} (default: the harness --batch_size; auto: up to --max_batch_size, as memory allows)",
        optional=True,
        affects_numbers=False,
    )


def without_batch_size_setting() -> Setting:
    """The batch size of retrieval gain's batched passes (the map's too)."""
    return batch_size_setting(
        "without_batch_size",
        "sequences per forward of the batched passes: the without-document sequences, and the continuations read "
        "on one prefix",
    )


def allow_beyond_setting() -> Setting:
    return Setting("allow_beyond_max_length", BOOLEAN, False, ALLOW_BEYOND_DOC)


def bos_setting(doc: str) -> Setting:
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


def sizing_settings() -> list[Setting]:
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


def embedded_corpus_setting(reads: str) -> Setting:
    return Setting(
        "embedded_corpus",
        BOOLEAN,
        False,
        f"read the embedded corpus (Python's own reference text, pydoc_data.topics; offline) instead of the dataset: "
        f"{reads}",
    )


def export_tokens_setting(tasks: str = "") -> Setting:
    return Setting(
        "export_tokens",
        LOCATION,
        None,
        f"{tasks}folder for the per-token export (one .npz per document, "
        "docs/tools/token-export-and-viewer.md); a non-empty folder it did not write is refused",
        optional=True,
        affects_numbers=False,
    )


def govreport_task_settings(batch: Setting, export_tokens: bool = True) -> list[Setting]:
    """What every task over the GovReport selection declares last: the long pass and its ``batch`` setting,
    allow_beyond, the per-token export (where the task has one) and the documents."""
    export = [export_tokens_setting()] if export_tokens else []
    return [*long_pass_settings(), batch, allow_beyond_setting(), *export, *govreport_settings()]


def govreport_settings() -> list[Setting]:
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
        embedded_corpus_setting(
            "num_docs documents, each at least as long as the task reads, cut at paragraph boundaries"
        ),
    ]


# ------------------------------------------------------------------ the docs' settings tables
# Markdown between "<!-- settings: OWNER -->" and "<!-- /settings -->" is generated from the declaration
# (scripts/settings_tables.py writes it; a test fails when it differs).

TABLE_START = "<!-- settings: {owner} -->"
TABLE_END = "<!-- /settings -->"


def task_declarations() -> dict[str, Declaration]:
    """Every task's settings declaration by its owner, as the task classes declare them (``SETTINGS``)."""
    from .base import suite_tasks  # the task modules import this one

    return {cls.SETTINGS.owner: cls.SETTINGS for cls in suite_tasks().values() if cls.SETTINGS is not None}


def all_declarations() -> dict:
    from ..training import longce  # torch: imported only for the docs

    return {**task_declarations(), longce.SETTINGS.owner: longce.SETTINGS}


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


def parse(declaration: Declaration, metadata: dict | None):
    """``declaration.parse(metadata)`` once every task's settings are declared (their modules imported), so that a
    misspelt setting of any task of the suite is named, whichever task modules a caller imported."""
    from .base import suite_tasks

    suite_tasks()
    return declaration.parse(metadata)
