"""Scoring engine layer: per-token log-probs of a causal LM over long sequences (``scoring.py``).

May import: torch, transformers, numpy and the basics (``errors``, ``settings``). Never lm-eval, and no other
layer of this package: it takes a model and token ids.
"""
