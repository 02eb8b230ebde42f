"""Training layer: the LongCE loss (``longce.py``) for fine-tuning, and the retrieval-gain map measured inside a
training run (``context_use.py``: a plain function and a transformers ``TrainerCallback``).

May import: torch, transformers, the engine, metrics and data layers and the basics. Never lm-eval.
"""
