"""What every task class of this package shares: settings from metadata, a test split only, (for the tasks that
score per token) the plugin's own request type, and the helpers two tasks use.

Each task class declares what is its own (``LongContextTask``'s class attributes): its metrics' directions, its
section of the report card, its per-token export's columns and view, the hub resources its settings fetch. A class
registers itself when it is defined (``TASK_CLASSES``), so no shared module keeps a list of the tasks or names one.
"""

from __future__ import annotations

import fnmatch
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from .. import errors
from ..data import documents, embedded_corpus, export_files
from ..engine import scoring
from ..harness import aggregations, contacts, evaluated_model, evaluation, request_type
from ..settings import BOOLEAN, GIVEN, Declaration, SettingsError, add_external_keys, integer
from . import preflight, run_options, sizing, token_export

NOTHING_SCORED = "no request scored in this process (results from the --use_cache database, or none yet)"
# longctx_settings.tokenizer: the evaluated model's tokenizer (documents.tokenizer_identity)
TOKENIZER_KEY = "tokenizer"
# configs.<task>.metadata.longctx_report: the task's section of the report card (ReportSection.record)
REPORT_KEY = "longctx_report"
# lm-eval's fallback when neither the model_args nor the config give a maximum length (HFLM)
HFLM_DEFAULT_MAX_LENGTH = 2048
TOKENIZER_UNSET_MAX_LENGTH = 1000000000000000019884624838656  # transformers' "no limit" marker

# configs.<task>.metadata.request_type: the requests a task sends, which the YAML's output_type cannot say
REQUEST_TYPE_KEY = "request_type"
PER_TOKEN_REQUESTS = (
    f"{request_type.REQUEST_TYPE} (this plugin's per-token scores of whole sequences; output_type must name a built-in "
    "type, so it says loglikelihood)"
)
add_external_keys("the suite's task YAMLs", [REQUEST_TYPE_KEY])


@dataclass(frozen=True)
class ReportSection:
    """A task's part of the report card, written into its results (``configs.<task>.metadata.longctx_report``): tasks
    with the same ``section`` make one section of the page; ``headlines`` are (metric, what it means) in table order,
    ``settings`` the dotted keys of ``longctx_settings`` shown on the card, ``pictures`` the report drawers' names."""

    section: str
    title: str
    lead: str
    order: int
    headlines: tuple[tuple[str, str], ...] = ()
    settings: tuple[str, ...] = ()
    pictures: tuple[str, ...] = ()

    def record(self) -> dict:
        return {
            "section": self.section,
            "title": self.title,
            "lead": self.lead,
            "order": self.order,
            "headlines": [[metric, meaning] for metric, meaning in self.headlines],
            "settings": list(self.settings),
            "pictures": list(self.pictures),
        }


def _registered_model_class(model) -> type | None:
    """The class lm-eval's registry holds for a ``--model`` name (None for an LM object or an unknown name: lm-eval
    says so itself)."""
    if not isinstance(model, str):
        return None
    from lm_eval.api import registry

    try:
        return registry.get_model(model)
    except Exception:  # noqa: BLE001  (an unknown name, an optional backend that cannot be imported: lm-eval's error)
        return None


# suite name -> task class; each class adds itself when it is defined (LongContextTask.__init_subclass__)
TASK_CLASSES: dict[str, type[LongContextTask]] = {}


def suite_tasks() -> dict[str, type[LongContextTask]]:
    """Every task class of the suite by its suite name: the modules of this package are imported, and each class
    registered itself when it was defined."""
    import importlib
    import pkgutil

    package = __name__.rsplit(".", 1)[0]
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{info.name}")
    return dict(TASK_CLASSES)


def suite_task_names() -> tuple[str, ...]:
    """Every task of the suite by its suite name (the results' keys), in the report card's order (``REPORT.order``;
    a group's tasks in the order their module defines them)."""
    classes = suite_tasks()

    def order(name: str) -> float:
        report = classes[name].REPORT
        return report.order if report else math.inf

    return tuple(sorted(classes, key=order))


def suite_run_names() -> tuple[str, ...]:
    """What lm_eval's ``--tasks`` names to run the whole suite task by task: each task's group if it has one
    (longeval_lines runs and reports through its two tasks), else its own name; once each, in
    ``suite_task_names``' order."""
    classes = suite_tasks()
    return tuple(dict.fromkeys(classes[name].GROUP or name for name in suite_task_names()))


class LongContextTask(ConfigurableTask):
    """A ConfigurableTask built from a YAML ``class:`` entry.

    Subclasses give ``resolve_settings(metadata) -> dict`` (metadata holds the YAML metadata, the
    model_args and --metadata), build ``self.dataset`` in ``download()``, and record what changes
    their numbers in ``_record_settings()``.
    """

    VERSION = 1
    # This suite's name of the task, whatever name a YAML gives it: the registry's key (TASK_CLASSES).
    SUITE_TASK_NAME = ""
    # The lm-eval group that runs this task with others of the suite (LongEval's two tasks), or None.
    GROUP: str | None = None
    # The kind of longctx_scores request the task sends (spec["kind"]) and how it is served: (name, RequestKind),
    # registered with the class; None: the harness's own "sequence" kind.
    REQUEST_KIND: tuple[str, request_type.RequestKind] | None = None
    # The task's settings: names, types, defaults, presets, meanings (its module's SETTINGS); the docs' tables and
    # the check of a run's keys read them from here.
    SETTINGS: Declaration | None = None
    # Every metric's direction, first match wins (fnmatch patterns for names built per length or configuration):
    # True higher is better, False lower, None informational (counts, diagnostics, notes; never gated). lm-eval
    # writes them into the results as higher_is_better, where the report tools read them.
    METRIC_DIRECTIONS: tuple[tuple[str, bool | None], ...] = ()
    # The task's section of the report card (written into its results: REPORT_KEY).
    REPORT: ReportSection | None = None
    # The per-token export (--metadata export_tokens): what each array of a document's file means, and the view
    # that shows the files ("key_tokens": the viewer's); None: the task has no export.
    EXPORT_COLUMNS: dict[str, str] | None = None
    EXPORT_VIEW: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.SUITE_TASK_NAME:
            TASK_CLASSES[cls.SUITE_TASK_NAME] = cls
        if cls.__dict__.get("REQUEST_KIND") is not None:  # the kind its requests name, served by longctx_scores
            name, kind = cls.__dict__["REQUEST_KIND"]
            request_type.REQUEST_KINDS[name] = kind

    @classmethod
    def hub_resources(cls, settings: dict) -> list[preflight.Resource]:
        """The hub resources a run with these settings fetches (checked before any is loaded)."""
        return []

    @classmethod
    def direction_of(cls, metric: str) -> bool | None:
        """The declared direction of ``metric``; a name no pattern matches is a KeyError."""
        for pattern, direction in cls.METRIC_DIRECTIONS:
            if fnmatch.fnmatchcase(metric, pattern):
                return direction
        raise KeyError(
            f"{cls.SUITE_TASK_NAME}/{metric}: no direction declared; add it to {cls.__name__}.METRIC_DIRECTIONS"
        )

    # Tasks whose requests are `longctx_scores`; the YAML must still say a built-in output_type.
    SCORES_PER_TOKEN = True
    # What the results record as the task's requests (metadata.request_type; the YAML states the same).
    REQUEST_TYPE_NOTE = PER_TOKEN_REQUESTS
    # Tasks that score raw documents refuse a chat template and a system instruction (a prompt task takes them).
    SCORES_RAW_DOCUMENTS = True
    # Why --num_fewshot cannot apply (the refusal's "because").
    NO_SHOTS_BECAUSE = "the task scores whole documents token by token; there is nothing to show as shots"
    # The settings a data_files file replaces (the hub dataset's), for a task that reads documents
    HUB_ONLY_SETTINGS: tuple[str, ...] = ("dataset_path", "dataset_revision")
    # The settings that act only on rows of token ids (inert on text rows and on the embedded corpus)
    TOKEN_ID_ROWS_ONLY: tuple[str, ...] = ()
    # What sized the task's settings (lengths, preset, window), once its documents are read (``_size``)
    sized_by: sizing.Sizing | None = None

    @staticmethod
    def resolve_settings(metadata: dict | None) -> dict:
        raise NotImplementedError

    @classmethod
    def check_before_model(cls, config: dict, run: Mapping) -> None:
        """What building the task checks that needs no model, asked by the discovery hook when ``simple_evaluate``
        starts, because lm-eval loads the model before it builds the tasks: the settings (type, range, upper bound,
        unknown keys), the per-token export's folder, a chat template or system instruction, the number of shots.
        ``config``: the task's config as lm-eval will build it (YAML and metadata merged); ``run``: the arguments of
        ``simple_evaluate`` (lm-eval's names). Building the task checks them all again."""
        contacts.install()  # the hf model_args keys become known metadata keys
        task_name = str(config.get("task") or cls.SUITE_TASK_NAME)
        backend = _registered_model_class(run.get("model"))
        if backend is not None:  # --model's class, before lm-eval builds the model
            evaluated_model.check_model_class(backend, task_name, cls.SCORES_PER_TOKEN)
        settings = cls.resolve_settings(config.get("metadata"))
        if settings.get("data_files") or settings.get("embedded_corpus"):  # a hub setting beside them does nothing
            # rows of token ids or of text: known once a data_files file is read, never rows with the embedded corpus
            by_rows = cls.TOKEN_ID_ROWS_ONLY if settings.get("embedded_corpus") else ()
            inert = inert_settings(settings, {}, hub_only=cls.HUB_ONLY_SETTINGS, token_id_rows_only=by_rows)
            refuse_inert_settings(task_name, settings, inert)
        folder = export_files.parse_setting(settings.get(export_files.SETTING))
        if folder is not None and cls.EXPORT_COLUMNS is not None:
            export_files.check_folder(Path(folder) / task_name)
        if cls.SCORES_RAW_DOCUMENTS:  # said before the model loads: the documents stay raw
            run_options.prompt_options_not_applied(
                task_name, bool(run.get("apply_chat_template")), run.get("system_instruction")
            )
        shots = config.get("num_fewshot")
        run_options.check_num_fewshot(task_name, shots, cls.NO_SHOTS_BECAUSE)
        if shots != 0:  # simple_evaluate leaves a YAML's num_fewshot: 0 as it is
            run_options.check_num_fewshot(task_name, run.get("num_fewshot"), cls.NO_SHOTS_BECAUSE)
        cls._check_settings_before_model(task_name, settings, run)

    @classmethod
    def _check_settings_before_model(cls, task_name: str, settings: dict, run: Mapping) -> None:
        """A task's own checks of its settings and of the run's options that need no model (``check_before_model``)."""

    def __init__(self, config: dict | None = None):
        contacts.install()  # before lm-eval reads the task's metrics or sends its requests
        cfg = dict(config or {})
        cfg.pop("class", None)  # the task factory passes the YAML's `class:` key through
        # every task of this package sends longctx_scores requests (the accuracy task too: prompt lengths)
        # the model simple_evaluate evaluates (None outside it): tasks take its tokenizer and max_length; a backend
        # whose scores the engine cannot reproduce is refused here, before any work
        self.evaluated_model = evaluation.note_evaluated_model(
            str(cfg.get("task", type(self).__name__)), scores_per_token=self.SCORES_PER_TOKEN
        )
        check_position_table(str(cfg.get("task", type(self).__name__)), self.evaluated_model)
        run = evaluation.current()
        run.forget_task(str(cfg.get("task", "")))  # a new build of this task: its record starts empty
        self.settings = self.resolve_settings(cfg.get("metadata"))
        # the model_args lm-eval merged into the metadata: where the window comes from outside a run
        self.model_settings = add_model_settings({}, cfg.get("metadata"))
        if not run.resources_checked:  # every hub resource of the call's tasks of the suite, once a call
            preflight.check_run(self.SUITE_TASK_NAME, cfg.get("metadata"), run.arguments.get("tasks"), suite_tasks())
            run.resources_checked = evaluation.in_progress() is run
        if export_files.SETTING in self.settings:
            self.settings[export_files.SETTING] = export_files.parse_setting(self.settings[export_files.SETTING])
        options = evaluation.prompt_options()
        if options is not None and self.SCORES_RAW_DOCUMENTS:  # the documents stay raw, said once
            run_options.prompt_options_not_applied(str(cfg.get("task", "")), *options)
        # a YAML's own num_fewshot (--num_fewshot comes later, through set_config)
        run_options.check_num_fewshot(str(cfg.get("task", "")), cfg.get("num_fewshot"), self.NO_SHOTS_BECAUSE)
        super().__init__(config=cfg)
        if self.SCORES_PER_TOKEN:
            # Set after validation, which only accepts built-in types (also what DP padding counts).
            self.OUTPUT_TYPE = request_type.REQUEST_TYPE
        if self.config.metadata is None:
            self.config.metadata = {}
        self.config.metadata[REQUEST_TYPE_KEY] = self.REQUEST_TYPE_NOTE  # the class's, whatever --metadata says
        if self.REPORT is not None:
            self.config.metadata[REPORT_KEY] = self.REPORT.record()
        self._record_settings()
        self._token_export = token_export.for_task(self)  # checks the folder (again: check_before_model)
        self._check_built()

    def _record_settings(self) -> None:
        raise NotImplementedError

    def _check_built(self) -> None:
        """Checks that need the whole task built (its config, its documents), run before any request is built."""

    def metric_declarations(self) -> dict[str, aggregations.MetricDeclaration]:
        """Every metric the task reports, with its aggregation and direction: the one place they are declared."""
        raise NotImplementedError

    def declare(self, aggregation, metric: str) -> aggregations.MetricDeclaration:
        """``metric`` with its aggregation and its declared direction (METRIC_DIRECTIONS)."""
        return aggregations.declare(aggregation, self.direction_of(metric))

    def aggregation(self):
        if self.predict_only:
            return super().aggregation()  # lm-eval's bypass
        task = str(self.config.task)
        return {
            name: aggregations.for_task(d.aggregation, task, name) for name, d in self.metric_declarations().items()
        }

    def higher_is_better(self):
        if self.predict_only:
            return super().higher_is_better()
        return {name: d.higher_is_better for name, d in self.metric_declarations().items()}

    # ---------------------------------------------------------------- lm-eval's run options (tasks/run_options.py)

    predict_only = False

    def override_metric(self, metric_name: str) -> None:
        """``--predict_only``: lm-eval's ``bypass`` in place of every metric, as for its own tasks. The task's
        process_results still runs (its checks, the per-token export) but reports only ``bypass``."""
        if metric_name != "bypass":
            raise run_options.UnsupportedOptionError(
                f"{self.config.task}: metric override {metric_name!r}: only lm-eval's 'bypass' (--predict_only) "
                "applies to this task; its metrics are its own."
            )
        super().override_metric(metric_name)
        self.predict_only = True
        scored = self.process_results

        def process_results(doc, results):
            scored(doc, results)
            return {metric_name: None}  # what lm-eval's bypass metric gives each document

        setattr(self, "process_results", process_results)  # noqa: B010  (an instance's own, as lm-eval does)

    def set_config(self, key: str, value, update: bool = False) -> None:
        if key == "num_fewshot":  # --num_fewshot (0 when not given)
            run_options.check_num_fewshot(str(self.config.task), value, self.NO_SHOTS_BECAUSE)
        super().set_config(key, value, update)

    def sampling_seed(self) -> int | None:
        """The seed this task draws its samples with (its own ``seed`` setting); None when it draws none."""
        return self.settings.get("seed")

    def set_fewshot_seed(self, seed: int | None = None) -> None:
        super().set_fewshot_seed(seed)  # lm-eval's --seed (fourth value): our tasks draw with their own seed
        run_options.note_lm_eval_seed(str(self.config.task), seed, self.sampling_seed())

    def evaluated_tokenizer(self):
        """The evaluated model's tokenizer, else the one of the model_args' ``pretrained`` (a task built outside a
        run); None when neither is known."""
        model = self.evaluated_model
        if model is not None and model.tokenizer is not None:
            return model.tokenizer
        name = self.model_settings.get("pretrained")
        if not isinstance(name, str) or not name:
            return None
        return documents.load_tokenizer(
            name,
            "the evaluated model's tokenizer",
            revision=self.model_settings.get("revision"),
            trust_remote_code=self.model_settings["trust_remote_code"],
        )

    def _size(self, for_lengths, for_window, paper, knobs: tuple[str, ...] = ()) -> None:
        """Size the task's settings from max_seq_lengths, the preset or the evaluated model's window
        (``sizing.size``; ``knobs``: the settings the functions set); where each value came from goes into the
        record."""
        window = sizing.model_window(self.evaluated_model, self.model_settings)
        self.sized_by = sizing.size(self.settings, window, for_lengths, for_window, paper, knobs)

    def _store_settings(self, record: dict) -> None:
        """Put what changes the numbers where the results JSON keeps it: configs.<task>.metadata."""
        if self.config.metadata is None:
            self.config.metadata = {}
        sizing.record(record, self.sized_by)
        sizing.say_dropped(str(self.config.task or self.SUITE_TASK_NAME), self.sized_by)
        if token_export.enabled(self):  # a path only: the export changes no number
            record[export_files.SETTING] = self.settings[export_files.SETTING]
        # the evaluated model's tokenizer (when the task is built outside simple_evaluate: the one that served it,
        # added by dump_config)
        model = self.evaluated_model
        if model is not None and model.tokenizer is not None:
            record[TOKENIZER_KEY] = documents.tokenizer_identity(model.tokenizer)
        self.config.metadata["longctx_settings"] = record

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        """The (text, request spec) of each ``longctx_scores`` request a document makes, in order; ``templated``:
        lm-eval applied a chat template to ``ctx``."""
        raise NotImplementedError

    def construct_requests(self, doc, ctx, **kwargs):
        """One ``longctx_scores`` request per (text, spec) of :meth:`request_arguments`, numbered in order. lm-eval's
        chat options are taken here (a task that scores raw documents records them as not applied)."""
        templated = bool(kwargs.pop("apply_chat_template", False))
        kwargs.pop("chat_template", None)
        arguments = self.request_arguments(doc, ctx, templated)
        return [Instance(request_type.REQUEST_TYPE, doc, args, i, **kwargs) for i, args in enumerate(arguments)]

    def build_all_requests(self, **kwargs) -> None:
        if self.SCORES_RAW_DOCUMENTS:  # the documents are read raw whatever the options: recorded when given
            not_applied = run_options.prompt_options_not_applied(
                str(self.config.task), kwargs.get("apply_chat_template", False), kwargs.get("system_instruction")
            )
            record = (self.config.metadata or {}).get("longctx_settings")
            if isinstance(record, dict):
                runtime = record.setdefault("runtime", {})
                runtime.pop(run_options.PROMPT_FORMAT_KEY, None)
                if not_applied is not None:
                    runtime[run_options.PROMPT_FORMAT_KEY] = not_applied
        request_type.build_requests_without_request_cache(self, super().build_all_requests, **kwargs)

    def _scoring_records(self) -> dict:
        """How this task's requests were scored (the engine's strategy per pass, dtype, model type), for the
        results record; tasks that run a second model (LongPPL's evaluator) add its record."""
        scoring = evaluation.scoring_of(str(getattr(self.config, "task", "")))
        return {"scoring": scoring if scoring is not None else NOTHING_SCORED}

    def dump_config(self) -> dict:
        """lm-eval's config dump, with how the requests were scored under ``longctx_settings.runtime``."""
        config = super().dump_config()
        metadata = config.get("metadata")
        record = metadata.get("longctx_settings") if isinstance(metadata, dict) else None
        if isinstance(record, dict):
            runtime = {**record.get("runtime", {}), **self._scoring_records()}
            record = {**record, "runtime": runtime}
            if not isinstance(record.get(TOKENIZER_KEY), dict):
                served = evaluation.tokenizer_of(str(getattr(self.config, "task", "")))
                record[TOKENIZER_KEY] = served if served is not None else NOTHING_SCORED
            config["metadata"] = {**metadata, "longctx_settings": record}
        return config

    def fewshot_docs(self):
        # no shots (run_options refuses them): lm-eval would otherwise build a list of every test document as shots
        return None

    def has_training_docs(self):
        return False

    def has_validation_docs(self):
        return False

    def has_test_docs(self):
        return True

    def test_docs(self):
        return self.dataset["test"]


# ------------------------------------------------------------------ documents and the settings that select them


class SequenceTooLongError(scoring.ScoringError):
    """A task's sequences are longer than the evaluated model takes; refused when the task is built (the same
    error the engine's length check gives when the requests are served, earlier)."""


# Settings of a document selection that act only on the hub dataset (a data_files file replaces it), or only on
# rows of token ids (rows with a `text` field are read as they are).
HUB_ONLY_SETTINGS = LongContextTask.HUB_ONLY_SETTINGS
TOKEN_ID_ROWS_ONLY_SETTINGS = ("decode_tokenizer", "min_tokens", "max_tokens")


def inert_settings(settings: dict, provenance: dict, hub_only=HUB_ONLY_SETTINGS, token_id_rows_only=()) -> dict:
    """The settings that did nothing on the rows read, each with why: ``hub_only`` ones when a data_files file was
    read, ``token_id_rows_only`` ones when the rows held text (what ``documents.load_govreport`` records)."""
    out = {}
    if settings.get("embedded_corpus"):
        for name in (*hub_only, "data_files", *token_id_rows_only):
            out[name] = "embedded_corpus reads the embedded corpus instead"
        return out
    if settings.get("data_files"):
        for name in hub_only:
            out[name] = f"data_files {settings['data_files']} replaces the hub dataset"
    elif "dataset_revision" in hub_only and _is_local_folder(settings.get("dataset_path")):
        out["dataset_revision"] = (
            f"dataset_path {settings['dataset_path']} is a local folder (a revision names a hub commit)"
        )
    if token_id_rows_only and "decode_tokenizer" not in provenance:
        where = f"data_files {settings['data_files']}" if settings.get("data_files") else "the dataset"
        for name in token_id_rows_only:
            out[name] = f"the rows of {where} hold text, not token ids, and are read as they are"
    return out


def _is_local_folder(path) -> bool:
    from pathlib import Path

    return isinstance(path, str) and bool(path) and Path(path).expanduser().is_dir()


def refuse_inert_settings(task_name: str, settings, inert: dict) -> None:
    """A setting the user gave that does nothing on these rows is an error (a recorded setting must have acted)."""
    given = [name for name in inert if name in getattr(settings, "explicit", ())]
    if given:
        raise SettingsError(
            f"{task_name}: setting {given[0]!r} does nothing here: {inert[given[0]]}. Remove "
            f"{', '.join(repr(g) for g in given)} from --metadata."
        )


# Settings that name the documents: one given beside a preset's embedded_corpus wins over it
DOCUMENT_SOURCE_SETTINGS = ("data_files", "dataset_path", "dataset_revision")


def resolve_embedded_corpus(task_name: str, s, source_settings=DOCUMENT_SOURCE_SETTINGS) -> None:
    """``embedded_corpus`` from a preset yields to documents the user names (data_files, dataset_path); given
    beside them, it is an error (two sources of documents)."""
    given = [name for name in source_settings if name in getattr(s, "explicit", ())]
    if not s.get("embedded_corpus") or not given:
        return
    if getattr(s, "sources", {}).get("embedded_corpus") == GIVEN:
        raise SettingsError(
            f"{task_name}: embedded_corpus and {given[0]} both name the documents; give one of them in --metadata"
        )
    s["embedded_corpus"] = False
    s.sources["embedded_corpus"] = f"{given[0]} given, over {s.sources.get('embedded_corpus')}"


def embedded_documents(task_name: str, n_docs: int, n_tokens: int, tokenizer=None) -> tuple[list[str], dict]:
    """``n_docs`` documents of the embedded corpus, each of at least ``n_tokens`` tokens of ``tokenizer`` (about 4
    characters a token without one), and their provenance."""
    count = None
    if tokenizer is not None:

        def count(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    try:
        texts = embedded_corpus.documents_of_tokens(max(1, int(n_tokens)), int(n_docs), count)
    except ValueError as err:
        raise SettingsError(
            f"{task_name}: embedded_corpus: {err}. Ways out: fewer documents (num_docs), shorter ones "
            "(max_seq_lengths), or documents of your own (data_files)"
        ) from None
    return texts, {**embedded_corpus.provenance(texts), "min_tokens_per_document": int(n_tokens)}


def govreport_documents(settings: dict, task_name: str, min_doc_tokens: int = 1, tokenizer=None):
    """The GovReport selection named by the settings, as (DatasetDict with doc_id and text, provenance, the settings
    that did nothing on these rows and so are not recorded); a given setting that did nothing is an error. With
    ``embedded_corpus``: documents of the embedded corpus of at least ``min_doc_tokens`` tokens of ``tokenizer``."""
    import datasets

    s = settings
    if s.get("embedded_corpus"):
        texts, provenance = embedded_documents(task_name, s["num_docs"], min_doc_tokens, tokenizer)
        inert = inert_settings(s, provenance, token_id_rows_only=TOKEN_ID_ROWS_ONLY_SETTINGS)
        refuse_inert_settings(task_name, s, inert)
        dataset = datasets.DatasetDict(
            {"test": datasets.Dataset.from_dict({"doc_id": list(range(len(texts))), "text": texts})}
        )
        return dataset, provenance, list(inert)
    docs = documents.load_govreport(
        dataset_path=s["dataset_path"],
        revision=s["dataset_revision"],
        decode_tokenizer=s["decode_tokenizer"],
        min_tokens=s["min_tokens"],
        max_tokens=s["max_tokens"],
        num_docs=s["num_docs"],
        data_files=s["data_files"],
        warn_short=False,
    )
    evaluated = len(evaluation.documents_evaluated(len(docs.texts), task_name))
    if len(docs.texts) < s["num_docs"] and evaluated >= len(docs.texts):
        # said once, by the task, and only when the run would use more documents than there are
        errors.notice(
            f"{task_name}: only {len(docs.texts)} documents match the selection (num_docs asks for {s['num_docs']}); "
            f"the run evaluates all {len(docs.texts)}"
        )
    if not docs.texts:
        raise ValueError("no documents matched the GovReport selection")
    inert = inert_settings(s, docs.provenance, token_id_rows_only=TOKEN_ID_ROWS_ONLY_SETTINGS)
    refuse_inert_settings(task_name, s, inert)
    dataset = datasets.DatasetDict(
        {"test": datasets.Dataset.from_dict({"doc_id": list(range(len(docs.texts))), "text": docs.texts})}
    )
    return dataset, docs.provenance, list(inert)


def govreport_resources(settings: dict) -> list[preflight.Resource]:
    """What a GovReport selection fetches: the hub dataset and the tokenizer that decodes its rows (none with a
    data_files file)."""
    s = settings
    if s.get("data_files") or s.get("embedded_corpus"):
        return []
    out = [preflight.Resource("dataset", s["dataset_path"], s.get("dataset_revision"))]
    if not preflight.is_local(s.get("decode_tokenizer")):
        out.append(preflight.Resource("tokenizer", s["decode_tokenizer"]))
    return out


def longest_document_words(provenance: dict) -> str:
    """How to shorten the documents of a selection, for a too-long error."""
    if "max_tokens" in provenance:
        return "lower --metadata max_tokens (now " + f"{provenance['max_tokens']}, in the rows' token ids)"
    if "data_files" in provenance:
        return f"give shorter documents in data_files {provenance['data_files']}"
    return "give shorter documents (--metadata data_files)"


ALLOW_BEYOND_WAY_OUT = "pass --metadata '{\"allow_beyond_max_length\": true}' to score beyond it"


def refuse_too_long(
    task_name: str, n_tokens: dict[int, int], limit: int | None, limit_words: str, item: str, ways_out: str
):
    """When the task is built: refuse sequences longer than ``limit`` (``limit_words`` says what it is), naming the
    longest (``n_tokens``: document index -> the tokens the model reads for it, for the documents the run evaluates),
    rather than after other requests were scored. Nothing to check without a limit (the lengths are checked again
    when served)."""
    if limit is None or not n_tokens or max(n_tokens.values()) <= limit:
        return
    longest = max(n_tokens, key=n_tokens.__getitem__)
    over = sum(n > limit for n in n_tokens.values())
    raise SequenceTooLongError(
        f"{task_name}: {item} {longest} makes a {n_tokens[longest]}-token sequence (the longest; {over} of the "
        f"{len(n_tokens)} evaluated {'is' if over == 1 else 'are'} over {limit}), longer than {limit_words}. Ways out: "
        f"{ways_out}."
    )


class LazyDocuments(Sequence):
    """A task's documents, each built when it is read: ``--limit k`` builds the first k (a ``datasets.Dataset``
    holds every one, built when the task is built). lm-eval reads a split's ``len``, items, iteration and the keys of
    ``features`` (the column names)."""

    def __init__(self, n_docs: int, build: Callable[[int], dict], columns: Sequence[str]):
        self._n_docs = int(n_docs)
        self._build = build
        self.features = dict.fromkeys(columns)

    def __len__(self) -> int:
        return self._n_docs

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(self._n_docs))]
        i = operator.index(index)
        if i < 0:
            i += self._n_docs
        if not 0 <= i < self._n_docs:
            raise IndexError(f"document {index} of {self._n_docs}")
        return self._build(i)

    def __iter__(self) -> Iterator[dict]:
        return (self._build(i) for i in range(self._n_docs))


def evaluated_documents(dataset, task_name: str) -> dict[int, dict]:
    """The documents of ``dataset`` (a datasets split) the running simple_evaluate call evaluates (its --limit and
    --samples; every one outside a call), by index."""
    return {i: dataset[i] for i in evaluation.documents_evaluated(len(dataset), task_name)}


def position_table_words(table: int) -> str:
    return (
        f"the model's learned position table ({table} positions: a position past it has no embedding, whatever "
        "allow_beyond_max_length or --model_args max_length say)"
    )


def model_limit(model: evaluated_model.EvaluatedModel | None, allow_beyond: bool) -> tuple[int | None, str]:
    """The evaluated model's maximum length as a limit for ``refuse_too_long`` (None: nothing to check, the model is
    not known or ``allow_beyond_max_length`` is on), and its words. A learned position table is a limit that
    ``allow_beyond_max_length`` does not lift."""
    if model is None:
        return None, ""
    table = model.position_table
    if table is not None and (allow_beyond or model.max_length is None):
        return table, position_table_words(table)
    if allow_beyond or model.max_length is None:
        return None, ""
    return model.max_length, f"the model's maximum length {model.max_length} ({model.max_length_words()})"


def check_position_table(task_name: str, model: evaluated_model.EvaluatedModel | None) -> None:
    """A maximum length beyond the model's learned position table is refused when the task is built: the task would
    size its sequences for positions the model has no embedding for."""
    table = model.position_table if model is not None else None
    if table is not None and model is not None and model.max_length is not None and model.max_length > table:
        raise SettingsError(
            f"{task_name}: the maximum length {model.max_length} (from --model_args max_length or the config) is "
            f"beyond {position_table_words(table)}. Way out: --model_args max_length={table} or less, or leave "
            "max_length out"
        )


def lead_token_ids(tokenizer, bos_mode: str) -> list[int]:
    """[BOS] or []: ``always`` needs a BOS token; ``auto`` uses it when the tokenizer itself adds one."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos_mode == "never":
        return []
    if bos_mode == "always":
        if bos is None:
            raise ValueError("bos: true, but the tokenizer has no BOS token")
        return [int(bos)]
    probe = tokenizer("retrieval gain", add_special_tokens=True)["input_ids"]
    return [int(bos)] if bos is not None and len(probe) and probe[0] == bos else []


def query_extra_tokens(tokenizer, s: dict) -> int:
    """Tokens of a retrieval-gain sequence besides the document: BOS (as the tokenizer adds one, or the ``bos``
    setting), the separator, Q and A; one BOS and no separator tokens when no tokenizer is known."""
    if tokenizer is None:
        return 1 + s["query_tokens"] + s["answer_tokens"]
    sep = tokenizer(s["separator"], add_special_tokens=False)["input_ids"] if s["separator"] else []
    return len(lead_token_ids(tokenizer, s["bos"])) + len(sep) + s["query_tokens"] + s["answer_tokens"]


def zero_padded_width(values, minimum: int) -> int:
    """Digits of the zero-padded numbers in metric names (lm-eval sorts metric names as strings)."""
    return max(minimum, len(str(max(values))))


# ------------------------------------------------------------------ the evaluated model, from the metadata


def add_model_settings(settings: dict, metadata: dict | None) -> dict:
    """The evaluated model's own settings that a task reads from the model_args lm-eval merges into the metadata:
    ``pretrained``, ``revision``, ``trust_remote_code``, ``max_length``."""
    md = dict(metadata or {})
    settings["pretrained"] = md.get("pretrained")
    settings["revision"] = md.get("revision")
    settings["trust_remote_code"] = BOOLEAN.convert(md.get("trust_remote_code", False))
    settings["max_length"] = (
        None if md.get("max_length") in (None, "", "None") else integer(1).convert(md["max_length"])
    )
    return settings


def settings_tokenizer(s: dict, model: evaluated_model.EvaluatedModel | None, role: str, missing: str):
    """The tokenizer named by the ``tokenizer`` setting, else the evaluated model's own, else ``pretrained``'s
    (``role`` names it in a loading error; ``missing`` is the error when none is named)."""
    if not s["tokenizer"] and model is not None and model.tokenizer is not None:
        return model.tokenizer
    name = s["tokenizer"] or s["pretrained"]
    if not isinstance(name, str) or not name:
        raise SettingsError(missing)
    return documents.load_tokenizer(name, role, revision=s["revision"], trust_remote_code=s["trust_remote_code"])


def resolve_model_max_length(s: dict, tokenizer, model: evaluated_model.EvaluatedModel | None = None) -> int:
    """The evaluated model's ``max_length`` when the model is known; else resolved as lm-eval's HFLM does:
    model_args ``max_length``, else the config's ``n_positions`` / ``max_position_embeddings`` / ``n_ctx`` (of
    its ``text_config`` when it has one), else the tokenizer's ``model_max_length``, else 2048."""
    if model is not None and model.max_length is not None:
        return model.max_length
    if s["max_length"]:
        return int(s["max_length"])
    if isinstance(s["pretrained"], str) and s["pretrained"]:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(
            s["pretrained"], revision=s["revision"], trust_remote_code=s["trust_remote_code"]
        )
        config = getattr(config, "text_config", None) or config
        for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
            if getattr(config, attr, None) is not None:
                return int(getattr(config, attr))
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and int(limit) != TOKENIZER_UNSET_MAX_LENGTH:
        return int(limit)
    return HFLM_DEFAULT_MAX_LENGTH
