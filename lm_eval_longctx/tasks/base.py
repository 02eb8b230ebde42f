"""What every task class of this package shares: settings from metadata, a test split only, and
(for the tasks that score per token) the plugin's own request type."""

from __future__ import annotations

from lm_eval.api.task import ConfigurableTask

from ..data import documents, export_files
from ..harness import glue
from ..metrics import directions
from ..settings import add_external_keys
from . import preflight, run_options, token_export

NOTHING_SCORED = "no request scored in this process (results from the --use_cache database, or none yet)"

# configs.<task>.metadata.request_type: the requests a task sends, which the YAML's output_type cannot say
REQUEST_TYPE_KEY = "request_type"
PER_TOKEN_REQUESTS = (
    f"{glue.REQUEST_TYPE} (this plugin's per-token scores of whole sequences; output_type must name a built-in "
    "type, so it says loglikelihood)"
)
add_external_keys("the suite's task YAMLs", [REQUEST_TYPE_KEY])


class LongContextTask(ConfigurableTask):
    """A ConfigurableTask built from a YAML ``class:`` entry.

    Subclasses give ``resolve_settings(metadata) -> dict`` (metadata holds the YAML metadata, the
    model_args and --metadata), build ``self.dataset`` in ``download()``, and record what changes
    their numbers in ``_record_settings()``.
    """

    VERSION = 1
    # This suite's name of the task: metrics/directions.py declares its metrics' directions under it (the gate reads
    # them there too), whatever name a YAML gives the task.
    SUITE_TASK_NAME = ""
    # Tasks whose requests are `longctx_scores`; the YAML must still say a built-in output_type.
    SCORES_PER_TOKEN = True
    # What the results record as the task's requests (metadata.request_type; the YAML states the same).
    REQUEST_TYPE_NOTE = PER_TOKEN_REQUESTS
    # Tasks that score raw documents refuse a chat template and a system instruction (a prompt task takes them).
    SCORES_RAW_DOCUMENTS = True
    # Why --num_fewshot cannot apply (the refusal's "because").
    NO_SHOTS_BECAUSE = "the task scores whole documents token by token; there is nothing to show as shots"

    @staticmethod
    def resolve_settings(metadata: dict | None) -> dict:
        raise NotImplementedError

    def __init__(self, config: dict | None = None):
        glue.install()  # before lm-eval reads the task's metrics or sends its requests
        cfg = dict(config or {})
        cfg.pop("class", None)  # the task factory passes the YAML's `class:` key through
        # every task of this package sends longctx_scores requests (the accuracy task too: prompt lengths)
        # the model simple_evaluate evaluates (None outside it): tasks take its tokenizer and max_length
        self.evaluated_model = glue.note_evaluated_model(str(cfg.get("task", type(self).__name__)))
        glue.forget_scoring(str(cfg.get("task", "")))  # a new run of this task: its record starts empty
        self.settings = self.resolve_settings(cfg.get("metadata"))
        # every hub resource of this load's tasks of the suite, checked at once before any is loaded
        preflight.check_once(self.SUITE_TASK_NAME, cfg.get("metadata"), glue.task_load_in_progress())
        if export_files.SETTING in self.settings:
            self.settings[export_files.SETTING] = export_files.parse_setting(self.settings[export_files.SETTING])
        options = glue.prompt_options()
        if options is not None and self.SCORES_RAW_DOCUMENTS:  # before lm-eval looks a chat template up
            run_options.check_prompt_options(str(cfg.get("task", "")), *options)
        # a YAML's own num_fewshot (--num_fewshot comes later, through set_config)
        run_options.check_num_fewshot(str(cfg.get("task", "")), cfg.get("num_fewshot"), self.NO_SHOTS_BECAUSE)
        super().__init__(config=cfg)
        if self.SCORES_PER_TOKEN:
            # Set after validation, which only accepts built-in types (also what DP padding counts).
            self.OUTPUT_TYPE = glue.REQUEST_TYPE
        if self.config.metadata is None:
            self.config.metadata = {}
        self.config.metadata[REQUEST_TYPE_KEY] = self.REQUEST_TYPE_NOTE  # the class's, whatever --metadata says
        self._record_settings()
        self._token_export = token_export.for_task(self)  # checks the folder before any model runs

    def _record_settings(self) -> None:
        raise NotImplementedError

    def metric_declarations(self) -> dict[str, glue.MetricDeclaration]:
        """Every metric the task reports, with its aggregation and direction: the one place they are declared."""
        raise NotImplementedError

    def declare(self, aggregation, metric: str, subset: bool = False) -> glue.MetricDeclaration:
        """``metric`` with its aggregation and the direction declared for it in metrics/directions.py (``subset``:
        scored on some documents only by design, e.g. one copy length's)."""
        return glue.declare(aggregation, directions.direction_of(self.SUITE_TASK_NAME, metric), subset)

    def aggregation(self):
        if self.predict_only:
            return super().aggregation()  # lm-eval's bypass
        return {name: d.aggregation for name, d in self.metric_declarations().items()}

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

    def _store_settings(self, record: dict) -> None:
        """Put what changes the numbers where the results JSON keeps it: configs.<task>.metadata."""
        if self.config.metadata is None:
            self.config.metadata = {}
        if token_export.enabled(self):  # a path only: the export changes no number
            record[export_files.SETTING] = self.settings[export_files.SETTING]
        self.config.metadata["longctx_settings"] = record

    def build_all_requests(self, **kwargs) -> None:
        if self.SCORES_RAW_DOCUMENTS:  # before any request is built (LongPPL's evaluator runs while building)
            run_options.check_prompt_options(
                str(self.config.task), kwargs.get("apply_chat_template", False), kwargs.get("system_instruction")
            )
        glue.build_requests_without_request_cache(self, super().build_all_requests, **kwargs)

    def _scoring_records(self) -> dict:
        """How this task's requests were scored (the engine's strategy per pass, dtype, model type), for the
        results record; tasks that run a second model (LongPPL's evaluator) add its record."""
        scoring = glue.scoring_of(str(getattr(self.config, "task", "")))
        return {"scoring": scoring if scoring is not None else NOTHING_SCORED}

    def dump_config(self) -> dict:
        """lm-eval's config dump, with how the requests were scored under ``longctx_settings.runtime``."""
        config = super().dump_config()
        metadata = config.get("metadata")
        record = metadata.get("longctx_settings") if isinstance(metadata, dict) else None
        if isinstance(record, dict):
            runtime = {**record.get("runtime", {}), **self._scoring_records()}
            config["metadata"] = {**metadata, "longctx_settings": {**record, "runtime": runtime}}
        return config

    def has_training_docs(self):
        return False

    def has_validation_docs(self):
        return False

    def has_test_docs(self):
        return True

    def test_docs(self):
        return self.dataset["test"]


def govreport_documents(settings: dict):
    """The GovReport selection named by the settings, as (DatasetDict with doc_id and text, provenance)."""
    import datasets

    s = settings
    docs = documents.load_govreport(
        dataset_path=s["dataset_path"],
        revision=s["dataset_revision"],
        decode_tokenizer=s["decode_tokenizer"],
        min_tokens=s["min_tokens"],
        max_tokens=s["max_tokens"],
        num_docs=s["num_docs"],
        data_files=s["data_files"],
    )
    if not docs.texts:
        raise ValueError("no documents matched the GovReport selection")
    dataset = datasets.DatasetDict(
        {"test": datasets.Dataset.from_dict({"doc_id": list(range(len(docs.texts))), "text": docs.texts})}
    )
    return dataset, docs.provenance
