"""The audit: does a checkpoint use the context window its config claims? (``lm-eval-longctx audit``).

``inputs.py`` checks every flag before a model loads; ``plan.py`` reads the claimed window and lays out the lengths
(a ladder relative to it), the documents and the cost; ``stages.py`` runs each length through ``lm_eval`` as a user
would, shortest first, and reuses a stage an earlier audit ran with identical scoring; ``stage_files.py`` records
and verifies each stage's files; ``verdict.py`` turns the stages' logged samples into effective lengths with
bootstrap intervals and the verdict; ``ruler.py`` runs RULER's needle tasks beside it (``--cross-check ruler``);
``command.py`` is the command line. The profile files (a checkpoint's card, its GGUF source, what the audit must
find) are read by ``lm_eval_longctx/profiles``.

May import every layer below the command line except ``demo/``: it reads runs through ``report/run_samples.py``
and runs ``lm_eval`` through ``harness/evaluation.py``.
"""
