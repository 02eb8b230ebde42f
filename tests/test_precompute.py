"""Key spans precomputed (``precompute.py``, ``lm-eval-longctx precompute-spans``) reproduce the evaluator run, and
spans computed for other documents are refused."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx.keytokens import span_files
from tests.harness_utils import run_task, write_docs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_precomputed_spans_reproduce_the_evaluator_run(tmp_path, model_dirs, corpus_texts):
    texts = [t[:1500] for t in corpus_texts[:2]]
    docs = write_docs(tmp_path / "docs.jsonl", texts)
    settings = {"trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10.0}
    out = tmp_path / "spans"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval_longctx",  # what the installed lm-eval-longctx command runs
            "precompute-spans",
            "--evaluator",
            model_dirs["b"],
            "--out",
            str(out),
            "--data-files",
            docs,
            "--num-docs",
            "2",
            "--device",
            "cpu",
            "--trunc-len",
            "40",
            "--sliding-window",
            "16",
            "--alpha",
            "0.5",
            "--beta",
            "-10",
        ],
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    manifest = json.loads((out / span_files.MANIFEST).read_text())
    assert manifest["trunc_len"] == 40 and manifest["evaluator"] == model_dirs["b"]
    from_dir = run_task("longppl_govreport", model_dirs["a"], {"data_files": docs, "key_spans_dir": str(out)})
    direct = run_task(
        "longppl_govreport",
        model_dirs["a"],
        {"data_files": docs, "evaluator": model_dirs["b"], "span_cache_dir": "none", **settings},
    )
    r1, r2 = from_dir["results"]["longppl_govreport"], direct["results"]["longppl_govreport"]
    assert r2["n_key_tokens,none"] > 0
    assert r1["longppl,none"] == pytest.approx(r2["longppl,none"], rel=1e-6)
    # spans computed for other documents are refused, not silently misapplied
    other = write_docs(tmp_path / "other.jsonl", [t[:1400] for t in corpus_texts[:2]])
    with pytest.raises(ValueError, match="computed for other documents"):
        run_task("longppl_govreport", model_dirs["a"], {"data_files": other, "key_spans_dir": str(out)})
