"""The report card (``lm-eval-longctx report``) split by what it draws: ``runs.py`` (which runs, their labels and
steps), ``sections.py`` (the sections the results declare in ``longctx_report``), ``page.py`` (the page frame),
``tables.py`` (the numbers), ``settings_box.py`` (settings, and the box of what differs), ``pictures.py`` (the
drawers a section names, the trend charts), ``checkpoints.py`` (across checkpoints), ``viewer_part.py`` (the
key-token viewer), ``tool_pages.py`` (``gate --html``, ``leaderboard --html``) and ``report.py`` (the page).

May import what the report layer may: numpy, matplotlib (inside functions), the metrics and data layers, the
basics. It reads files only: no task module is imported, and no task is named.
"""
