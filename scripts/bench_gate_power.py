#!/usr/bin/env python
"""How often does the regression gate flag a regression of known size, and how often does it raise a false
alarm: the paired per-document test (``--log_samples`` output) against the unpaired stderr band.

Design (cheap: each model scores each document once; the gate decisions are then simulated on the scores):

* Document pool: the embedded offline corpus (``pydoc_data.topics``, ``embedded.py``) cut into documents of
  ``--chars-per-doc`` characters, each truncated to its first ``--tokens`` tokens of the demo tokenizer (shorter
  documents are dropped).
* Models: the packaged demo model (the baseline) and variants with multiplicative Gaussian noise on every weight
  matrix of the transformer blocks, ``w *= 1 + sigma * N(0, 1)`` (seeded). Each model scores every document once,
  in float32: per document (nll_sum, n_tokens), the values ``longppl_govreport``-style tasks log per document for
  a token-weighted perplexity.
* Size of a regression: the variant's perplexity over the whole pool relative to the baseline's.
* One gate decision: ``--n-docs`` documents drawn from the pool without replacement (an evaluation set), the
  corpus perplexity of both models on them, z = 1.96, tolerance 0 (the gate's defaults). Unpaired: regressed iff
  worse > z * sqrt(se_run^2 + se_base^2), each se a bootstrap over the documents (as the harness reports it,
  ``--se-resamples`` resamples). Paired: regressed iff the 95% CI of the change from
  :func:`lm_eval_longctx.report.paired.paired_bootstrap` (``--resamples``) lies above 0 (the gate's own function).
* False alarms: the same variant, but on each document the two models' values are put in random order (a fair
  coin per document and decision), so the runs differ document by document as much as the variant differs from
  the baseline while neither is worse in expectation; the share of decisions flagged "regressed" (one-sided:
  2.5% for a calibrated 95% two-sided CI). Two identical models are never flagged by either test (the paired
  CI is [0, 0]; the unpaired change is 0).

    python scripts/bench_gate_power.py                       # about 4-5 minutes on 2 shared CPU cores
    python scripts/bench_gate_power.py --sigmas 0.05 0.1 --trials 200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

try:
    from lm_eval_longctx.data import embedded_corpus as embedded
    from lm_eval_longctx.report import paired
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lm_eval_longctx.data import embedded_corpus as embedded
    from lm_eval_longctx.report import paired


def demo_model_dir() -> str:
    from importlib import resources

    return str(resources.files("lm_eval_longctx") / "demo" / "assets" / "model")


def score_pool(model, ids, batch_size: int) -> np.ndarray:
    """Per document (nll_sum, n_tokens) of the model, every document the same length (no padding)."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch_size):
            x = ids[i : i + batch_size]
            logits = model(x).logits[:, :-1].float()
            lp = torch.log_softmax(logits, dim=-1).gather(-1, x[:, 1:, None])[..., 0].double()
            out += [(-float(r.sum()), r.numel()) for r in lp]
    return np.asarray(out, dtype=np.float64)


def noisy_variant(model, state, sigma: float, seed: int):
    import torch

    model.load_state_dict(state)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2 and "embed" not in name and "lm_head" not in name:
                p.mul_(1 + sigma * torch.randn(p.shape, generator=g))
    return model


def twp(x):  # token-weighted perplexity of each row of a stack (rows, docs, 2)
    return paired._token_weighted_perplexity(x)


def bootstrap_se(x, rng, n_resamples: int) -> float:
    idx = rng.integers(0, len(x), size=(n_resamples, len(x)))
    return float(np.std(twp(x[idx]), ddof=1))


def decisions(run, base, n_docs, trials, z, resamples, se_resamples, seed, flip: bool):
    """Share of gate decisions that flag "regressed": (unpaired, paired)."""
    rng = np.random.default_rng(seed)
    flagged_unpaired = flagged_paired = 0
    for t in range(trials):
        pick = rng.choice(len(run), size=n_docs, replace=False)
        r, b = run[pick], base[pick]
        if flip:
            swap = rng.random(n_docs) < 0.5
            r, b = np.where(swap[:, None], b, r), np.where(swap[:, None], r, b)
        worse = float(twp(r[None])[0] - twp(b[None])[0])  # perplexity: lower is better
        noise = z * np.hypot(bootstrap_se(r, rng, se_resamples), bootstrap_se(b, rng, se_resamples))
        flagged_unpaired += worse > noise
        res = paired.paired_bootstrap(r, b, twp, False, z, resamples, seed=seed * 100003 + t, name="ppl")
        flagged_paired += res.low > 0
    return flagged_unpaired / trials, flagged_paired / trials


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sigmas",
        type=float,
        nargs="+",
        default=[0.05, 0.08, 0.1, 0.15, 0.2, 0.3],
        help="weight-noise sizes of the variants",
    )
    p.add_argument("--chars-per-doc", type=int, default=1500)
    p.add_argument("--tokens", type=int, default=256, help="tokens scored per document")
    p.add_argument("--n-docs", type=int, default=50, help="documents per gate decision (GovReport: 50)")
    p.add_argument("--trials", type=int, default=400, help="gate decisions per variant and test")
    p.add_argument("--resamples", type=int, default=2000, help="paired bootstrap resamples per decision")
    p.add_argument("--se-resamples", type=int, default=200, help="bootstrap resamples of each run's stderr")
    p.add_argument("--z", type=float, default=1.96)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    t0 = time.time()
    path = demo_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = [tok(d, add_special_tokens=True)["input_ids"] for d in embedded.embedded_documents(args.chars_per_doc)]
    ids = torch.tensor([x[: args.tokens] for x in ids if len(x) >= args.tokens])
    if len(ids) < args.n_docs:
        raise SystemExit(f"only {len(ids)} documents of >= {args.tokens} tokens; lower --tokens or --n-docs")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = score_pool(model, ids, args.batch_size)
    scores = {s: score_pool(noisy_variant(model, state, s, args.seed + 1), ids, args.batch_size) for s in args.sigmas}
    t_score = time.time() - t0
    base_ppl = float(twp(base[None])[0])

    print(
        f"pool: {len(ids)} documents x {args.tokens} tokens (embedded corpus); baseline perplexity "
        f"{base_ppl:.3f}; {len(args.sigmas) + 1} models scored in {t_score:.0f} s"
    )
    print(
        f"each decision: {args.n_docs} documents drawn from the pool, z = {args.z:g}, tolerance 0; "
        f"{args.trials} decisions per cell; paired bootstrap {args.resamples} resamples, unpaired stderr from "
        f"{args.se_resamples} bootstrap resamples per run"
    )
    print()
    print(
        "| weight noise sigma | pool perplexity change | unpaired: flagged | paired: flagged "
        "| unpaired: false alarms | paired: false alarms |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    t1 = time.time()
    draws = (args.n_docs, args.trials, args.z, args.resamples, args.se_resamples)
    for i, s in enumerate(args.sigmas):
        run = scores[s]
        change = float(twp(run[None])[0]) / base_ppl - 1
        power, null = (decisions(run, base, *draws, args.seed + 10 * i + 1 + flip, flip=flip) for flip in (False, True))
        print(
            f"| {s:g} | {change:+.2%} | {power[0]:.1%} | {power[1]:.1%} | {null[0]:.1%} | {null[1]:.1%} |", flush=True
        )
    print()
    print(
        f"(flagged: share of decisions where the gate says 'regressed'; false alarms: the same per-document "
        f"differences in random direction; simulation {time.time() - t1:.0f} s, total {time.time() - t0:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
