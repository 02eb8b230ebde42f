"""Every documented value of every task setting, run once through the harness on a tiny model (the rows of the docs'
settings tables, read from their declarations: ``lm_eval_longctx/tasks/declarations.py``).

The values are derived from each setting's declared kind where they can be: every spelling of a choice (its aliases
included), both values of a boolean, a bound of a whole number or list, a point inside a number's range. Where a value
must be chosen by hand (paths, texts, values the bounds say nothing about), it is in ``VALUES``; a setting that cannot
be run here is in ``UNTESTABLE`` with the reason. A declared setting with none of these fails
``test_every_declared_setting_is_run_or_has_a_reason``, so a new setting or choice cannot go untested unnoticed.

Independent settings share a run: a task's values are packed into rounds (round k holds about the k-th value of each
setting), so a task takes about as many harness runs as its setting with the most values has values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from lm_eval_longctx import settings
from lm_eval_longctx.data import longeval_cases
from lm_eval_longctx.keytokens import span_files
from lm_eval_longctx.tasks import base, declarations
from tests import tiny
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Local:
    """A file or folder this module writes (a local stand-in for a hub resource), by name; resolved to its path
    when a run's metadata is built."""

    name: str


@dataclass(frozen=True)
class Value:
    """One value of a setting, with the metadata it needs beside it (``needs``) and the keys it cannot run with
    (``drops``: left out of the task's base metadata, and kept out of its round)."""

    value: Any
    needs: Mapping[str, Any] = field(default_factory=dict)
    drops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Condition:
    """What every value of a setting acts with: the metadata it needs beside it and the keys it cannot run with."""

    needs: Mapping[str, Any] = field(default_factory=dict)
    drops: tuple[str, ...] = ()


EVALUATED = Local("evaluated_model")
EVALUATOR = Local("evaluator_model")
GOVREPORT_TASKS = ("longppl_govreport", "retrieval_gain", "retrieval_gain_map")
EVALUATOR_ONLY = (
    "evaluator_revision",
    "evaluator_device",
    "evaluator_max_memory",
    "evaluator_dtype",
    "evaluator_trust_remote_code",
)

# Each task's metadata in every run: tiny sizes (documents of about 300 tokens), the GovReport tasks reading token-id
# rows as the hub dataset holds them (so that decode_tokenizer, min_tokens and max_tokens act), LongPPL judged by a
# second tiny model with its span cache off (so that every run loads the evaluator its settings describe).
GOVREPORT_BASE = {
    "data_files": Local("govreport_rows.jsonl"),
    "decode_tokenizer": EVALUATED,
    "min_tokens": 100,
    "num_docs": 2,
}
BASE = {
    "longppl_govreport": {
        **GOVREPORT_BASE,
        "evaluator": EVALUATOR,
        "trunc_len": 48,
        "sliding_window": 20,
        "alpha": 0.2,
        "beta": -10.0,
        "span_cache_dir": "off",
    },
    "retrieval_gain": {**GOVREPORT_BASE, "doc_tokens": 200, "query_tokens": 8, "answer_tokens": 6},
    "retrieval_gain_map": {
        **GOVREPORT_BASE,
        "context_lengths": [60, 120],
        "depths": [0, 50, 100],
        "query_tokens": 6,
        "answer_tokens": 5,
    },
    "forgetting_curve": {"data_files": Local("books.jsonl"), "max_len": 24, "num_lengths": 3, "samples_per_length": 2},
    "longeval_lines": {"num_lines": [3, 5], "num_cases": 2},
}
# simple_evaluate's arguments beside the metadata: the accuracy task generates two tokens, not LongChat's 100
RUN_ARGUMENTS = {"longeval_lines": {"gen_kwargs": "max_gen_toks=2"}}

# Values chosen by hand, where the declared kind gives none or its bound would not run (each with why).
VALUES: dict[tuple[str, str], list] = {
    # the copies of the GovReport selection's settings
    **{
        (task, name): values
        for task in GOVREPORT_TASKS
        for name, values in {
            "dataset_path": [Value(Local("govreport_dataset"), drops=("data_files",))],
            "decode_tokenizer": [EVALUATED],
            # the rows as json, jsonl and parquet; text rows, which the token-id settings do not act on
            "data_files": [
                Local("govreport_rows.jsonl"),
                Local("govreport_rows.json"),
                Local("govreport_rows.parquet"),
                Value(Local("govreport_text.jsonl"), drops=("decode_tokenizer", "min_tokens", "max_tokens")),
            ],
            # 1 token per document leaves no query and answer
            "max_tokens": [250],
        }.items()
    },
    # numbers without bounds: more tokens key than under the base's 0.2 and -10, so that LongPPL stays defined
    ("longppl_govreport", "alpha"): [0.0],
    ("longppl_govreport", "beta"): [-20.0],
    # a second tiny model in place of the hub's Llama-3.1-8B; `self`, which the evaluator's own settings do not reach
    ("longppl_govreport", "evaluator"): [EVALUATOR, Value("self", drops=EVALUATOR_ONLY)],
    # `cuda:N` where this test finds a GPU (the evaluated model stays on the CPU); `mps` is Apple's alone
    ("longppl_govreport", "evaluator_device"): ["cpu", "auto", *(["cuda:0"] if torch.cuda.is_available() else [])],
    ("longppl_govreport", "evaluator_max_memory"): [{"cpu": "1GiB"}],
    ("longppl_govreport", "key_spans_dir"): [Local("key_spans")],
    # "default" lies under $LM_EVAL_LONGCTX_CACHE, which this module points at its own folder
    ("longppl_govreport", "span_cache_dir"): ["default", Local("span_cache")],
    ("longppl_govreport", "export_tokens"): [Local("export_longppl")],
    # a batch of 1 is what the harness's --batch_size gives the default
    ("longppl_govreport", "short_batch_size"): [3],
    # a 1-token document has no room for a query and an answer
    ("retrieval_gain", "doc_tokens"): [100],
    # both ends of the range: distinct anchors whatever n_queries shares their run
    ("retrieval_gain", "anchor_min"): [0.0],
    ("retrieval_gain", "anchor_max"): [1.0],
    # a text other than the default "": a line break
    ("retrieval_gain", "separator"): ["\n"],
    ("retrieval_gain", "without_batch_size"): [3],
    ("retrieval_gain", "export_tokens"): [Local("export_retrieval_gain")],
    # a rung of 1 token has no room for the query and the answer
    ("retrieval_gain_map", "context_lengths"): [[50, 100]],
    # the default ladder from 32 tokens: 32, 64, 128, 256 within the 300-token documents
    ("retrieval_gain_map", "min_context"): [Value(32, drops=("context_lengths",))],
    ("retrieval_gain_map", "max_context"): [Value(100, needs={"min_context": 32}, drops=("context_lengths",))],
    ("retrieval_gain_map", "tokenizer"): [Value(EVALUATED, needs={"min_context": 32}, drops=("context_lengths",))],
    ("retrieval_gain_map", "separator"): ["\n"],
    ("retrieval_gain_map", "without_batch_size"): [3],
    # above min_len (8)
    ("forgetting_curve", "max_len"): [30],
    ("forgetting_curve", "batch_size"): [3],
    # the evaluated model's own (another vocabulary's ids are not the model's)
    ("forgetting_curve", "tokenizer"): [EVALUATED],
    # a local dataset folder (with a second split) in place of the hub's PG-19
    ("forgetting_curve", "dataset_path"): [Value(Local("books_dataset"), drops=("data_files",))],
    ("forgetting_curve", "dataset_split"): [
        Value("validation", needs={"dataset_path": Local("books_dataset")}, drops=("data_files",))
    ],
    ("forgetting_curve", "data_files"): [Local("books.jsonl"), Local("books.json"), Local("books.parquet")],
    # lm-eval's length key, each task's knobs left to it (a length of 1 token holds nothing)
    ("longppl_govreport", "max_seq_lengths"): [[150]],
    ("longppl_govreport", "cut_tokens"): [150],
    ("retrieval_gain", "max_seq_lengths"): [Value([150], drops=("doc_tokens",))],
    ("retrieval_gain_map", "max_seq_lengths"): [Value([100, 150], drops=("context_lengths",))],
    ("forgetting_curve", "max_seq_lengths"): [Value([21, 51], drops=("max_len", "num_lengths"))],
    ("longeval_lines", "max_seq_lengths"): [Value([700], drops=("num_lines",))],
    # the embedded corpus replaces the rows and every setting that selects them (LongPPL's documents cut short)
    **{
        (task, "embedded_corpus"): [
            Value(
                True,
                needs={"cut_tokens": 300} if task == "longppl_govreport" else {},
                drops=("data_files", "dataset_path", "decode_tokenizer", "min_tokens", "max_tokens"),
            ),
            False,
        ]
        for task in GOVREPORT_TASKS
    },
    ("forgetting_curve", "embedded_corpus"): [
        Value(True, drops=("data_files", "dataset_path", "dataset_split")),
        False,
    ],
    # LongChat's layouts: a folder, a URL prefix, one .jsonl file, a list of files
    ("longeval_lines", "testcases"): [
        Local("longchat_cases"),
        Local("longchat_cases_url"),
        Local("longchat_cases/3_lines.jsonl"),
        [Local("longchat_cases/3_lines.jsonl"), Local("longchat_cases/5_lines.jsonl")],
    ],
    ("longeval_lines", "export_tokens"): [Local("export_longeval")],
}

# What a setting's values act with, whichever value: the metadata they need beside them, the keys they cannot run with.
CONDITIONS: dict[tuple[str, str], Condition] = {
    # the chunk size is read only by the chunked long pass
    **{(task, "chunk_size"): Condition(needs={"long_pass": "chunked"}) for task in declarations.task_declarations()},
    # the cache holds the evaluator's spans: it is read only with an evaluator
    ("longppl_govreport", "span_cache_dir"): Condition(needs={"evaluator": EVALUATOR}),
    ("longppl_govreport", "evaluator_max_memory"): Condition(needs={"evaluator_device": "auto"}),
    # the folder's spans replace the evaluator and what it judged with; the task refuses evaluator settings beside it
    ("longppl_govreport", "key_spans_dir"): Condition(
        drops=("trunc_len", "sliding_window", "alpha", "beta", "evaluator", *EVALUATOR_ONLY)
    ),
    # the largest length is one of the grid's only when it has more than one
    ("forgetting_curve", "max_len"): Condition(needs={"num_lengths": 3}),
    # the copy lengths replace the grid
    ("forgetting_curve", "lengths"): Condition(drops=("max_len", "min_len", "num_lengths", "spacing")),
    # the files hold the cases (the generator's settings are refused beside them); a folder holds one per num_lines
    ("longeval_lines", "testcases"): Condition(needs={"num_lines": [3, 5]}, drops=("seed", "trailing_space")),
}

HUB_REVISION = (
    "a revision names a commit of a hub repository, and this test has no hub; its local stand-in, a folder, has no "
    "revisions (a revision given beside one is refused: it would act on nothing)"
)
UNTESTABLE: dict[tuple[str, str], str] = {
    **{(task, "dataset_revision"): HUB_REVISION for task in (*GOVREPORT_TASKS, "forgetting_curve")},
    ("longppl_govreport", "evaluator_revision"): HUB_REVISION,
}

# Settings the results record somewhere other than under their own name (how to read them there, and why).
RECORDED_AS = {
    # `tokenizer` in the record is the evaluated model's; the samples' tokenizer is recorded by its identity
    ("forgetting_curve", "tokenizer"): lambda record: record["samples_tokenizer"]["name_or_path"],
}


# ------------------------------------------------------------------ the values, from the declared kinds

_WHOLE = re.compile(r"(?:list of (?:at most \d+ )?)?whole numbers?(?: >= (-?\d+))?(?: and <= (-?\d+))?")
_NUMBER = re.compile(r"finite number(?: (>=|>) (-?[\d.]+))?(?: and <= (-?[\d.]+))?")
_CHOICE = re.compile(r"(?P<values>[^()]+?)(?: \(also (?P<aliases>[^()]+)\))?")
_TABLE_ONLY_KINDS = (settings.TEXT, settings.LOCATION, settings.LOCATION_OR_LIST, settings.MAPPING)


def choice_spellings(setting: settings.Setting) -> list[str] | None:
    """Every spelling of a choice (its values, then its aliases) as the docs' "allowed" column lists them; None when
    the column is not a choice's (each spelling must parse as one of the values)."""
    match = _CHOICE.fullmatch(setting.kind.describe)
    if match is None:
        return None
    values = match["values"].split(" / ")
    aliases = match["aliases"].split(", ") if match["aliases"] else []
    try:
        parsed = [setting.kind.convert(spelling) for spelling in values + aliases]
    except ValueError:
        return None
    if parsed[: len(values)] != values or not set(parsed) <= set(values):
        return None
    return values + aliases


def derived_values(setting: settings.Setting) -> list | None:
    """Values of ``setting`` derived from its declared kind, other than its default where it has one; None when the
    kind gives none (a path, a text, a number without bounds)."""
    kind = setting.kind
    if kind is settings.BOOLEAN:
        return [True, False]
    if any(kind is table_only for table_only in _TABLE_ONLY_KINDS):
        return None
    whole = _WHOLE.fullmatch(kind.describe)
    if whole is not None:
        if whole[1] is None:
            return None
        low = int(whole[1])
        as_list = kind.describe.startswith("list")
        value = [low] if as_list else low
        if value == setting.default:
            value = [low + 1] if as_list else low + 1
        return [value]
    number = _NUMBER.fullmatch(kind.describe)
    if number is not None:
        if number[2] is None:
            return None
        low = float(number[2])
        if number[3] is not None:
            middle = (low + float(number[3])) / 2
            return [middle if middle != setting.default else (low + middle) / 2]
        return [low + 1.0 if low + 1.0 != setting.default else low + 2.0]
    return choice_spellings(setting)


@dataclass(frozen=True)
class Trial:
    """One value of one setting in one run: the metadata it sets and the keys it keeps out."""

    setting: str
    value: Any
    sets: Mapping[str, Any]
    drops: tuple[str, ...]

    def conflicts_with(self, other: Trial) -> bool:
        if self.setting == other.setting:
            return True
        shared = set(self.sets) & set(other.sets)
        return any(self.sets[k] != other.sets[k] for k in shared) or bool(
            set(self.sets) & set(other.drops) or set(other.sets) & set(self.drops)
        )


def trials_of(owner: str, setting: settings.Setting) -> list[Trial] | None:
    """The runs of one setting's values (None: neither derived nor chosen by hand)."""
    values = VALUES.get((owner, setting.name))
    if values is None:
        values = derived_values(setting)
    if values is None:
        return None
    condition = CONDITIONS.get((owner, setting.name), Condition())
    out = []
    for entry in values:
        value = entry if isinstance(entry, Value) else Value(entry)
        needs = {**condition.needs, **value.needs}
        out.append(
            Trial(setting.name, value.value, {**needs, setting.name: value.value}, condition.drops + value.drops)
        )
    return out


def rounds_of(trials: list[Trial]) -> list[list[Trial]]:
    """The trials packed into runs: each goes into the first round holding nothing it conflicts with."""
    rounds: list[list[Trial]] = []
    for trial in trials:
        for round_ in rounds:
            if not any(trial.conflicts_with(other) for other in round_):
                round_.append(trial)
                break
        else:
            rounds.append([trial])
    return rounds


def plan() -> tuple[dict[str, list[list[Trial]]], list[tuple[str, str]]]:
    """Per task, its rounds; and the declared settings with no value and no reason."""
    rounds, missing = {}, []
    for owner, declaration in declarations.task_declarations().items():
        trials = []
        for setting in declaration.settings:
            if (owner, setting.name) in UNTESTABLE:
                continue
            found = trials_of(owner, setting)
            if found is None:
                missing.append((owner, setting.name))
            else:
                trials += found
        rounds[owner] = rounds_of(trials)
    return rounds, missing


ROUNDS, MISSING = plan()


def harness_tasks(owner: str) -> list[str]:
    """The harness tasks a declaration's settings reach: its own task, or the tasks of its group."""
    return sorted(name for name, cls in base.suite_tasks().items() if (cls.GROUP or name) == owner)


# ------------------------------------------------------------------ the local stand-ins


@pytest.fixture(scope="module")
def local_paths(tmp_path_factory, model_dirs):
    """Every file and folder the values name: the tiny models, the documents in each layout, span files, LongChat
    cases; and $LM_EVAL_LONGCTX_CACHE pointed here for the span cache's `default`."""
    import datasets
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("settings_table")
    texts = tiny.corpus_texts(n_docs=3, n_words=90, seed=3)
    tokenizer = AutoTokenizer.from_pretrained(model_dirs["a"])
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        rows.append({"input_ids": ids, "tokenized_len": len(ids)})
    books = [{"short_book_title": f"Book {i}", "text": text} for i, text in enumerate(texts)]
    for name, records in (("govreport_rows", rows), ("books", books)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (root / f"{name}.json").write_text(json.dumps(records))
        datasets.Dataset.from_list(records).to_parquet(str(root / f"{name}.parquet"))
    write_docs(root / "govreport_text.jsonl", texts)
    (root / "govreport_dataset").mkdir()
    (root / "govreport_dataset" / "test.jsonl").write_text((root / "govreport_rows.jsonl").read_text())
    (root / "books_dataset").mkdir()
    for split in ("test", "validation"):
        (root / "books_dataset" / f"{split}.jsonl").write_text((root / "books.jsonl").read_text())
    for i in range(len(texts)):  # the reference's layout (no manifest): one key span per document
        span_files.write_span_file(root / "key_spans" / f"slice_{i}.txt", [(5, 25)])
    (root / "longchat_cases").mkdir()
    for num_lines in (3, 5):
        cases = longeval_cases.generate_cases([num_lines], 2, seed=7)
        longeval_cases.write_jsonl(cases, root / "longchat_cases" / f"{num_lines}_lines.jsonl")
    named = {
        "evaluated_model": model_dirs["a"],
        "evaluator_model": model_dirs["b"],
        "longchat_cases_url": (root / "longchat_cases").as_uri(),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LM_EVAL_LONGCTX_CACHE", str(root / "cache_home"))
        yield lambda name: named.get(name) or str(root / name)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small run faster on one thread than on two contended ones (the test shares 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def resolve(value, local_paths):
    if isinstance(value, Local):
        return local_paths(value.name)
    if isinstance(value, list):
        return [resolve(v, local_paths) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, local_paths) for k, v in value.items()}
    return value


def round_metadata(owner: str, trials: list[Trial], local_paths) -> dict:
    dropped = {key for trial in trials for key in trial.drops}
    metadata = {k: v for k, v in BASE[owner].items() if k not in dropped}
    for trial in trials:
        metadata.update(trial.sets)
    return resolve(metadata, local_paths)


def run(owner: str, metadata: dict, model_dirs) -> dict:
    # no bootstrap: the standard errors are not what this test is about
    return run_task(owner, model_dirs["a"], metadata, bootstrap_iters=0, **RUN_ARGUMENTS.get(owner, {}))


@pytest.fixture(scope="module")
def reference_kinds(local_paths, model_dirs):
    """Per task, which kinds of metric are finite numbers in a run of its base metadata alone."""
    runs: dict[str, dict] = {}

    def kinds(owner: str) -> dict:
        if owner not in runs:
            results = run(owner, resolve(BASE[owner], local_paths), model_dirs)
            runs[owner] = {task: finite_kinds(metrics(results, task)) for task in harness_tasks(owner)}
        return runs[owner]

    return kinds


def metrics(results: dict, task: str) -> dict:
    """The task's metrics, standard errors left out."""
    return {name: value for name, value in results["results"][task].items() if "," in name and "_stderr" not in name}


def is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metric_kind(name: str) -> str:
    """A metric's name without its numbers (its length, depth or configuration): `gain@L#_d#,none`."""
    return re.sub(r"\d+", "#", name)


def finite_kinds(task_metrics: dict) -> set[str]:
    kinds: dict[str, bool] = {}
    for name, value in task_metrics.items():
        kinds[metric_kind(name)] = kinds.get(metric_kind(name), True) and is_finite_number(value)
    return {kind for kind, finite in kinds.items() if finite}


# ------------------------------------------------------------------ the tests


def test_every_declared_setting_is_run_or_has_a_reason():
    declared = {(owner, s.name) for owner, d in declarations.task_declarations().items() for s in d.settings}
    assert not MISSING, f"settings with no derived value, no entry in VALUES and none in UNTESTABLE: {MISSING}"
    for table in (VALUES, CONDITIONS, UNTESTABLE, RECORDED_AS):
        assert set(table) <= declared, f"entries naming no declared setting: {sorted(set(table) - declared)}"
    assert all(isinstance(reason, str) and reason.strip() for reason in UNTESTABLE.values())
    assert not set(UNTESTABLE) & set(VALUES), "a setting both run and untestable"
    run_values = {(owner, t.setting) for owner, rounds in ROUNDS.items() for r in rounds for t in r}
    assert run_values == declared - set(UNTESTABLE)


@pytest.mark.parametrize(
    ("owner", "index"),
    [(owner, index) for owner, rounds in ROUNDS.items() for index in range(len(rounds))],
    ids=str,
)
def test_round_of_settings_runs_and_is_recorded(owner, index, local_paths, model_dirs, reference_kinds):
    trials = ROUNDS[owner][index]
    metadata = round_metadata(owner, trials, local_paths)
    reference = reference_kinds(owner)
    results = run(owner, metadata, model_dirs)
    declaration = declarations.task_declarations()[owner]
    said = f"{owner} with --metadata {json.dumps(metadata)}"
    for task in harness_tasks(owner):
        task_metrics = metrics(results, task)
        assert any(is_finite_number(v) for v in task_metrics.values()), f"{task}: no number ({said})"
        not_finite = {
            name: value
            for name, value in task_metrics.items()
            if metric_kind(name) in reference[task] and not is_finite_number(value)
        }
        assert not not_finite, f"{task}: {not_finite}, finite numbers in the run of the base metadata ({said})"
        record = results["configs"][task]["metadata"]["longctx_settings"]
        for trial in trials:
            setting = declaration.by_name[trial.setting]
            expected = setting.parse(resolve(trial.value, local_paths), owner)
            read = RECORDED_AS.get((owner, setting.name))
            if read is not None:
                recorded = read(record)
            else:
                section = record if setting.affects_numbers else record["runtime"]
                assert setting.name in section, f"{task}: {setting.name} not recorded ({said})"
                recorded = section[setting.name]
            assert recorded == expected, f"{task}: {setting.name} recorded as {recorded!r}, given {expected!r} ({said})"
