"""The progress of a run through the harness: a bar per task in tokens forwarded, ticking inside a long request
(LongPPL's truncated windows, every step of a generation), whose total is what the engine forwarded (a generation
step counting as the tokens its time is worth)."""

from __future__ import annotations

import pytest

from lm_eval_longctx.harness import serving
from tests.harness_utils import run_task, write_docs

pytestmark = pytest.mark.integration


@pytest.fixture
def bars(monkeypatch):
    """Every task's progress bar made from now on."""
    made: list[serving.TokenProgress] = []

    class Recorded(serving.TokenProgress):
        def __init__(self, task_name, *args, **kwargs):
            super().__init__(task_name, *args, **kwargs)
            self.task_name = task_name
            made.append(self)

    monkeypatch.setattr(serving, "TokenProgress", Recorded)
    return made


def test_each_task_has_a_bar_in_tokens_that_ticks_inside_its_requests(bars, model_dirs, corpus_texts, tmp_path):
    docs = write_docs(tmp_path / "docs.jsonl", [t[:2000] for t in corpus_texts[:2]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 48, "sliding_window": 16, "alpha": 0.2}
    res = run_task("longppl_govreport", model_dirs["a"], md)
    [bar] = bars
    scoring = res["configs"]["longppl_govreport"]["metadata"]["longctx_settings"]["runtime"]["scoring"]
    assert bar.task_name == "longppl_govreport" and bar.total == bar.n == scoring["tokens_forwarded"]
    assert bar.n_requests == bar.requests_done == 4 and bar.updates > 2 * bar.n_requests  # windows tick one by one
    bars.clear()
    run_task("longeval_lines_acc", model_dirs["a"], {"num_lines": [3], "num_cases": 2})
    [bar] = bars
    # every step of each generation (100 new tokens at most), each counting as the tokens its time is worth; the
    # plan revised as they ran ends at what ran
    assert bar.updates > 10 * bar.n_requests and bar.total == bar.n
