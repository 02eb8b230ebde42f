#!/usr/bin/env python
"""Precompute LongPPL key-token spans: the same as ``lm-eval-longctx precompute-spans`` (lm_eval_longctx/precompute.py),
kept for checkouts and for ``accelerate launch scripts/precompute_key_spans.py ...``."""

import sys

from lm_eval_longctx.precompute import main

if __name__ == "__main__":
    sys.exit(main())
