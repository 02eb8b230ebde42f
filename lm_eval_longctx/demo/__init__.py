"""Demo layer: the embedded demo model (``model.py``, checkpoint in ``assets/model``), the offline demo
(``run.py``), the known-answer validation (``known_answer.py``) and offline builders of tokenizers and
tiny random Llamas (``offline.py``).

May import: every layer of the package; lm-eval only through ``harness`` or the ``lm_eval`` command-line
entry point inside functions.
"""
