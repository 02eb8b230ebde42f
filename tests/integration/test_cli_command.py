"""The target command itself, in a fresh interpreter: `lm_eval --tasks longppl_govreport --model hf ...`.

Runs without --include_path, so it needs the installed package's discovery hook (scripts/test.sh
installs it); from a bare checkout it is skipped.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.harness_utils import write_docs

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


def hook_active() -> bool:
    probe = "import sys; print('_lm_eval_longctx_discovery_hook' in sys.modules)"  # set by the .pth
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/")
    return out.stdout.strip() == "True"


def run_lm_eval(tmp_path, tasks: str, model_dir: str, *args: str, **env_extra: str):
    """``python -m lm_eval --tasks TASKS --model hf`` on a tiny model, offline, with the installed package (as a
    user has it, no PYTHONPATH)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env_extra}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "lm_eval", "--tasks", tasks, "--model", "hf"]
        + ["--model_args", f"pretrained={model_dir},dtype=float32", "--device", "cpu", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )


@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
def test_bare_lm_eval_command_with_output_path_and_log_samples(tmp_path, model_dirs, corpus_texts):
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1500] for t in corpus_texts[:3]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10}
    out = tmp_path / "results"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # the installed package, as a user has it
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--tasks",
            "longppl_govreport",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_dirs['a']},dtype=float32",
            "--device",
            "cpu",
            "--metadata",
            json.dumps(md),
            "--output_path",
            str(out),
            "--log_samples",
            "--limit",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "longppl" in proc.stdout and "N/A" not in proc.stdout
    results = list(out.rglob("results_*.json"))
    samples = list(out.rglob("samples_longppl_govreport_*.jsonl"))
    assert len(results) == 1 and len(samples) == 1
    res = json.loads(results[0].read_text())
    assert res["n-samples"]["longppl_govreport"] == {"original": 3, "effective": 2}
    assert res["configs"]["longppl_govreport"]["metadata"]["longctx_settings"]["trunc_len"] == 40
    lines = samples[0].read_text().splitlines()
    assert len(lines) == 2 and all(len(x) < 20_000 for x in lines)  # compact: no per-token arrays


@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
def test_lm_eval_ls_tasks_lists_ours():
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "ls", "tasks"], capture_output=True, text=True, timeout=300, cwd="/"
    )
    assert proc.returncode == 0 and "longppl_govreport" in proc.stdout


@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
def test_unwritable_output_path_fails_the_run(tmp_path, model_dirs, corpus_texts):
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1500] for t in corpus_texts[:2]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10}
    (tmp_path / "a-file").write_text("not a folder")
    output = str(tmp_path / "a-file" / "results")
    proc = run_lm_eval(
        tmp_path,
        "longppl_govreport",
        model_dirs["a"],
        "--metadata",
        json.dumps(md),
        "--output_path",
        output,
        "--limit",
        "1",
    )
    assert proc.returncode != 0
    assert "the results file could not be written" in proc.stderr


@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
@pytest.mark.parametrize("debug", [False, True])
def test_our_errors_print_as_one_block_without_traceback(tmp_path, model_dirs, debug):
    debug_env = {"LM_EVAL_LONGCTX_DEBUG": "1"} if debug else {}
    metadata = json.dumps({"trunc_lenn": 40})
    proc = run_lm_eval(tmp_path, "longppl_govreport", model_dirs["a"], "--metadata", metadata, **debug_env)
    assert proc.returncode != 0
    assert "unknown setting 'trunc_lenn'" in proc.stderr and "Did you mean 'trunc_len'?" in proc.stderr
    if debug:
        assert "Traceback" in proc.stderr
    else:
        assert "Traceback" not in proc.stderr
        assert "lm_eval_longctx: error: longppl_govreport: unknown setting" in proc.stderr
        assert "LM_EVAL_LONGCTX_DEBUG=1" in proc.stderr


@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
def test_every_missing_download_is_named_at_once(tmp_path, model_dirs):
    proc = run_lm_eval(tmp_path, "longctx", model_dirs["a"], HF_HOME=str(tmp_path / "hf"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    err = proc.stderr
    assert "4 of the 4 resources this run fetches cannot be had" in err
    for name in ("emozilla/pg19-test", "emozilla/govreport-test-tokenized", "NousResearch/Llama-2-7b-hf"):
        assert name in err
    assert "meta-llama/Llama-3.1-8B" in err
