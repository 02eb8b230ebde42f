#!/usr/bin/env python
"""Checkpoint regression gate over lm-eval results JSONs (exit 0 pass / 1 regression / 2 unusable input).

Same as `lm-eval-longctx gate ...` (see docs/tools/report-tools.md); `--help` lists the options.
"""

import sys
from pathlib import Path

try:
    from lm_eval_longctx.cli import main
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lm_eval_longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(["gate", *sys.argv[1:]]))
