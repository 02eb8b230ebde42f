"""Scoring one text (``text_scoring.py``: the one path of the tasks, the evaluator and the precompute script) and
key tokens (LongPPL): character spans mapped to the evaluated model's tokens (``spans_to_tokens.py``),
span folders and their manifest (``span_files.py``), the evaluator model that chooses key tokens
(``evaluator.py``), its life over a run (``judge.py``: identity, span cache or model, release) and the
checksummed span cache (``cache.py``).

May import: the engine and metrics layers, data, the basics, numpy, torch, transformers, accelerate,
huggingface_hub. Never lm-eval.
"""
