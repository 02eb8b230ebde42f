"""Running an audit's stages: each rung through lm-eval's own command line (``lm_eval run --tasks
retrieval_gain_map,forgetting_curve --model hf ...``), as a user runs the tasks, its command recorded; or, with
``--reuse``, a stage an earlier audit ran with identical scoring, copied from its folder.

A stage's key says what its numbers depend on: the model's weights, tokenizer and the config fields its scoring
reads, the documents, the stage's settings, the model arguments and the device type. Two audits of one checkpoint
whose configs differ only in ``max_position_embeddings`` share their stages when the model's RoPE does not read
that field (the default and linear types): the scoring is the same, only the claim differs.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import output_dirs
from ..data import checkpoints
from .plan import ANSWER_TOKENS, CURVE_TASK, MAP_TASK, QUERY_TOKENS, Plan, Rung
from .stage_files import FILES_KEY, verify_stage

TASKS = (MAP_TASK, CURVE_TASK)
RUNS_FOLDER = "runs"
# settings that let a sequence be scored, not how: left out of a stage's key
PERMISSIONS = ("allow_beyond_max_length",)
# config fields that name or date a checkpoint and never change a number
NAMING_FIELDS = ("_name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype")
# RoPE types whose frequencies do not depend on max_position_embeddings
ROPE_WITHOUT_MAX_POSITIONS = (None, "default", "linear")
# files that hold a checkpoint's weights or tokenizer (what its numbers depend on beside the config)
MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".model", ".tiktoken", ".json", ".txt", ".jinja")
NOT_SCORING_FILES = ("config.json", "generation_config.json", "conversion.json", output_dirs.MARKER)


def stage_metadata(rung: Rung, plan: Plan, corpus: Path, rules) -> dict:
    """The ``--metadata`` of a stage of L tokens: the map at the context length that fills L on the plan's documents,
    the forgetting curve at the copy length that fills L (its samples drawn with seed L, so a stage is the same in
    every audit)."""
    b = plan.budget
    return {
        "data_files": str(corpus),
        "num_docs": plan.docs,
        "context_lengths": [rung.context_length],
        "depths": list(b.depths),
        "anchors_per_cell": b.anchors_per_cell,
        "query_tokens": QUERY_TOKENS,
        "answer_tokens": ANSWER_TOKENS,
        **rules.metadata(),
        "lengths": [rung.copy_length],
        "samples_per_length": b.samples_per_length,
        "seed": rung.length,
        "allow_beyond_max_length": rung.beyond_max_length,
    }


def model_args_text(model_dir: Path, extra: dict) -> str:
    return ",".join([f"pretrained={model_dir}", *(f"{k}={v}" for k, v in extra.items())])


def lm_eval_argv(
    tasks, model_dir: Path, model_args: dict, metadata: dict, out: Path, device: str, batch, *more: str
) -> list:  # fmt: skip
    """The arguments of ``lm_eval run`` of ``tasks`` on the hf model at ``model_dir``, samples logged, then ``more``."""
    return [
        "run",
        "--tasks",
        ",".join(tasks),
        "--model",
        "hf",
        "--model_args",
        model_args_text(model_dir, model_args),
        "--device",
        device,
        "--batch_size",
        str(batch),
        "--metadata",
        json.dumps(metadata),
        "--output_path",
        str(out),
        "--log_samples",
        *more,
    ]


def harness_argv(model_dir: Path, extra_model_args: dict, metadata: dict, out: Path, device: str, batch: str) -> list:
    from ..harness.discovery import task_configs_dir

    return lm_eval_argv(
        TASKS, model_dir, extra_model_args, metadata, out, device, batch, "--include_path", task_configs_dir()
    )


def _rope_types(config: dict) -> set:
    cfg = config.get("text_config") or config
    found = set()
    for name in ("rope_scaling", "rope_parameters"):
        value = cfg.get(name)
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            found |= {v.get("rope_type", v.get("type")) for v in value.values()}
        elif isinstance(value, dict):
            found.add(value.get("rope_type", value.get("type")))
    return found or {None}


def scoring_config(config: dict) -> dict:
    """The config fields a model's numbers depend on: all but naming fields, and but ``max_position_embeddings``
    where the RoPE type does not read it."""
    out = {k: v for k, v in config.items() if k not in NAMING_FIELDS}
    if _rope_types(config) <= set(ROPE_WITHOUT_MAX_POSITIONS):
        out.pop("max_position_embeddings", None)
        if isinstance(out.get("text_config"), dict):
            out["text_config"] = {k: v for k, v in out["text_config"].items() if k != "max_position_embeddings"}
    return out


def model_fingerprint(model_dir: Path) -> dict:
    """What a local checkpoint's numbers depend on: the SHA-256 of each weight and tokenizer file, and the config
    fields its scoring reads (``scoring_config``)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    digests = checkpoints.folder_digests(model_dir, checkpoints.cache_root(), MODEL_FILE_SUFFIXES, recursive=False)
    files = {name: digest for name, digest in digests.items() if name not in NOT_SCORING_FILES}
    return {"files": files, "config": scoring_config(config)}


def stage_key(fingerprint: dict, metadata: dict, corpus_sha256: str, extra_model_args: dict, device: str) -> str:
    """The SHA-256 of everything a stage's numbers depend on."""
    from importlib import metadata as package_metadata

    settings = {k: v for k, v in metadata.items() if k not in PERMISSIONS and k != "data_files"}
    content = {
        "model": fingerprint,
        "settings": settings,
        "documents_sha256": corpus_sha256,
        "model_args": {k: v for k, v in sorted(extra_model_args.items())},
        "device_type": device.split(":", 1)[0],
        "versions": {name: package_metadata.version(name) for name in ("lm_eval", "lm_eval_longctx")},
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Stage:
    """One stage as run (or reused): its rung, key, results file (relative to the audit folder), command, times, and
    the SHA-256 and size of each file it wrote (``stage_files``)."""

    rung: Rung
    key: str
    results_file: str
    command: str
    wall_seconds: float
    cpu_seconds: float
    estimated_seconds: float
    tokens_estimated: int
    reused_from: str | None = None
    files: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {
            "length": self.rung.length,
            "fraction_of_window": self.rung.fraction,
            "context_length": self.rung.context_length,
            "copy_length": self.rung.copy_length,
            "beyond_max_length": self.rung.beyond_max_length,
            "key": self.key,
            "results_file": self.results_file,
            "command": self.command,
            "wall_seconds": self.wall_seconds,
            "cpu_seconds": self.cpu_seconds,
            "estimated_seconds": self.estimated_seconds,
            "tokens_estimated": self.tokens_estimated,
            **({"reused_from": self.reused_from} if self.reused_from else {}),
            FILES_KEY: dict(self.files),
        }


def command_text(argv: list[str]) -> str:
    return "lm_eval " + shlex.join(argv)


REUSE_WAY_OUT = "Give another earlier audit to --reuse, or leave --reuse out to run every stage"


def earlier_stages(folder: Path) -> dict[str, tuple[Path, dict]]:
    """The stages of an earlier audit in ``folder`` by key: (its results file, its record), every file of each
    verified against the hashes its audit.json records (``stage_files.verify_stage``) before any is copied."""
    from .verdict import AUDIT_JSON, AuditRecordError, read_audit

    where = folder / AUDIT_JSON
    record = read_audit(where)
    found = record.get("stages", [])
    if not isinstance(found, list):
        raise AuditRecordError(f'{where}: "stages" is not a list; give another earlier audit to --reuse')
    out = {}
    for stage in found:
        path = verify_stage(folder, stage, f"--reuse {where}", REUSE_WAY_OUT)
        if not isinstance(stage.get("key"), str):
            raise AuditRecordError(f'{where}: a stage without its "key"; give another earlier audit to --reuse')
        out[stage["key"]] = (path, stage)
    return out


def copy_stage(results_file: Path, into: Path) -> Path:
    """Copy an earlier stage's results file, its samples and its pictures into ``into``; return the copied results
    file."""
    from .stage_files import written_with

    into.mkdir(parents=True, exist_ok=True)
    for path in written_with(results_file):
        shutil.copy2(path, into / path.name)
    return into / results_file.name
