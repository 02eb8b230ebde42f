"""``lm-eval-longctx`` / ``python -m lm_eval_longctx``: helpers around the harness tasks."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lm-eval-longctx", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("tasks-dir", help="print the folder of the task YAMLs (the explicit lm_eval --include_path)")
    args = p.parse_args(argv)
    if args.command == "tasks-dir":
        from ._discovery import task_configs_dir

        print(task_configs_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
