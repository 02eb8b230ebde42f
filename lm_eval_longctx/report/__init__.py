"""Report tools over results files: reading them (``results.py``), the regression gate (``gate.py``), the
leaderboard (``leaderboard.py``), the correlation check (``correlate.py``), the paired per-document test (``paired.py``), the token viewer (``viewer.py``), pictures (``pictures/``) and the report card (``report_card.py``).

May import: numpy, scipy, matplotlib (inside functions only, when a picture is drawn), yaml, the metrics
layer, the data layer (``data/export_files.py``: the per-token export's files) and the basics. No torch, no transformers, no
lm-eval: a results JSON is plain data.
"""
