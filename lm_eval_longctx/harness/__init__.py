"""The harness layer: the one place that touches lm-eval internals. It knows no task.

``contacts.py`` lists every lm-eval callable it sets; ``discovery.py`` is the start-up hook that lets lm-eval find
the task YAMLs; ``evaluation.py`` holds the run state of a ``simple_evaluate`` call; ``requests.py`` and
``serving.py`` the request type and its serving on the hf backend; ``evaluated_model.py`` the model and the checks
that refuse what the engine cannot score; ``aggregations.py`` the named aggregations and their bootstrap stderr;
``saving.py`` the results files.

May import: lm-eval and every lower layer (engine, metrics, keytokens, data, basics). Only this package and
``tasks`` import lm-eval. This ``__init__`` stays empty: the start-up hook imports the package at every
interpreter start.
"""
