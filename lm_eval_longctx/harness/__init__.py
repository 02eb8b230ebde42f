"""Harness glue layer: ``glue.py`` is the one module that touches lm-eval internals (with ``discovery.py``,
the start-up hook that lets lm-eval find the task YAMLs).

May import: lm-eval and every lower layer (engine, metrics, keytokens, data, basics). Only this package and
``tasks`` import lm-eval. This ``__init__`` stays empty: the start-up hook imports the package at every
interpreter start.
"""
