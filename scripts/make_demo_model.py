#!/usr/bin/env python
"""Build the embedded demo model (or a known-answer variant) on CPU: tokenizer + copy circuit + training.

    python scripts/make_demo_model.py                       # regenerate the shipped model
    python scripts/make_demo_model.py --variant short OUT   # a validation variant (codes 6 RoPE pairs faster)

The shipped checkpoint lives in lm_eval_longctx/demo/assets/model (float16 safetensors, tokenizer,
recipe.json with the recipe, seed, parameter count and training time). The recipe is
lm_eval_longctx.demo.model.Recipe with DEMO_RECIPE; see that module for the circuit. Training text is
the standard library's docstrings and sources (the demo evaluates on pydoc_data.topics, held out).
Run with 2 threads on a 2-core machine: about 7 minutes on idle cores (the shipped model: 429 s of training).
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from lm_eval_longctx.demo import model


def is_demo_model_folder(path: Path) -> bool:
    """A folder this script (or demo_model.make_model) wrote: a config and our recipe record."""
    try:
        record = json.loads((path / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "recipe" in record and (path / "config.json").is_file()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "out",
        nargs="?",
        default=str(model.packaged_model_dir()),
        help="output folder (default: the shipped model's folder)",
    )
    p.add_argument(
        "--variant",
        choices=sorted(model.VARIANTS),
        default=None,
        help="a known-answer variant with the shipped tokenizer instead of the demo model",
    )
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()) and not is_demo_model_folder(out):
        print(
            f"error: {out} is not empty and holds no demo model (recipe.json + config.json): it will not be "
            "replaced (nothing there was changed). Choose a new or empty folder.",
            file=sys.stderr,
        )
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.variant:
        record = model.build_variant(args.variant, args.out, steps=args.steps)
    else:
        overrides = {} if args.steps is None else {"steps": args.steps}
        recipe = model.Recipe(**{**model.DEMO_RECIPE, **overrides})
        # build beside, then swap: a failed run leaves the old model intact; only a demo-model folder
        # (checked above) is replaced
        with tempfile.TemporaryDirectory(dir=out.parent if out.parent.is_dir() else None) as tmp:
            record = model.make_model(Path(tmp) / "model", recipe)
            if out.exists():
                old = Path(tmp) / "previous"
                out.rename(old)
            shutil.move(str(Path(tmp) / "model"), str(out))
    print(json.dumps({k: v for k, v in record.items() if k != "recipe"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
