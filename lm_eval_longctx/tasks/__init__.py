"""Harness task classes (thin ConfigurableTask subclasses, one module per task, ``base.py`` what they share) and
their settings declarations (``declarations.py``). Building a task calls ``harness.contacts.install()``; importing a
module changes nothing in lm-eval.

May import: lm-eval (the task API), the engine, metrics, keytokens, data, harness and training layers, the basics.
Never the report layer: the pictures are hooked in from above (``lm_eval_longctx/suite.py``).
"""
