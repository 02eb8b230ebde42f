"""gate / leaderboard / correlate run with numpy, scipy and yaml only: in a process where importing torch,
transformers, lm_eval or datasets fails, they work, and none of those modules gets loaded."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report_fixtures import DATE_BASE, DATE_RUN, corpus, write_run

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "lm_eval", "datasets", "accelerate")

# Runs the CLI (or a script) with an import blocker first on sys.meta_path: any import of a heavy package raises
# ImportError, as on a machine without them. Prints the heavy modules loaded and the imports attempted.
WRAPPER = f"""
import importlib.abc, json, runpy, sys

HEAVY = {HEAVY!r}
attempted = []
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            attempted.append(name)
            raise ImportError(f"{{name}} is not installed here (blocked by the test)")
        return None
preloaded = [m for m in sys.modules if m.split(".")[0] in HEAVY]
sys.meta_path.insert(0, Blocker())
target, args = sys.argv[1], sys.argv[2:]
try:
    if target == "cli":
        from lm_eval_longctx.cli import main
        code = main(args)
    else:
        sys.argv = [target, *args]
        runpy.run_path(target, run_name="__main__")
        code = 0
except SystemExit as e:
    code = e.code
loaded = [m for m in sys.modules if m.split(".")[0] in HEAVY]
print("\\nHEAVY=" + json.dumps({{"preloaded": preloaded, "loaded": loaded, "attempted": attempted}}))
sys.exit(code)
"""


def run_blocked(*args, cwd=None):
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=120
    )
    heavy = json.loads(proc.stdout.rsplit("HEAVY=", 1)[1])
    return proc, heavy


def test_blocker_really_blocks():
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, "cli", "demo", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode != 0 and "torch is not installed here" in proc.stderr  # demo needs torch


@pytest.mark.parametrize(
    "command", [["--help"], ["gate", "--help"], ["leaderboard", "--help"], ["correlate", "--help"]]
)
def test_help_without_heavy_modules(command):
    proc, heavy = run_blocked("cli", *command)
    assert proc.returncode == 0, proc.stderr
    assert "usage: lm-eval-longctx" in proc.stdout
    assert heavy == {"preloaded": [], "loaded": [], "attempted": []}


def test_gate_leaderboard_correlate_run_without_heavy_modules(tmp_path):
    base, run = corpus(), corpus(shift=0.03, noise=0.005)
    write_run(tmp_path / "run", run, DATE_RUN, model="org/new")
    write_run(tmp_path / "base", base, DATE_BASE, model="org/old")
    cfg = tmp_path / "gate.yaml"
    cfg.write_text("z: 1.96\nmetrics:\n  '*/ppl': {rel: 0.001}\n")
    proc, heavy = run_blocked(
        "cli",
        "gate",
        str(tmp_path / "run"),
        "--baseline",
        str(tmp_path / "base"),
        "--config",
        str(cfg),
        "--summary",
        str(tmp_path / "summary.md"),
    )
    assert proc.returncode == 1, proc.stderr  # the paired regression is found, without torch
    assert "paired (40 docs, token_weighted_perplexity)" in proc.stdout
    assert heavy["loaded"] == [] and heavy["attempted"] == []
    proc, heavy = run_blocked(
        "cli", "leaderboard", str(tmp_path / "run"), str(tmp_path / "base"), "--csv", str(tmp_path / "board.csv")
    )
    assert proc.returncode == 0 and heavy["loaded"] == [] and heavy["attempted"] == [], proc.stderr
    assert "| org/new |" in proc.stdout

    scores = tmp_path / "scores.csv"
    scores.write_text("model,score\n" + "".join(f"m{i},{i * 1.5 + (i % 3)}\n" for i in range(6)))
    bench = tmp_path / "bench.csv"
    bench.write_text("model,LongBench\n" + "".join(f"m{i},{40 - i}\n" for i in range(6)))
    proc, heavy = run_blocked(
        "cli",
        "correlate",
        "--scores",
        str(scores),
        "--benchmark",
        str(bench),
        "--n-resamples",
        "200",
        "--out",
        str(tmp_path / "sub.json"),
    )
    assert proc.returncode == 0 and heavy["loaded"] == [] and heavy["attempted"] == [], proc.stderr
    assert "exact permutation" in proc.stdout
