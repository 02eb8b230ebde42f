"""What every task class of this package shares: settings from metadata, a test split only, (for the tasks that
score per token) the plugin's own request type, and the helpers two tasks use.

Each task class declares what is its own (``LongContextTask``'s class attributes): its metrics' directions, its
section of the report card, its per-token export's columns and view, the hub resources its settings fetch. A class
registers itself when it is defined (``TASK_CLASSES``), so no shared module keeps a list of the tasks or names one.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from .. import errors
from ..data import documents, embedded_corpus, export_files
from ..engine import scoring
from ..harness import aggregations, contacts, evaluated_model, evaluation, request_type
from ..settings import GIVEN, Declaration, SettingsError, add_external_keys
from . import preflight, run_options, sizing, token_export

NOTHING_SCORED = "no request scored in this process (results from the --use_cache database, or none yet)"
# longctx_settings.tokenizer: the evaluated model's tokenizer (documents.tokenizer_identity)
TOKENIZER_KEY = "tokenizer"
# configs.<task>.metadata.longctx_report: the task's section of the report card (ReportSection.record)
REPORT_KEY = "longctx_report"

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
        # JSON: the fields in order, lists where they hold tuples
        return {
            **dataclasses.asdict(self),
            "headlines": [list(pair) for pair in self.headlines],
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
    # The kind of longctx_scores request the task sends (spec["kind"]) and how it is served, registered with the
    # class; None: the harness's own "sequence" kind.
    REQUEST_KIND: request_type.RequestKind | None = None
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
            request_type.register_request_kind(cls.__dict__["REQUEST_KIND"])

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
        evaluated_model.check_position_table(str(cfg.get("task", type(self).__name__)), self.evaluated_model)
        run = evaluation.current()
        run.forget_task(str(cfg.get("task", "")))  # a new build of this task: its record starts empty
        self.settings = self.resolve_settings(cfg.get("metadata"))
        # the model_args lm-eval merged into the metadata: where the window comes from outside a run
        self.model_settings = evaluated_model.add_model_settings({}, cfg.get("metadata"))
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

    @property
    def task_name(self) -> str:
        """The task's name in this run (a YAML may give the suite's task another)."""
        return str(getattr(self.config, "task", None) or self.SUITE_TASK_NAME)

    def _record_settings(self) -> None:
        """What changes the numbers, into the results (``configs.<task>.metadata.longctx_settings``): the declared
        settings as used, less those that did nothing on these rows (``inert``), with the task's facts."""
        record = self.SETTINGS.record(self.settings) if self.SETTINGS is not None else {}
        for name in getattr(self, "inert", ()):
            record.pop(name, None)
        self._store_settings(self.settings_record(record))

    def settings_record(self, record: dict) -> dict:
        """The task's facts added to its settings record: by default its documents' provenance."""
        return {**record, "data": self.provenance}

    # ---------------------------------------------------------------- sequences too long for the model

    # what a too-long refusal calls each evaluated document
    SEQUENCE_ITEM = "document"

    def longest_sequence(self, tokenizer, doc: dict) -> int | None:
        """Tokens of the longest sequence the task's requests read for ``doc``, built as they are served (a
        ScoringError when it cannot be built); None: nothing to check when the task is built."""
        return None

    def sequence_limit(self) -> tuple[int | None, str]:
        """The most tokens a sequence may have, and its words (None: no limit)."""
        return evaluated_model.model_limit(self.evaluated_model, bool(self.settings.get("allow_beyond_max_length")))

    def too_long_ways_out(self) -> str:
        return ALLOW_BEYOND_WAY_OUT

    def _check_built(self) -> None:
        """Every evaluated document's sequences can be built and fit the evaluated model: checked when the task is
        built, rather than after other requests of the run were scored."""
        model = self.evaluated_model
        if model is None or model.tokenizer is None:
            return
        n_tokens = {}
        test = self.dataset["test"]
        for i in evaluation.documents_evaluated(len(test), self.task_name):
            try:
                n = self.longest_sequence(model.tokenizer, test[i])
            except scoring.ScoringError as err:
                raise request_type.task_error(self.task_name, err) from err
            if n is None:
                return
            n_tokens[i] = n
        limit, limit_words = self.sequence_limit()
        refuse_too_long(self.task_name, n_tokens, limit, limit_words, self.SEQUENCE_ITEM, self.too_long_ways_out())

    # ---------------------------------------------------------------- metrics and requests

    # metric -> aggregation, for a task whose metrics do not depend on its settings (directions: METRIC_DIRECTIONS)
    AGGREGATIONS: dict[str, str] = {}

    def metric_declarations(self) -> dict[str, aggregations.MetricDeclaration]:
        """Every metric the task reports, with its aggregation and direction: the one place they are declared."""
        return {metric: self.declare(aggregation, metric) for metric, aggregation in self.AGGREGATIONS.items()}

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

    # the settings every request's spec carries (the --use_cache key): those that change the numbers, then how
    # the requests are served
    SCORING_SETTINGS: tuple[str, ...] = ()
    SERVING_SETTINGS = ("chunk_size", "long_pass", "without_batch_size", "allow_beyond_max_length")

    def request_spec(self, **values) -> dict:
        """A request's spec: the task's ``SCORING_SETTINGS``, its kind, ``values``, its ``SERVING_SETTINGS``."""
        s = self.settings
        assert self.REQUEST_KIND is not None  # a task that builds its own specs does not call this
        return {
            **{k: s[k] for k in self.SCORING_SETTINGS},
            "kind": self.REQUEST_KIND.name,
            **values,
            **{k: s[k] for k in self.SERVING_SETTINGS},
        }

    def request_arguments(self, doc: dict, ctx: str, templated: bool) -> list[tuple[str, dict]]:
        """The (text, request spec) of each ``longctx_scores`` request a document makes, in order; ``templated``:
        lm-eval applied a chat template to ``ctx``. By default one request of the document's text."""
        return [(doc["text"], self.request_spec())]

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


def evaluated_documents(dataset, task_name: str) -> dict[int, dict]:
    """The documents of ``dataset`` (a datasets split) the running simple_evaluate call evaluates (its --limit and
    --samples; every one outside a call), by index."""
    return {i: dataset[i] for i in evaluation.documents_evaluated(len(dataset), task_name)}


def zero_padded_width(values, minimum: int) -> int:
    """Digits of the zero-padded numbers in metric names (lm-eval sorts metric names as strings)."""
    return max(minimum, len(str(max(values))))


class GovReportTask(LongContextTask):
    """A task over documents of the GovReport selection (or the embedded corpus, or a data_files file): what they
    fetch from the hub, how they are read, one request per document."""

    TOKEN_ID_ROWS_ONLY = TOKEN_ID_ROWS_ONLY_SETTINGS

    @classmethod
    def hub_resources(cls, settings: dict) -> list[preflight.Resource]:
        return govreport_resources(settings)

    def read_documents(self, min_doc_tokens: int, tokenizer) -> None:
        """The selection's documents (``govreport_documents``): ``dataset``, ``provenance`` and the ``inert``
        settings."""
        self.dataset, self.provenance, self.inert = govreport_documents(
            self.settings, self.SUITE_TASK_NAME, min_doc_tokens, tokenizer
        )
