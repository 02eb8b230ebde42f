"""``lm_eval --output_path ... --log_samples`` on a nearly full file system (writes past a size fail, as through
RLIMIT_FSIZE): exit 2, one line naming the file and the cause, and no part of a file left."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.harness_utils import write_docs

TASK = "longppl_govreport"
FILE_SIZE_LIMIT = 16_000  # the results JSON fits, the samples (which hold the documents' texts) do not


def _nearly_full_disk():
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit returns EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


@pytest.mark.integration
def test_samples_that_do_not_fit_fail_the_run_in_one_line_and_leave_no_part(model_dirs, corpus_texts, tmp_path):
    docs = write_docs(tmp_path / "docs.jsonl", [t[:4000] for t in corpus_texts[:2]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 40, "sliding_window": 16}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    argv = ["--tasks", TASK, "--model", "hf", "--model_args", f"pretrained={model_dirs['a']},dtype=float32"]
    argv += ["--device", "cpu", "--metadata", json.dumps(md), "--output_path", str(tmp_path / "out"), "--log_samples"]
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=_nearly_full_disk,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("lm_eval_longctx: error:")]
    assert f"samples of {TASK} could not be written" in line and ": file too large)" in line
    assert "Traceback" not in proc.stderr
    files = sorted(p.name.split("_")[0] for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["results"]  # the results saved whole; no 0-byte or cut samples file beside them
    [results] = (tmp_path / "out").rglob("results_*.json")
    assert json.loads(results.read_text())["results"][TASK]
