#!/usr/bin/env python
"""Regenerate (or, with --check, verify) the settings tables in README.md and docs/**/*.md from the
settings declarations (lm_eval_longctx/tasks/declarations.py, lm_eval_longctx/training/longce.py), and the
support table of docs/support.md from the engine's declaration (lm_eval_longctx/engine/support.py).

    python scripts/settings_tables.py          # rewrite the tables in place
    python scripts/settings_tables.py --check  # exit 1 when a table differs from its declaration
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lm_eval_longctx.engine.support import render_support_table  # noqa: E402
from lm_eval_longctx.tasks.declarations import render_settings_tables  # noqa: E402


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    stale = []
    for path in documents():
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        new = render_support_table(render_settings_tables(text))
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'updated'}: {path.relative_to(ROOT)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
