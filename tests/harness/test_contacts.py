"""harness/contacts.py: the table of lm-eval callables this package sets is exactly what a run sets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx.harness import contacts

ROOT = Path(__file__).resolve().parents[2]


def _probe(code: str, hook: str = "1"):
    """Run ``code`` in a fresh interpreter (contacts set there never leak; ``hook``: LM_EVAL_LONGCTX_DISABLE_HOOK)
    and parse its last stdout line as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={"PATH": "", "HF_HUB_OFFLINE": "1", "LM_EVAL_LONGCTX_DISABLE_HOOK": hook},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# what lm_eval runs: its modules imported, then this package's hooks installed as on the CLI
SET_BY_A_RUN = """
import json, sys
import lm_eval.evaluator, lm_eval.evaluator_utils, lm_eval.tasks.manager
import lm_eval.loggers.evaluation_tracker, lm_eval.models.huggingface
from lm_eval_longctx.harness import contacts, discovery
discovery.install()
contacts.install()
print(json.dumps(sorted(contacts.replaced_callables())))
"""


@pytest.mark.integration
def test_the_table_lists_exactly_what_a_run_sets_on_lm_eval():
    found = {tuple(pair) for pair in _probe(SET_BY_A_RUN, hook="0")}
    assert found == {(c.owner, c.attribute) for c in contacts.CONTACTS}


def test_each_contact_says_why_and_is_named_once():
    pairs = [(c.owner, c.attribute) for c in contacts.CONTACTS]
    assert len(pairs) == len(set(pairs)) and all(len(c.why) > 20 for c in contacts.CONTACTS)


def test_the_architecture_page_lists_every_contact():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [f"{c.owner}.{c.attribute}" for c in contacts.CONTACTS if f"`{c.owner}.{c.attribute}`" not in page]
    assert not missing


@pytest.mark.integration
def test_install_is_idempotent_uninstall_puts_lm_eval_back_and_registrations_keep_builtins():
    code = """
import json
import lm_eval.evaluator, lm_eval.tasks.manager
from lm_eval.api.registry import get_aggregation, get_metric
from lm_eval_longctx.harness import aggregations, contacts
before = {(c.owner, c.attribute): getattr(contacts._owner(c.owner), c.attribute, None) for c in contacts.CONTACTS}
contacts.install()
first = {k: getattr(contacts._owner(k[0]), k[1]) for k in before}
contacts.install()
again = {k: getattr(contacts._owner(k[0]), k[1]) for k in before}
set_after_install = sorted(contacts.replaced_callables())
contacts.uninstall()
print(json.dumps({
    "idempotent": all(first[k] is again[k] for k in before),
    "all_set": [list(k) for k in before if first[k] is before[k]],
    "after_install": set_after_install,
    "after_uninstall": sorted(contacts.replaced_callables()),
    "restored": all(getattr(contacts._owner(k[0]), k[1], None) is before[k] for k in before),
    "builtins": [get_metric("acc") is not None, get_aggregation("mean") is not None],
    "ours": get_aggregation("token_weighted_perplexity") is aggregations.AGGREGATIONS["token_weighted_perplexity"],
}))
"""
    out = _probe(code)
    assert out["idempotent"] and out["all_set"] == [] and out["restored"]
    assert {tuple(pair) for pair in out["after_install"]} == {(c.owner, c.attribute) for c in contacts.CONTACTS}
    assert out["after_uninstall"] == []
    assert out["builtins"] == [True, True] and out["ours"]


@pytest.mark.integration
def test_importing_the_tasks_changes_nothing_in_lm_eval_building_one_does():
    """Importing the modules (as a script or the docs tables do) leaves lm-eval as it is; install(), which building
    a task of the suite calls, sets the contacts."""
    probe = (
        "from lm_eval.api.model import LM\n"
        "from lm_eval.models.huggingface import HFLM\n"
        "before = LM.__init__\n"
        "import lm_eval_longctx.suite, lm_eval_longctx.tasks.longppl, lm_eval_longctx.tasks.forgetting_curve\n"
        "imported = [hasattr(HFLM, 'longctx_scores'), LM.__init__ is before]\n"
        "from lm_eval_longctx.harness import contacts\n"
        "contacts.install()\n"
        "import json; print(json.dumps([imported, [hasattr(HFLM, 'longctx_scores'), LM.__init__ is before]]))\n"
    )
    assert _probe(probe) == [[False, True], [True, False]]


@pytest.mark.integration
def test_a_call_sets_only_what_it_needs_before_the_model_and_imports_no_backend():
    """What a simple_evaluate call sets before it builds the model (a run of other suites' tasks meets only this):
    the import- and call-stage contacts, without importing lm-eval's hf backend."""
    code = """
import json, sys
import lm_eval.evaluator, lm_eval.tasks.manager
from lm_eval_longctx.harness import contacts
contacts.install("call")
print(json.dumps([sorted(contacts.replaced_callables()), "lm_eval.models.huggingface" in sys.modules]))
"""
    found, backend_imported = _probe(code)
    expected = {(c.owner, c.attribute) for c in contacts.CONTACTS if c.stage in ("import", "call")}
    assert {tuple(pair) for pair in found} == expected and len(expected) == 3
    assert backend_imported is False


def test_the_only_private_lm_eval_names_read_are_those_the_architecture_page_lists():
    import re

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\| `(lm_eval\.[\w.]+)` \|", page))
    private = re.compile(r"from (lm_eval(?:\.\w+)*\._\w+) import ([\w, ]+)|\b(\w+)\.(_load_full_config)\b")
    found = set()
    for path in sorted((ROOT / "lm_eval_longctx").rglob("*.py")):
        for m in private.finditer(path.read_text(encoding="utf-8")):
            if m.group(1):
                found |= {f"{m.group(1)}.{name.strip()}" for name in m.group(2).split(",")}
            else:
                found.add("lm_eval.tasks._factory.TaskFactory._load_full_config")
    assert found == {
        "lm_eval.tasks._index.TaskIndex",
        "lm_eval.tasks._index.Kind",
        "lm_eval.tasks._factory.TaskFactory",
        "lm_eval.tasks._factory.TaskFactory._load_full_config",
    }
    assert found - {"lm_eval.tasks._factory.TaskFactory"} <= listed
