"""harness/contacts.py: the table of lm-eval callables this package sets is exactly what a run sets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx.harness import contacts

ROOT = Path(__file__).resolve().parents[2]

# what lm_eval runs: its modules imported, then this package's hooks installed as on the CLI
SET_BY_A_RUN = """
import json, sys
import lm_eval.evaluator, lm_eval.evaluator_utils, lm_eval.tasks.manager
import lm_eval.loggers.evaluation_tracker, lm_eval.models.huggingface
from lm_eval_longctx.harness import contacts, discovery, glue
discovery.install()
glue.install()
print(json.dumps(sorted(contacts.replaced_callables())))
"""


@pytest.mark.integration
def test_the_table_lists_exactly_what_a_run_sets_on_lm_eval():
    proc = subprocess.run(
        [sys.executable, "-c", SET_BY_A_RUN],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={"PATH": "", "HF_HUB_OFFLINE": "1", "LM_EVAL_LONGCTX_DISABLE_HOOK": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    found = {tuple(pair) for pair in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert found == {(c.owner, c.attribute) for c in contacts.CONTACTS}


def test_each_contact_says_why_and_is_named_once():
    pairs = [(c.owner, c.attribute) for c in contacts.CONTACTS]
    assert len(pairs) == len(set(pairs)) and all(len(c.why) > 20 for c in contacts.CONTACTS)


def test_the_architecture_page_lists_every_contact():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [f"{c.owner}.{c.attribute}" for c in contacts.CONTACTS if f"`{c.owner}.{c.attribute}`" not in page]
    assert not missing
