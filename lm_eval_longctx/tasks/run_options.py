"""What lm-eval's run options do for these tasks: the ones they refuse, with the way out, and the seed notice.

lm-eval 0.4.13 (``simple_evaluate``) builds the tasks first and then applies some options through the Task API,
before any request is sent: ``--predict_only`` calls ``override_metric("bypass")``, ``--num_fewshot N`` calls
``set_config("num_fewshot", N)``, ``--seed`` (its fourth value, ``fewshot_random_seed``) calls
``set_fewshot_seed(seed)``; ``--apply_chat_template`` and ``--system_instruction`` arrive as arguments of
``build_all_requests``. ``tasks/base.py`` overrides those methods and calls the checks below. A task that scores raw
documents leaves the chat options out and records that it did (lm-eval's own perplexity tasks ignore them silently).
"""

from __future__ import annotations

import logging

from .. import errors

log = logging.getLogger("lm_eval_longctx")

# lm-eval's default fewshot_random_seed (lm_eval/defaults.py DEFAULT_OTHER_SEED; --seed's fourth value)
LM_EVAL_DEFAULT_FEWSHOT_SEED = 1234


class UnsupportedOptionError(ValueError):
    """An lm-eval option that a task cannot follow; refused before any request is sent."""


def check_num_fewshot(task_name: str, value, why_no_shots: str) -> None:
    """Refuse a number of shots other than 0: none of these tasks has examples to show as shots."""
    if value in (None, 0):
        return
    raise UnsupportedOptionError(
        f"{task_name}: --num_fewshot {value} does not apply: {why_no_shots}. Leave --num_fewshot out (or pass 0)."
    )


# longctx_settings.runtime.prompt_format of a task that scores raw documents: the chat options given, not applied
PROMPT_FORMAT_KEY = "prompt_format"
RAW_DOCUMENTS_WHY = (
    "the task scores raw documents token by token, as lm-eval's own loglikelihood_rolling tasks do (wikitext): a chat "
    "template or system text would change what is measured"
)


def prompt_options_not_applied(
    task_name: str, apply_chat_template: bool, system_instruction: str | None
) -> dict | None:
    """For a task that scores raw documents: the chat options given, which it leaves out (its documents stay raw),
    said once per task and options, as the record its results keep; None when none was given."""
    given = [
        flag
        for flag, on in (
            ("--apply_chat_template", bool(apply_chat_template)),
            ("--system_instruction", bool(system_instruction)),  # an empty one changes nothing
        )
        if on
    ]
    if not given:
        return None
    if errors.first_time(("prompt options not applied", task_name, tuple(given))):
        log.warning(
            "%s: %s not applied to its documents, which are scored raw (recorded in the results); a task that "
            "answers a prompt (longeval_lines) takes %s",
            task_name,
            " and ".join(given),
            "it" if len(given) == 1 else "them",
        )
    return {"given": given, "applied": False, "why": RAW_DOCUMENTS_WHY}


def note_lm_eval_seed(task_name: str, lm_eval_seed, task_seed: int | None) -> None:
    """One line when lm-eval's --seed was given and the task draws samples with its own seed, which lm-eval's
    seed does not change (the task's seed reproduces the same samples across lm-eval versions)."""
    if task_seed is None or lm_eval_seed is None or lm_eval_seed == LM_EVAL_DEFAULT_FEWSHOT_SEED:
        return
    log.warning(
        "%s: lm-eval's --seed (fewshot seed %s) does not change this task's samples: they are drawn with the "
        "task's own seed %s (recorded in the results' longctx_settings); change it with --metadata "
        "'{\"seed\": N}'.",
        task_name,
        lm_eval_seed,
        task_seed,
    )
