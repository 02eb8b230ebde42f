"""Training-step time of LongCE vs plain cross-entropy on a tiny random Llama (nothing downloaded).

One step = forward + loss + backward + SGD step, on one batch of --batch-size sequences of
--seq-len tokens. Plain CE is ``F.cross_entropy`` on the logits; LongCE adds the no-grad short pass
over the reference windows (K = --trunc-len, d = --stride; ``lm_eval_longctx.training.longce``). The short
pass forwards about (L - K) / d windows of K + d tokens each, i.e. roughly (L - K)(K + d) / (d L)
times the long pass's tokens, without backward: the paper reports about +80% step time at
K = 4096, d = 1024 (L = 32k). Reports the best of --repeats timed steps (after --warmup untimed ones)
and the ratio LongCE / CE.

    HF_HUB_OFFLINE=1 /work/venv/bin/python scripts/bench_longce.py --seq-len 1024 --trunc-len 128 --stride 32
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lm_eval_longctx.demo.offline import random_llama  # noqa: E402
from lm_eval_longctx.training.longce import LongCELoss  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--trunc-len", type=int, default=128)
    p.add_argument("--stride", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--short-batch-size", type=int, default=8)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = (
        random_llama(
            args.vocab,
            seed=0,
            hidden_size=args.hidden_size,
            num_hidden_layers=args.layers,
            max_position_embeddings=max(args.seq_len, 16),
        )
        .to(args.device)
        .train()
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, args.vocab, (args.batch_size, args.seq_len), generator=g).to(args.device)
    longce = LongCELoss(trunc_len=args.trunc_len, stride=args.stride, short_batch_size=args.short_batch_size)

    def ce_loss(logits):
        return F.cross_entropy(logits[:, :-1].float().reshape(-1, args.vocab), ids[:, 1:].reshape(-1))

    def step(loss_fn):
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        loss_fn(logits).backward()
        opt.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    paths = {"ce": ce_loss, "longce": lambda logits: longce(model, logits, ids)}
    times = {k: [] for k in paths}
    for _ in range(args.warmup):
        for fn in paths.values():
            step(fn)
    for _ in range(args.repeats):  # interleaved, so load changes hit both paths alike
        for name, fn in paths.items():
            t0 = time.perf_counter()
            step(fn)
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    result = {
        "device": args.device,
        "seq_len": args.seq_len,
        "trunc_len": args.trunc_len,
        "stride": args.stride,
        "batch_size": args.batch_size,
        "ce_step_s": best["ce"],
        "longce_step_s": best["longce"],
        "ratio": best["longce"] / best["ce"],
    }
    print(json.dumps(result))
    print(
        f"LongCE / CE step time: {result['ratio']:.2f}x (+{100 * (result['ratio'] - 1):.0f}%)  "
        f"[CE {best['ce'] * 1e3:.1f} ms, LongCE {best['longce'] * 1e3:.1f} ms]"
    )
    return result


if __name__ == "__main__":
    main()
