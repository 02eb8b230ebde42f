"""The audit: does a checkpoint use the context window its config claims? (``lm-eval-longctx audit``).

``plan.py`` reads the claimed window and lays out the lengths (a ladder relative to it), the documents and the cost;
``stages.py`` runs each length through ``lm_eval`` as a user would, shortest first, and reuses a stage an earlier
audit ran with identical scoring; ``verdict.py`` turns the stages' logged samples into effective lengths with
bootstrap intervals and the verdict; ``profiles.py`` reads the profile files (a checkpoint's card, its GGUF
source and what the audit must find); ``command.py`` is the command line.

May import every layer below the command line (as ``demo/`` does), and ``demo/`` itself.
"""
