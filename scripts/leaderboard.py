#!/usr/bin/env python
"""Collect lm-eval results JSONs into one leaderboard table (Markdown and CSV).

Same as `lm-eval-longctx leaderboard ...` (see docs/tools/report-tools.md); `--help` lists the options.
"""

import sys
from pathlib import Path

try:
    from lm_eval_longctx.cli import main
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lm_eval_longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(["leaderboard", *sys.argv[1:]]))
