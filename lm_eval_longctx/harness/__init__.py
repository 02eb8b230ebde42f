"""The harness layer: the one place that touches lm-eval internals. It knows no task.

``contacts.py`` lists every lm-eval callable it sets; ``discovery.py`` is the start-up hook that lets lm-eval find
the task YAMLs; ``evaluation.py`` is a ``simple_evaluate`` call as the tasks see it (the settings checked before the
model loads) and ``run_state.py`` its state; ``request_type.py`` and ``serving.py`` the request type and its serving
on the hf backend; ``evaluated_model.py`` the model, the checks that refuse what the engine cannot score and the
hf backend's arguments; ``aggregations.py`` the named aggregations and their bootstrap stderr; ``saving.py`` the
results files; ``notices.py`` the warnings the suite causes on purpose, said once in a line; ``lm_eval_tasks.py`` builds one of lm-eval's own tasks (the audit's RULER cross-check asks it whether
a length can be built).

May import: lm-eval and every lower layer (engine, metrics, keytokens, data, basics). Only this package and
``tasks`` import lm-eval. This ``__init__`` stays empty: the start-up hook imports the package at every
interpreter start.
"""
