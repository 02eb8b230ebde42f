"""Every input of ``lm-eval-longctx audit``, checked once, before any model loads or any file is written: the
flags of a new audit, of ``--from-run`` and of ``--reuse`` go through the same checks, and each refusal names the
flag, key or folder and the way out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .plan import BUDGETS

DEFAULT_BUDGET = "ci"
DEFAULT_DOCUMENTS = "embedded"
DEFAULT_BATCH_SIZE = "1"
# the most documents per length an audit takes (each is read at every length)
MAX_DOCS = 10_000
# --model-args keys the audit sets from its own flags
FLAG_KEYS = {"pretrained": "--model", "device": "--device", "batch_size": "--batch-size"}
# flags that act only when an audit runs its stages: refused beside --from-run, which runs none
RUN_ONLY_FLAGS = {
    "model": "--model",
    "model_args": "--model-args",
    "budget": "--budget",
    "docs": "--docs",
    "beyond": "--beyond",
    "all_lengths": "--all-lengths",
    "documents": "--documents",
    "reuse": "--reuse",
    "device": "--device",
    "batch_size": "--batch-size",
    "cross_check": "--cross-check",
    "ruler_samples": "--ruler-samples",
}
# the cross-checks an audit runs beside its own stages
CROSS_CHECKS = ("ruler",)
# RULER's samples of each task per length by budget (--ruler-samples); its builder makes 500 per task
RULER_SAMPLES = {"ci": 4, "full": 10}
MAX_RULER_SAMPLES = 500


class AuditInputError(ValueError):
    """An input of the audit that cannot be used: the message names the flag, key or folder and the way out."""


@dataclass(frozen=True)
class AuditInputs:
    """The audit's inputs once checked (``check``)."""

    out: Path
    from_run: bool
    model: str | None
    model_args: dict
    window: int | None
    budget: str
    docs: int | None
    documents: str
    device: str
    batch_size: str
    reuse: Path | None
    cross_check: str | None = None
    ruler_samples: int = 0


def model_args_keys() -> set[str]:
    """The --model-args keys the audit passes on: those lm-eval's hf backend takes, less those its flags set."""
    from ..harness.evaluated_model import hf_model_args_keys

    return hf_model_args_keys() - set(FLAG_KEYS)


def check_dtype(value: str) -> None:
    import torch

    name = str(value).replace("torch.", "")
    if name != "auto" and not isinstance(getattr(torch, name, None), torch.dtype):
        raise AuditInputError(
            f"--model-args dtype={value}: not a torch dtype; give auto, float32, bfloat16 or float16 (any torch "
            "dtype name)"
        )


def parse_model_args(text: str | None) -> dict:
    """``--model-args k=v,k=v`` as lm-eval's --model_args takes them, each key one the hf backend takes and each
    value it reads checked (``pretrained``, ``device`` and ``batch_size`` come from the audit's own flags).

    Example:
        >>> from lm_eval_longctx.audit.inputs import parse_model_args
        >>> parse_model_args("dtype=float32,max_length=4096")
        {'dtype': 'float32', 'max_length': '4096'}
    """
    out: dict = {}
    for item in filter(None, (text or "").split(",")):
        if "=" not in item:
            raise AuditInputError(f"--model-args {text!r}: {item!r} is not key=value")
        key, value = (part.strip() for part in item.split("=", 1))
        if key in FLAG_KEYS:
            raise AuditInputError(f"--model-args {key}=: give it with {FLAG_KEYS[key]}, not in --model-args")
        if key in out:
            raise AuditInputError(f"--model-args: {key} is given twice")
        out[key] = value
    if not out:
        return out
    unknown = sorted(set(out) - model_args_keys())
    if unknown:
        raise AuditInputError(
            f"--model-args {', '.join(unknown)}: not an argument of lm-eval's hf backend (--model hf) nor a "
            f"from_pretrained keyword it passes on; known: {', '.join(sorted(model_args_keys()))}"
        )
    if "dtype" in out:
        check_dtype(out["dtype"])
    if "max_length" in out:
        positive_int(out["max_length"], "--model-args max_length")
    return out


def positive_int(value, flag: str, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as a whole number from ``minimum`` to ``maximum``; anything else is an error naming ``flag``.

    Example:
        >>> from lm_eval_longctx.audit.inputs import positive_int
        >>> positive_int("4096", "--window")
        4096
    """
    try:
        number = int(str(value).strip())
    except ValueError:
        raise AuditInputError(f"{flag} {value!r}: not a whole number") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise AuditInputError(f"{flag} {value}: must be a whole number {bound}")
    return number


def check_batch_size(value: str) -> str:
    """A whole number of sequences per forward, or lm-eval's ``auto`` / ``auto:N``."""
    text = str(value).strip()
    if text == "auto":
        return text
    if text.startswith("auto:"):
        positive_int(text[len("auto:") :], "--batch-size auto:N")
        return text
    try:
        return str(positive_int(text, "--batch-size"))
    except AuditInputError:
        raise AuditInputError(
            f"--batch-size {value!r}: give a whole number of sequences per forward (1 or more), auto or auto:N"
        ) from None


def check_device(value: str | None) -> str:
    """The device the stages run on: ``cpu``, ``cuda`` / ``cuda:N`` or ``mps``, refused when torch sees no such
    device; the default is ``cuda`` when torch sees one, else ``cpu``."""
    import torch

    cuda = torch.cuda.is_available()
    if value is None:
        return "cuda" if cuda else "cpu"
    text = str(value).strip()
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return text
    if kind == "cuda":
        if not cuda:
            raise AuditInputError(f"--device {text}: torch sees no CUDA device here; run with --device cpu")
        if index:
            n = positive_int(index, f"--device {text}: the index", minimum=0)
            if n >= torch.cuda.device_count():
                raise AuditInputError(
                    f"--device {text}: torch sees {torch.cuda.device_count()} CUDA device(s), numbered from 0"
                )
        return text
    if kind == "mps" and not index:
        if not torch.backends.mps.is_available():
            raise AuditInputError("--device mps: torch sees no MPS device here; run with --device cpu")
        return text
    raise AuditInputError(f"--device {text}: not a device; give cpu, cuda, cuda:N or mps")


def check_rules(fraction: float, threshold: float) -> None:
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise AuditInputError(f"--fraction {fraction}: must lie in [0, 1]")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise AuditInputError(f"--threshold {threshold}: must be a finite number of nats, 0 or more")


def check_reuse(reuse: str | None, out: Path) -> Path | None:
    """The earlier audit's folder ``--reuse`` names: an audit folder, not OUT itself."""
    if reuse is None:
        return None
    from .verdict import AUDIT_JSON

    folder = Path(reuse).expanduser()
    if not (folder / AUDIT_JSON).is_file():
        raise AuditInputError(f"--reuse {reuse}: no {AUDIT_JSON} there; give the folder of an earlier audit")
    if folder.resolve() == out.resolve():
        raise AuditInputError(
            f"--reuse {reuse} is OUT itself: its stages are where the audit writes. Give the earlier audit's folder "
            "and a new OUT"
        )
    return folder.resolve()


def check(args) -> AuditInputs:
    """Check every flag of the audit (an ``argparse`` namespace of ``command.add_arguments``) without loading a
    model or writing a file."""
    out = Path(args.out).expanduser()
    check_rules(args.fraction, args.threshold)
    window = None if args.window is None else positive_int(args.window, "--window")
    if args.from_run:
        given = [flag for name, flag in RUN_ONLY_FLAGS.items() if getattr(args, name, None) not in (None, False)]
        if given:
            raise AuditInputError(
                f"{', '.join(given)}: --from-run judges the stages already in OUT again and runs none; leave "
                f"{'it' if len(given) == 1 else 'them'} out (or run a new audit without --from-run)"
            )
        return AuditInputs(out, True, None, {}, window, DEFAULT_BUDGET, None, DEFAULT_DOCUMENTS, "", "", None)
    if not args.model:
        raise AuditInputError("--model DIR is required (or --from-run to judge an earlier audit)")
    model = str(Path(args.model).resolve()) if Path(args.model).is_dir() else args.model
    if any(c in model for c in ",="):
        raise AuditInputError(f"--model {model}: a path with ',' or '=' cannot travel in lm-eval's --model_args")
    budget = args.budget or DEFAULT_BUDGET
    if budget not in BUDGETS:
        raise AuditInputError(f"--budget {budget}: known budgets are {sorted(BUDGETS)}")
    docs = None if args.docs is None else positive_int(args.docs, "--docs", minimum=2, maximum=MAX_DOCS)
    cross_check = getattr(args, "cross_check", None)
    given_samples = getattr(args, "ruler_samples", None)
    if cross_check is None and given_samples is not None:
        raise AuditInputError("--ruler-samples: give it with --cross-check ruler")
    if cross_check is not None:
        if cross_check not in CROSS_CHECKS:
            raise AuditInputError(f"--cross-check {cross_check}: known: {', '.join(CROSS_CHECKS)}")
        from . import ruler

        try:
            ruler.check_packages()
        except ruler.RulerError as err:
            raise AuditInputError(f"--cross-check ruler: {err}") from None
    samples = RULER_SAMPLES[budget] if given_samples is None else given_samples
    samples = positive_int(samples, "--ruler-samples", maximum=MAX_RULER_SAMPLES)
    return AuditInputs(
        out=out,
        from_run=False,
        model=model,
        model_args=parse_model_args(args.model_args),
        window=window,
        budget=budget,
        docs=docs,
        documents=args.documents or DEFAULT_DOCUMENTS,
        device=check_device(args.device),
        batch_size=check_batch_size(args.batch_size or DEFAULT_BATCH_SIZE),
        reuse=check_reuse(args.reuse, out),
        cross_check=cross_check,
        ruler_samples=samples if cross_check else 0,
    )
