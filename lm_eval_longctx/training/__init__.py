"""Training layer: the LongCE loss (``longce.py``) for fine-tuning.

May import: torch, the engine layer and the basics. Never lm-eval.
"""
