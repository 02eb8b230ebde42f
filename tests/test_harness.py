"""Harness behaviour: evaluator 'self', --use_cache, --cache_requests, other backends, lengths,
registrations, sharding."""

import math

import pytest

from lm_eval_longctx.engine import scoring as engine
from lm_eval_longctx.harness import glue as harness
from lm_eval_longctx.keytokens import text_scoring
from tests.harness_utils import run_task, write_docs
from tests.test_longppl_task import brute_force_doc, load

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


TASK = "longppl_govreport"
K, D = 40, 16


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    texts = [t[:1500] for t in corpus_texts[3:5]]
    return texts, write_docs(tmp_path_factory.mktemp("hdata") / "docs.jsonl", texts)


def md(docs, **kw):
    return {"data_files": docs[1], "trunc_len": K, "sliding_window": D, "alpha": 0.5, "beta": -10.0, **kw}


def test_evaluator_self_equals_brute_force(model_dirs, docs):
    res = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"))
    m = load(model_dirs["a"])
    rows = [brute_force_doc(t, m, m, K, D, 0.5, -10.0) for t in docs[0]]
    key_nll, n_key = sum(r[0] for r in rows), sum(r[1] for r in rows)
    assert n_key > 0
    r = res["results"][TASK]
    assert r["longppl,none"] == pytest.approx(math.exp(key_nll / n_key), rel=1e-5)
    assert r["ppl,none"] == pytest.approx(math.exp(sum(x[2] for x in rows) / sum(x[3] for x in rows)), rel=1e-5)
    assert res["configs"][TASK]["metadata"]["longctx_settings"]["key_source"] == "self"


def test_use_cache_serves_repeated_requests(model_dirs, docs, tmp_path, monkeypatch):
    first = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), use_cache=str(tmp_path / "cache"))

    def fail(*a, **k):
        raise AssertionError("scored again although --use_cache holds the result")

    monkeypatch.setattr(text_scoring, "score_text", fail)
    second = run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), use_cache=str(tmp_path / "cache"))
    assert second["results"][TASK]["longppl,none"] == first["results"][TASK]["longppl,none"]
    assert second["results"][TASK]["ppl,none"] == first["results"][TASK]["ppl,none"]


def test_cache_requests_never_replays_other_settings(model_dirs, docs, tmp_path, monkeypatch):
    monkeypatch.setenv("LM_HARNESS_CACHE_PATH", str(tmp_path / "reqcache"))
    run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), cache_requests=True)
    other = run_task(TASK, model_dirs["a"], md(docs, evaluator="self", trunc_len=24), cache_requests=True)
    fresh = run_task(TASK, model_dirs["a"], md(docs, evaluator="self", trunc_len=24))
    assert other["results"][TASK]["longppl,none"] == fresh["results"][TASK]["longppl,none"]
    assert other["configs"][TASK]["metadata"]["longctx_settings"]["trunc_len"] == 24


def test_other_backends_get_an_error_naming_the_supported_ones(model_dirs, docs):
    with pytest.raises(harness.UnsupportedModelError, match="--model hf"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self"), model="dummy", model_args={})


def test_longer_than_the_model_maximum_is_an_error_unless_asked(model_dirs, docs):
    # the paper's documents are read whole (by default they are cut at the model's window, unless beyond is asked)
    with pytest.raises(engine.ScoringError, match="longer than the model's maximum length 64"):
        run_task(TASK, model_dirs["a"], md(docs, evaluator="self", preset="paper"), model_args={"max_length": 64})
    ok = run_task(
        TASK, model_dirs["a"], md(docs, evaluator="self", allow_beyond_max_length=True), model_args={"max_length": 64}
    )
    assert math.isfinite(ok["results"][TASK]["ppl,none"])


def test_registrations_are_idempotent_and_keep_builtins():
    import lm_eval.evaluator_utils as eu
    from lm_eval.api.registry import get_aggregation, get_metric
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker
    from lm_eval.models.huggingface import HFLM

    harness.install()
    patched = (HFLM.longctx_scores, eu.stderr_for_metric, EvaluationTracker.save_results_aggregated)
    harness.install()
    assert (HFLM.longctx_scores, eu.stderr_for_metric, EvaluationTracker.save_results_aggregated) == patched
    assert get_metric("acc") is not None and get_metric("perplexity") is not None
    assert get_aggregation("mean") is not None
    assert get_aggregation("token_weighted_perplexity") is harness.AGGREGATIONS["token_weighted_perplexity"]


def test_importing_the_tasks_changes_nothing_in_lm_eval_building_one_does():
    """lm-eval is patched in one function, install(), which building a task of the suite calls; importing the
    modules (as a script or the docs tables do) leaves lm-eval as it is."""
    import subprocess
    import sys

    probe = (
        "import lm_eval.evaluator_utils as eu\n"
        "from lm_eval.models.huggingface import HFLM\n"
        "before = eu.stderr_for_metric\n"
        "import lm_eval_longctx.suite, lm_eval_longctx.tasks.longppl, lm_eval_longctx.tasks.forgetting_curve\n"
        "print(hasattr(HFLM, 'longctx_scores'), eu.stderr_for_metric is before)\n"
        "from lm_eval_longctx.harness import glue\n"
        "glue.install()\n"
        "print(hasattr(HFLM, 'longctx_scores'), eu.stderr_for_metric is before)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", "True", "False"]


def test_each_rank_builds_only_its_shard(model_dirs, docs, tmp_path):
    """Under data parallelism a rank builds requests (and asks the evaluator) for its own docs only."""
    from lm_eval.tasks import TaskManager

    from tests.harness_utils import TASK_DIR

    meta = md(docs, evaluator=model_dirs["b"], span_cache_dir=str(tmp_path / "spans"))
    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=meta)
    task = tm.load([TASK])["tasks"][TASK]
    task.build_all_requests(rank=1, world_size=2)
    assert [i.doc_id for i in task.instances] == [1]
    assert list(task._judgements) == [1]
    assert len(list((tmp_path / "spans").glob("*.spans.npz"))) == 1


def test_bootstrap_stderr_skips_undefined_resamples():
    items = [(2.0, 1), (0.0, 0), (3.0, 2), (1.0, 1)]
    se = harness.bootstrap_stderr(harness.AGGREGATIONS["token_weighted_perplexity"], items, iters=300)
    assert math.isfinite(se) and se > 0
    assert math.isnan(harness.bootstrap_stderr(harness.AGGREGATIONS["token_weighted_perplexity"], [(0.0, 0)] * 3, 50))


def test_a_text_request_round_trips_through_its_spec_and_refuses_half_a_window_setting():
    request = text_scoring.TextRequest(
        add_special_tokens=True, offsets=True, trunc_len=64, stride=16, window_batch_size=2, long_pass="full"
    )
    spec = request.to_spec()
    assert spec["kind"] == "sequence" and text_scoring.TextRequest.from_spec(spec) == request
    import json

    assert json.loads(json.dumps(spec)) == spec  # a plain dict: what lm-eval's cache key hashes
    with pytest.raises(ValueError, match="both trunc_len and stride"):
        text_scoring.TextRequest(trunc_len=64)
    with pytest.raises(ValueError, match="long_pass must be one of"):
        text_scoring.TextRequest(long_pass="fast")
