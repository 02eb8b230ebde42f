"""Two CPU ranks (torchrun, gloo) give the single-process numbers: each rank scores its shard."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness_utils import TASK_DIR, run_task, write_docs

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("limit", [None, 3])  # 3 docs on 2 ranks: the evaluator pads rank 1
def test_two_ranks_equal_one_process(tmp_path, model_dirs, corpus_texts, limit):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:4]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10.0}
    single = run_task("longppl_govreport", model_dirs["a"], md, limit=limit)["results"]["longppl_govreport"]
    out = tmp_path / "dp.json"
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(29500 + (limit or 0)),
            str(ROOT / "tests" / "dp_worker.py"),
            model_dirs["a"],
            str(TASK_DIR),
            json.dumps(md),
            str(out),
            str(limit).lower(),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    dp = json.loads(out.read_text())
    assert dp["doc_ids"] == list(range(limit or 4))
    assert dp["longppl"] == pytest.approx(single["longppl,none"], rel=1e-6)
    assert dp["ppl"] == pytest.approx(single["ppl,none"], rel=1e-6)
