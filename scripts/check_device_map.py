#!/usr/bin/env python
"""Check the engine on a model split by accelerate (``device_map``) against the same model in one piece.

A small random Llama is saved, then loaded twice: plainly on ``--device``, and with
``device_map="auto"`` over the visible GPUs (``load_evaluator(device="auto")``, what
``evaluator_device: auto`` and ``lm-eval-longctx precompute-spans --device auto`` use), its layers spread with
``--max-memory`` (default: a budget that forces a split: on one GPU, part of the layers are offloaded
to the CPU and run on the GPU). The long pass, the truncated pass and shared-prefix continuations
must agree (float32: 1e-4). Also reports where the logits of a chunk were produced and where they
came back: they must stay on the head's device (no copy of logits between devices).

    python scripts/check_device_map.py --device cuda            # a GPU machine (1 or more GPUs)
    python scripts/check_device_map.py --device cpu             # no GPU: everything on the CPU
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import benchkit  # noqa: E402  (scripts/benchkit.py: the benchmarks' shared kit; puts the checkout on sys.path)
import numpy as np
import torch

from lm_eval_longctx.engine import scoring  # noqa: E402
from lm_eval_longctx.keytokens import evaluator  # noqa: E402


def save_model(path: Path, layers: int, hidden: int, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # peaked predictions: the split and the plain model are not compared on near-uniform log-probs
    model = benchkit.peaked_llama(
        vocab, hidden, layers, 8192, seed=0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w3"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1", eos_token="w2", pad_token="w0").save_pretrained(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--max-memory", default=None, help='JSON, e.g. \'{"0": "2MiB", "cpu": "1GiB"}\'')
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    save_model(tmp / "m", layers=8, hidden=256, vocab=1024)
    plain, _ = evaluator.load_evaluator(
        evaluator.evaluator_identity(str(tmp / "m")), device=args.device, dtype="float32"
    )
    n_gpu = torch.cuda.device_count()
    max_memory = args.max_memory
    if max_memory is None and n_gpu:
        # about half of the weights on the GPUs, the rest offloaded to the CPU: a split on any machine
        per_gpu = max(sum(t.numel() * 4 for t in plain.parameters()) // (2 * n_gpu), 1)
        max_memory = {**{str(i): per_gpu for i in range(n_gpu)}, "cpu": "4GiB"}
    split, _ = evaluator.load_evaluator(
        evaluator.evaluator_identity(str(tmp / "m")), device="auto", dtype="float32", max_memory=max_memory
    )
    device_map = getattr(split, "hf_device_map", None)
    report = {
        "device": args.device,
        "gpus": n_gpu,
        "max_memory": max_memory,
        "device_map_values": sorted({str(v) for v in (device_map or {}).values()}),
        "hooked": getattr(split, "_hf_hook", None) is not None,
        "input_device": str(scoring.input_device(split)),
    }

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1024, (3000,), generator=g)
    conts = [torch.randint(3, 1024, (n,), generator=g) for n in (5, 40, 300)]
    diffs = {}
    a, b = scoring.score_long(plain, ids, chunk_size=512), scoring.score_long(split, ids, chunk_size=512)
    diffs["long"] = float(np.nanmax(np.abs(a.logprob - b.logprob)))
    a = scoring.score_truncated(plain, [ids], 1024, 256, batch_size=4)[0]
    b = scoring.score_truncated(split, [ids], 1024, 256, batch_size=4)[0]
    diffs["truncated"] = float(np.nanmax(np.abs(a.logprob - b.logprob)))
    a = scoring.score_continuations(plain, ids[:2000], conts, chunk_size=512)
    b = scoring.score_continuations(split, ids[:2000], conts, chunk_size=512)
    diffs["continuations"] = max(float(np.max(np.abs(x.logprob - y.logprob))) for x, y in zip(a, b))
    report["max_abs_diff"] = diffs

    # where the logits are produced and where the model returns them
    with torch.no_grad():
        head = split.get_output_embeddings()
        seen = {}

        def record(module, inputs, output):  # returns None: the output is left as it is
            seen["head_output"] = str(output.device)

        handle = head.register_forward_hook(record)
        out = split(input_ids=ids[:64].to(scoring.input_device(split))[None], logits_to_keep=8)
        handle.remove()
    report["logits_computed_on"] = seen["head_output"]
    report["logits_returned_on"] = str(out.logits.device)
    ok = max(diffs.values()) <= 1e-4 and report["logits_computed_on"] == report["logits_returned_on"]
    if n_gpu and not report["hooked"]:
        print("the model was not split (no accelerate hooks): give a smaller --max-memory", file=sys.stderr)
        ok = False
    report["ok"] = ok
    print(json.dumps(report, indent=2))
    return benchkit.finish(args.json, report, ok)


if __name__ == "__main__":
    sys.exit(main())
