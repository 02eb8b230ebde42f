"""Metrics layer: pure functions of per-token arrays (``per_token.py``) and of the retrieval-gain map
(``gain_map.py``).

May import: numpy and the basics (``errors``, ``settings``). No model, no torch, no lm-eval.
"""
