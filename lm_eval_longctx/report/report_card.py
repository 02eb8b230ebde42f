"""``lm-eval-longctx report``: the long-context report card, one self-contained HTML page (inline CSS, pictures as
PNG data URIs, no script of its own, nothing fetched) from the results that ``lm_eval --output_path`` writes.

The page is built by the package :mod:`.card`: the runs (``card/runs.py``), the sections the results declare
(``card/sections.py``), the page frame (``card/page.py``), the tables of numbers (``card/tables.py``), the settings
and the box of what differs (``card/settings_box.py``), the pictures (``card/pictures.py``), the checkpoint section
(``card/checkpoints.py``), the key-token viewer (``card/viewer_part.py``), the gate's and leaderboard's pages
(``card/tool_pages.py``) and the page itself (``card/report.py``). This module keeps the entry points' old place.
"""

from __future__ import annotations

from .card.page import fmt, html_page, write_page
from .card.report import build_report_card, report_card_html
from .card.runs import CardRun, checkpoint_steps, load_runs, step_of
from .card.tool_pages import gate_page, leaderboard_page

__all__ = [
    "CardRun",
    "build_report_card",
    "checkpoint_steps",
    "fmt",
    "gate_page",
    "html_page",
    "leaderboard_page",
    "load_runs",
    "report_card_html",
    "step_of",
    "write_page",
]
