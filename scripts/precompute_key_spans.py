#!/usr/bin/env python
"""Precompute LongPPL key-token spans with an evaluator model, once, for every later evaluation.

Writes ``slice_{i}.txt`` per document (the reference format: ``[start, end]`` pairs joined by ``;``)
and ``key_spans.json`` (the settings, the data hash, ``n_docs`` and the sha256 of every span file).
Use the folder with

    lm_eval --tasks longppl_govreport --model hf --model_args pretrained=MODEL \\
        --metadata '{"key_spans_dir": "DIR"}'

The folder is built in a temporary sibling (``.DIR.partial-*``) and renamed into place when every
document is done: a killed run leaves the previous folder (or none), never a mix. A non-empty
``--out`` is refused unless ``--overwrite`` is given, and even then only a key-span folder written
by this script is replaced.

One GPU (the paper's 8B evaluator):

    python scripts/precompute_key_spans.py --evaluator meta-llama/Llama-3.1-8B --out spans/llama31-8b

Several GPUs, one evaluator copy per GPU (documents shared out by rank):

    accelerate launch --num_processes 8 scripts/precompute_key_spans.py \\
        --evaluator meta-llama/Llama-3.1-8B --out spans/llama31-8b

An evaluator larger than one GPU (Qwen2-72B-Instruct, about 145 GB in bf16): its layers split over
the GPUs with ``--device auto``; with 8 x 80 GB, two ranks of 4 GPUs each (GPU i serves local rank
i % 2):

    accelerate launch --num_processes 2 scripts/precompute_key_spans.py \\
        --evaluator Qwen/Qwen2-72B-Instruct --device auto --out spans/qwen2-72b

``--evaluator-max-memory '{"0": "70GiB", "1": "70GiB", "cpu": "200GiB"}'`` caps each device (one process);
naming "cpu" allows CPU offload (slow), which is never used otherwise. See docs/scaling.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

from lm_eval_longctx import data, key_tokens, keyspans, span_folder
from lm_eval_longctx.tasks.longppl import DEFAULTS


def _process_state():
    """(rank, world size, barrier, broadcast) from accelerate: one process, or `accelerate launch`/torchrun."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1, (lambda: None), (lambda obj: obj)
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState(cpu=not torch.cuda.is_available())  # CPU ranks talk over gloo
    return state.process_index, state.num_processes, state.wait_for_everyone, \
        (lambda obj: broadcast_object_list([obj], from_process=0)[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--evaluator", default=DEFAULTS["evaluator"], help="HF model id or local path")
    p.add_argument("--evaluator-revision", default=None)
    p.add_argument("--out", required=True, help="output folder (must be new or empty, see --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a key-span folder previously written by this script, once the new one is complete")
    p.add_argument("--trunc-len", type=int, default=DEFAULTS["trunc_len"], help="K")
    p.add_argument("--sliding-window", type=int, default=DEFAULTS["sliding_window"], help="d")
    p.add_argument("--alpha", type=float, default=DEFAULTS["alpha"])
    p.add_argument("--beta", type=float, default=DEFAULTS["beta"])
    p.add_argument("--device", default=None,
                   help="cuda:N, cpu, or auto (layers split over this rank's GPUs); default: this rank's GPU, else CPU")
    p.add_argument("--evaluator-max-memory", "--max-memory", dest="max_memory", default=None,
                   help='with --device auto: JSON map of device -> size, e.g. \'{"0": "70GiB", "cpu": "200GiB"}\'')
    p.add_argument("--evaluator-dtype", "--dtype", dest="dtype", default=None,
                   help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--chunk-size", type=int, default=DEFAULTS["chunk_size"])
    p.add_argument("--batch-size", type=int, default=4, help="truncated windows per forward")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dataset-path", default=data.GOVREPORT_DATASET)
    p.add_argument("--dataset-revision", default=None)
    p.add_argument("--decode-tokenizer", default=data.GOVREPORT_DECODE_TOKENIZER)
    p.add_argument("--data-files", default=None, help="local json/jsonl/parquet instead of the hub dataset")
    p.add_argument("--num-docs", type=int, default=DEFAULTS["num_docs"])
    args = p.parse_args(argv)

    out = Path(args.out)
    # every check before any model runs (each rank sees the same files, so all refuse alike)
    span_folder.check_output_folder(out, args.overwrite)
    max_memory = key_tokens.parse_max_memory(args.max_memory)
    if max_memory is not None and args.device != "auto":
        p.error("--evaluator-max-memory applies to --device auto only")
    for name in ("trunc_len", "sliding_window", "chunk_size", "batch_size", "num_docs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    rank, world, barrier, broadcast = _process_state()

    docs = data.load_govreport(dataset_path=args.dataset_path, revision=args.dataset_revision,
                               decode_tokenizer=args.decode_tokenizer, num_docs=args.num_docs,
                               data_files=args.data_files)
    device = args.device or key_tokens.default_evaluator_device()
    dtype = key_tokens.evaluator_dtype_name(device, args.dtype)
    model, tok = key_tokens.load_evaluator(args.evaluator, revision=args.evaluator_revision, dtype=dtype,
                                           device=device, max_memory=max_memory,
                                           trust_remote_code=args.trust_remote_code)

    partial = broadcast(str(span_folder.new_partial_folder(out)) if rank == 0 else None)
    try:
        mine = range(rank, len(docs.texts), world)  # round robin: long and short documents spread evenly
        n_empty = 0
        for i in mine:
            scores = key_tokens.score_text(model, tok, docs.texts[i], args.trunc_len, args.sliding_window,
                                           chunk_size=args.chunk_size, batch_size=args.batch_size)
            spans = key_tokens.judge_from_scores(scores, args.alpha, args.beta).spans
            keyspans.write_span_file(Path(partial) / f"slice_{i}.txt", spans)  # written aside, then renamed
            n_empty += not spans
            print(f"[rank {rank}] document {i}: {len(scores.token_ids)} evaluator tokens, {len(spans)} key spans",
                  file=sys.stderr)
        barrier()  # every rank's share is on disk
        if rank == 0:
            manifest = {
                "format": keyspans.MANIFEST_FORMAT,
                "evaluator": args.evaluator,
                "evaluator_fingerprint": key_tokens.model_fingerprint(args.evaluator, model),
                "evaluator_dtype": dtype,
                "trunc_len": args.trunc_len, "sliding_window": args.sliding_window, "alpha": args.alpha,
                "beta": args.beta,
                "span_algorithm_version": key_tokens.SPAN_ALGORITHM_VERSION,
                **docs.provenance,
                "n_docs": len(docs.texts),
                "slice_sha256": span_folder.slice_checksums(partial, len(docs.texts)),
            }
            span_folder.write_json_atomically(Path(partial) / keyspans.MANIFEST, manifest)
            span_folder.publish(partial, out, args.overwrite)
            print(f"wrote {len(docs.texts)} span files to {out} ({world} process(es))", file=sys.stderr)
    except BaseException:
        if rank == 0 and Path(partial).exists():  # a folder this run created: nothing of the user's is in it
            shutil.rmtree(partial, ignore_errors=True)
        raise
    if n_empty:
        print(f"[rank {rank}] {n_empty} of its documents have no key tokens", file=sys.stderr)
    barrier()  # no rank reports success before the folder is in place
    return 0


if __name__ == "__main__":
    sys.exit(main())
