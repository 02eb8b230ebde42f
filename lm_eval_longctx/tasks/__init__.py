"""Harness task classes (ConfigurableTask subclasses, one module per task with its settings declaration,
``SETTINGS``; ``base.py`` what they share; ``declarations.py`` the settings blocks several tasks take). Building a task calls ``harness.contacts.install()``; importing a
module changes nothing in lm-eval.

May import: lm-eval (the task API), the engine, metrics, keytokens, data, harness and training layers, the basics.
Never the report layer: the pictures are hooked in from above (``lm_eval_longctx/suite.py``).
"""
