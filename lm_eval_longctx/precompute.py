"""Precompute LongPPL key-token spans with an evaluator model, once, for every later evaluation.

Writes ``slice_{i}.txt`` per document (the reference format: ``[start, end]`` pairs joined by ``;``)
and ``key_spans.json`` (how they were made: evaluator identity, K, d, alpha, beta; the texts' and
files' SHA-256, so a changed or foreign file is detected). Use the folder with

    lm_eval --tasks longppl_govreport --model hf --model_args pretrained=MODEL \\
        --metadata '{"key_spans_dir": "DIR"}'

Example (the paper's evaluator, on a GPU):

    lm-eval-longctx precompute-spans --evaluator meta-llama/Llama-3.1-8B --out spans/llama31-8b

The folder appears whole or not at all: everything is written into a fresh folder beside OUT, which
is renamed into place at the end. A non-empty OUT is refused unless --overwrite is given and it is a
span folder written by this command holding nothing else (a file it did not write is never deleted);
the old folder is then replaced only after the new one is done. A second run writing the same OUT at
the same time fails at once (a lock beside OUT), and a folder that appears at OUT meanwhile is never
replaced.

Several GPUs: `accelerate launch --num_processes N -m lm_eval_longctx precompute-spans ...` shares the
documents out by rank (each rank its own evaluator: its GPU, or with --device auto its share of the
GPUs, GPU i for local rank i % N); rank 0 writes the folder once every rank is done. The route for an
evaluator larger than one GPU (Qwen2-72B-Instruct, about 145 GB in bf16, on 8 x 80 GB):

    accelerate launch --num_processes 2 -m lm_eval_longctx precompute-spans \\
        --evaluator Qwen/Qwen2-72B-Instruct --device auto --out spans/qwen2-72b

See docs/scaling.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import output_dirs
from .settings import add_arguments

SETTING_OPTIONS = [
    "evaluator",
    "evaluator_revision",
    "trunc_len",
    "sliding_window",
    "alpha",
    "beta",
    "evaluator_dtype",
    "long_pass",
    "chunk_size",
    "evaluator_trust_remote_code",
    "dataset_path",
    "dataset_revision",
    "decode_tokenizer",
    "data_files",
    "num_docs",
    "min_tokens",
    "max_tokens",
    "evaluator_max_memory",
]


class OutputFolderError(ValueError):
    """An --out folder this command may not write or replace; nothing there was changed."""


PURPOSE = "precompute-spans run"


def check_output(out: Path, overwrite: bool) -> None:
    """``out`` may be written: it does not exist, or is an empty folder, or (``overwrite``) a span folder this
    command wrote that holds nothing else (its slice files, manifest and marker): a file it did not write is never
    deleted."""
    from .keytokens import span_files, spans_to_tokens

    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"{out} is a file, not a folder: give a new folder as --out")
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not overwrite:
        raise OutputFolderError(
            f"{out} is not empty; pass --overwrite to replace a span folder written by this command, or choose a "
            "new folder"
        )
    try:
        manifest = span_files.read_manifest(out)
    except spans_to_tokens.KeySpanFormatError:
        manifest = None
    if manifest is None and not output_dirs.is_ours(out):
        raise OutputFolderError(
            f"{out} holds no {span_files.MANIFEST} of this command: it is not replaced, even with --overwrite "
            "(nothing there was changed)"
        )
    foreign = sorted(p.name for p in out.iterdir() if not span_files.is_span_folder_file(p))
    if foreign:
        raise OutputFolderError(
            f"{out} also holds files this command did not write ({', '.join(foreign[:5])}"
            f"{' ...' if len(foreign) > 5 else ''}): it is not replaced, even with --overwrite (nothing there was "
            "changed). Move them out, or choose a new folder"
        )


def place(new: Path, out: Path, previous: Path, overwrite: bool) -> None:
    """Put the finished folder ``new`` at ``out`` in one rename. A folder that appeared at ``out`` meanwhile is
    never replaced (the rename fails on a non-empty folder); with ``overwrite``, the span folder there (checked
    again) is moved to ``previous`` first."""
    check_output(out, overwrite)
    if out.is_dir() and any(out.iterdir()):
        out.rename(previous)
    elif out.is_dir():
        out.rmdir()  # an empty folder (the rename below would replace it anyway)
    try:
        os.rename(new, out)  # fails when a non-empty folder or a file took the place
    except OSError as e:
        if previous.exists() and not out.exists():
            previous.rename(out)
        raise OutputFolderError(
            f"{out}: another process wrote it while this run computed ({e.strerror or e}); it was not replaced and "
            "this run's spans are not kept. Run again into a new folder"
        ) from None


def _process_state():
    """(rank, world size, barrier, broadcast) from accelerate: one process, or `accelerate launch`/torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1, (lambda: None), (lambda obj: obj)
    import torch
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState(cpu=not torch.cuda.is_available())  # CPU ranks talk over gloo
    return (
        state.process_index,
        state.num_processes,
        state.wait_for_everyone,
        (lambda obj: broadcast_object_list([obj], from_process=0)[0]),
    )


def add_options(p: argparse.ArgumentParser) -> None:
    from .tasks.declarations import task_declarations

    LONGPPL = task_declarations()["longppl_govreport"]  # the task whose key spans this precomputes

    p.add_argument("--out", required=True, help="output folder")
    add_arguments(p, LONGPPL, SETTING_OPTIONS)
    p.add_argument(
        "--device",
        default=None,
        help="cpu, cuda:N, or auto (device_map over this rank's GPUs); default: this rank's GPU "
        "(cuda:$LOCAL_RANK), else the CPU",
    )
    p.add_argument("--batch-size", type=int, default=4, help="truncated windows per forward")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a span folder this command wrote (refused when it holds any other file)",
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="lm-eval-longctx precompute-spans",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(p)
    return run(p.parse_args(argv))


def run(args) -> int:
    out = Path(args.out)
    try:
        check_output(out, args.overwrite)  # before anything is loaded: a refusal comes at once
    except OutputFolderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rank, world, barrier, broadcast = _process_state()
    with contextlib.ExitStack() as stack:
        refused = None
        if rank == 0:
            try:
                stack.enter_context(output_dirs.locked(out, PURPOSE))
                check_output(out, args.overwrite)  # again under the lock: another run may have written it meanwhile
            except (output_dirs.OutputBusyError, OutputFolderError) as e:
                refused = str(e)
        refused = broadcast(refused)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
        try:
            _compute(args, out, rank, world, barrier, broadcast)
        except OutputFolderError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


def _compute(args, out: Path, rank: int, world: int, barrier, broadcast) -> None:
    import torch

    from .data import documents
    from .keytokens import evaluator, span_files, text_scoring

    if args.device is None:
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu"

    docs = documents.load_govreport(
        dataset_path=args.dataset_path,
        revision=args.dataset_revision,
        decode_tokenizer=args.decode_tokenizer,
        num_docs=args.num_docs,
        min_tokens=args.min_tokens,
        max_tokens=args.max_tokens,
        data_files=args.data_files,
    )
    dtype = args.evaluator_dtype or (
        "bfloat16" if str(args.device).startswith(("cuda", "auto")) and torch.cuda.is_available() else "float32"
    )
    identity = evaluator.evaluator_identity(args.evaluator, args.evaluator_revision)
    max_length = evaluator.evaluator_max_length(identity)
    model, tok = evaluator.load_evaluator(
        identity,
        dtype=dtype,
        device=args.device,
        max_memory=args.evaluator_max_memory,
        trust_remote_code=args.evaluator_trust_remote_code,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(broadcast(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.") if rank == 0 else None))
    try:
        shard = tmp / "shard"  # every rank's span files, each written atomically
        for i in range(rank, len(docs.texts), world):  # round robin: long and short documents spread evenly
            request = evaluator.evaluator_request(
                args.trunc_len, args.sliding_window, args.chunk_size, args.batch_size, args.long_pass
            )
            scores = text_scoring.score_text(model, tok, docs.texts[i], request, max_length, evaluator=identity["name"])
            spans = evaluator.judge_from_scores(scores, args.alpha, args.beta).spans
            span_files.write_span_file(shard / f"slice_{i}.txt", spans)
            print(
                f"[rank {rank}] document {i}: {len(scores.token_ids)} evaluator tokens, {len(spans)} key spans",
                file=sys.stderr,
            )
        barrier()  # every rank's share is on disk
        if rank == 0:
            all_spans = [span_files.read_span_file(shard / f"slice_{i}.txt") for i in range(len(docs.texts))]
            manifest = {
                "evaluator": args.evaluator,
                "evaluator_identity": identity,
                "evaluator_dtype": dtype,
                "trunc_len": args.trunc_len,
                "sliding_window": args.sliding_window,
                "alpha": args.alpha,
                "beta": args.beta,
                "span_algorithm_version": evaluator.SPAN_ALGORITHM_VERSION,
                **docs.provenance,
            }
            new = output_dirs.claim(tmp / "spans", "key spans (lm-eval-longctx precompute-spans)")
            span_files.write_span_dir(new, all_spans, docs.texts, manifest)
            place(new, out, tmp / "previous", args.overwrite)  # the old span folder is dropped with tmp
            n_empty = sum(not s for s in all_spans)
            print(
                f"wrote {len(docs.texts)} span files to {out} ({n_empty} without key tokens, {world} process(es))",
                file=sys.stderr,
            )
    except BaseException:
        if rank == 0:
            previous = tmp / "previous"
            if previous.exists() and not out.exists():
                previous.rename(out)  # the old folder goes back: never lost with this run's folder
            shutil.rmtree(tmp, ignore_errors=True)  # this run's own files only
        raise
    barrier()  # no rank reports success before the folder is in place
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # this run's own folder (and the replaced span folder)


if __name__ == "__main__":
    sys.exit(main())
