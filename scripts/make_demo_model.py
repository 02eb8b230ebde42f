#!/usr/bin/env python
"""Build the embedded demo model (or a known-answer variant) on CPU: tokenizer + copy circuit + training.

    python scripts/make_demo_model.py                       # regenerate the shipped model
    python scripts/make_demo_model.py --variant short OUT   # a validation variant (rope_theta 1e4)

The shipped checkpoint lives in lm_eval_longctx/demo_assets/model (float16 safetensors, tokenizer,
recipe.json with the recipe, seed, parameter count and training time). The recipe is
lm_eval_longctx.demo_model.Recipe with DEMO_RECIPE; see that module for the circuit. Training text is
the standard library's docstrings and sources (the demo evaluates on pydoc_data.topics, held out).
Run with 2 threads on a 2-core machine: about 8 minutes (488-498 s measured for the variants).
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from lm_eval_longctx import demo_model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=str(demo_model.packaged_model_dir()),
                   help="output folder (default: the shipped model's folder)")
    p.add_argument("--variant", choices=sorted(demo_model.VARIANTS), default=None,
                   help="a known-answer variant with the shipped tokenizer instead of the demo model")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.variant:
        record = demo_model.build_variant(args.variant, args.out, steps=args.steps)
    else:
        overrides = {} if args.steps is None else {"steps": args.steps}
        recipe = demo_model.Recipe(**{**demo_model.DEMO_RECIPE, **overrides})
        # build beside, then replace: a failed run leaves the shipped model intact
        with tempfile.TemporaryDirectory() as tmp:
            record = demo_model.make_model(tmp, recipe)
            out = Path(args.out)
            if out.exists():
                shutil.rmtree(out)
            shutil.copytree(tmp, out)
    print(json.dumps({k: v for k, v in record.items() if k != "recipe"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
