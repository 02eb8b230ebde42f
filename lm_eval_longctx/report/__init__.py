"""Report tools over results files: reading them (``results.py``), which files an input means (``runs.py``: one
rule for every tool), whether two runs were measured alike (``comparability.py``), the regression gate
(``gate.py``), the leaderboard (``leaderboard.py``), the correlation check (``correlate.py``), the paired
per-document test (``paired.py``), the token viewer (``viewer.py``), pictures (``pictures/``), the report card
(``card/``, the page in ``card/report.py``), text from files made safe for each output (``text.py``) and the
rule that no output is an input (``outputs.py``).

The layer reads files: what a task's report section holds, its metrics' directions and which export the viewer
shows come from the results and the manifests, never from a task module; no module here names a task.

May import: numpy, scipy, matplotlib (inside functions only, when a picture is drawn), yaml, the metrics
layer, the data layer (``data/export_files.py``: the per-token export's files) and the basics. No torch, no
transformers, no lm-eval: a results JSON is plain data.
"""
