"""Hostile and broken inputs to the tasks and the harness: each is refused with one line that names the file, key or
class and the way out, with exit status 2, before any model runs where that can be known; never a silently
different number, a deep traceback, or exit 0 with nothing saved. The real command line runs in a subprocess (with
a timeout), with the installed package, as a user has it."""

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness_utils import write_docs

# runs the harness in a subprocess: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration

SCORING_STARTED = "Running longctx_scores requests"


def hook_active() -> bool:
    probe = "import sys; print('_lm_eval_longctx_discovery_hook' in sys.modules)"  # set by the .pth
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", timeout=120)
    return out.stdout.strip() == "True"


needs_hook = pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")


def lm_eval(tmp_path, *args: str, preamble: str = "", preexec_fn=None, timeout: int = 600):
    """``lm_eval ARGS`` offline in a fresh interpreter, after ``preamble`` (Python run first, e.g. a plugin's
    import), with the installed package (no PYTHONPATH)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("LM_EVAL_LONGCTX_DEBUG", None)
    code = f"{preamble}\nimport sys\nfrom lm_eval.__main__ import cli_evaluate\nsys.argv = ['lm_eval', *sys.argv[1:]]\ncli_evaluate()\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )


def model_args(model_dir: str, extra: str = "") -> list[str]:
    return ["--model_args", f"pretrained={model_dir},dtype=float32{extra}", "--device", "cpu"]


def error_line(proc) -> str:
    """The one line of our error (the line after it only says how to see the traceback)."""
    lines = [x for x in proc.stderr.splitlines() if x.startswith("lm_eval_longctx: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def assert_refused(proc, *expected: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = error_line(proc)
    for text in expected:
        assert text in line, (text, line)
    return line


@pytest.fixture(scope="module")
def docs(tmp_path_factory, corpus_texts):
    return write_docs(tmp_path_factory.mktemp("docs") / "docs.jsonl", [t[:1500] for t in corpus_texts[:3]])


RG = {"doc_tokens": 120, "query_tokens": 8, "answer_tokens": 8}


# ------------------------------------------------------------------ a backend the engine would bypass


BACKEND = textwrap.dedent(
    """
    import lm_eval.models  # the built-in models first
    from lm_eval.api.registry import register_model
    from lm_eval.models.huggingface import HFLM


    @register_model("hf-shifted")
    class ShiftedHFLM(HFLM):
        def _model_call(self, inps, attn_mask=None, labels=None):
            return super()._model_call(inps, attn_mask, labels) * 2.0
    """
)


@needs_hook
def test_an_hflm_subclass_overriding_its_scoring_is_refused_before_any_work(tmp_path, model_dirs, docs):
    """Its override would never be called: the engine runs the transformers model itself (plain hf's numbers)."""
    (tmp_path / "shifted_backend.py").write_text(BACKEND)
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf-shifted",
        *model_args(model_dirs["a"]),
        "--tasks",
        "retrieval_gain",
        "--metadata",
        json.dumps({"data_files": docs, **RG}),
        preamble="import sys; sys.path.insert(0, '.'); import shifted_backend",
    )
    assert_refused(
        proc,
        "retrieval_gain: the ShiftedHFLM backend overrides HFLM._model_call (shifted_backend.ShiftedHFLM)",
        "the scores would be plain hf's",
        "Ways out: use --model hf",
    )
    assert SCORING_STARTED not in proc.stderr


# ------------------------------------------------------------------ results that cannot be saved completely


def _small_files_only():
    """The child process may write files of at most 4 KiB: a results file is cut short, as on a full disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


@needs_hook
def test_results_cut_short_by_a_full_file_system_fail_the_run(tmp_path, model_dirs):
    """lm-eval logs a warning and exits 0 when the results file cannot be written whole; a CI job would then gate on
    the start of a JSON file."""
    out = tmp_path / "out"
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf",
        *model_args(model_dirs["a"]),
        "--tasks",
        "longeval_lines_ppl",
        "--metadata",
        json.dumps({"num_lines": [4], "num_cases": 1}),
        "--output_path",
        str(out),
        preexec_fn=_small_files_only,
    )
    assert_refused(
        proc, f"--output_path {out}: the results file could not be written", "nothing was saved", "Free space"
    )


# ------------------------------------------------------------------ files that are not regular files


@needs_hook
@pytest.mark.parametrize("kind", ["folder", "fifo"])
@pytest.mark.parametrize("task, key", [("retrieval_gain", "data_files"), ("longeval_lines_ppl", "testcases")])
def test_a_folder_or_fifo_given_as_a_file_is_named_for_what_it_is(tmp_path, model_dirs, kind, task, key):
    path = tmp_path / "rows.jsonl"
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)  # reading it would wait for a writer: it must not be opened
    md = {key: str(path), **(RG if task == "retrieval_gain" else {"num_lines": [4], "num_cases": 1})}
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf",
        *model_args(model_dirs["a"]),
        "--tasks",
        task,
        "--metadata",
        json.dumps(md),
        timeout=300,
    )
    what = "a folder, not a file" if kind == "folder" else "not a regular file (a FIFO, socket or device"
    line = assert_refused(proc, f"{key} {path}: {what}", "pass ")
    assert "not found" not in line
    assert SCORING_STARTED not in proc.stderr


def test_the_file_check_opens_nothing(tmp_path):
    from lm_eval_longctx.data import documents

    os.mkfifo(tmp_path / "f")
    with pytest.raises(ValueError, match="not a regular file"):
        documents.check_regular_file(tmp_path / "f", "data_files", "a file")
    with pytest.raises(ValueError, match="a folder, not a file"):
        documents.check_regular_file(tmp_path, "data_files", "a file")
    with pytest.raises(FileNotFoundError, match="data_files .*missing: not found; pass a file"):
        documents.check_regular_file(tmp_path / "missing", "data_files", "a file")


# ------------------------------------------------------------------ a model smaller than its tokenizer


@pytest.fixture(scope="module")
def short_embedding_model(tmp_path_factory, model_dirs):
    """The first tiny model with 10 embedding rows fewer than its tokenizer has ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path_factory.mktemp("short_embedding")
    tokenizer = AutoTokenizer.from_pretrained(model_dirs["a"])
    model = AutoModelForCausalLM.from_pretrained(model_dirs["a"])
    model.resize_token_embeddings(len(tokenizer) - 10)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path), len(tokenizer)


@needs_hook
def test_a_model_with_fewer_embedding_rows_than_token_ids_is_refused_before_it_runs(
    tmp_path, short_embedding_model, docs
):
    path, n_ids = short_embedding_model
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf",
        *model_args(path),
        "--tasks",
        "retrieval_gain",
        "--metadata",
        json.dumps({"data_files": docs, **RG}),
    )
    assert_refused(
        proc,
        f"retrieval_gain: the tokenizer {path} has {n_ids} token ids, but the model's input embedding has "
        f"{n_ids - 10} rows",
        "Ways out: the model's own tokenizer",
    )
    assert SCORING_STARTED not in proc.stderr and "IndexError" not in proc.stderr


# ------------------------------------------------------------------ lengths the model cannot take


@needs_hook
def test_documents_longer_than_the_model_are_refused_when_the_task_is_built(tmp_path, model_dirs, docs):
    """Named at once, the longest document first, not after other requests were scored (the paper's documents are
    read whole; by default they are cut at the model's window)."""
    md = {"preset": "paper", "data_files": docs, "evaluator": "self", "trunc_len": 16, "sliding_window": 8}
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf",
        *model_args(model_dirs["a"], ",max_length=64"),
        "--tasks",
        "longppl_govreport",
        "--metadata",
        json.dumps(md),
    )
    line = assert_refused(
        proc,
        "longppl_govreport: document ",
        "(the longest; 3 of the 3 evaluated are over 64), longer than the model's maximum length 64",
        f"give shorter documents in data_files {docs}",
        "cut_tokens or max_seq_lengths",
        "allow_beyond_max_length",
    )
    assert SCORING_STARTED not in proc.stderr, line


@needs_hook
@pytest.mark.parametrize("key, value", [("max_tokens", 100), ("min_tokens", 10), ("dataset_path", "some/dataset")])
def test_a_setting_that_does_nothing_on_the_rows_is_an_error(tmp_path, model_dirs, docs, key, value):
    """Text rows are read as they are (no token ids to select or cut); a data_files file replaces the hub dataset."""
    proc = lm_eval(
        tmp_path,
        "--model",
        "hf",
        *model_args(model_dirs["a"]),
        "--tasks",
        "retrieval_gain",
        "--metadata",
        json.dumps({"data_files": docs, **RG, key: value}),
    )
    why = "replaces the hub dataset" if key == "dataset_path" else "hold text, not token ids"
    assert_refused(proc, f"retrieval_gain: setting {key!r} does nothing here", why, f"Remove {key!r}")
    assert SCORING_STARTED not in proc.stderr


def test_settings_that_did_nothing_are_not_recorded(docs, model_dirs):
    from tests.harness_utils import run_task

    out = run_task("retrieval_gain", model_dirs["a"], {"data_files": docs, **RG}, limit=1, bootstrap_iters=0)
    rec = out["configs"]["retrieval_gain"]["metadata"]["longctx_settings"]
    for key in ("dataset_path", "dataset_revision", "decode_tokenizer", "min_tokens", "max_tokens"):
        assert key not in rec, key
    assert rec["num_docs"] == 50 and rec["data"]["data_files"] == str(Path(docs).resolve())
    assert rec["tokenizer"]["name_or_path"] == model_dirs["a"] and len(rec["tokenizer"]["vocab_sha256"]) == 64
    # what the task declares reaches the results: its report section and its metrics' directions
    from lm_eval_longctx.tasks.retrieval_gain import RetrievalGainTask

    assert out["configs"]["retrieval_gain"]["metadata"]["longctx_report"] == RetrievalGainTask.REPORT.record()
    assert out["higher_is_better"]["retrieval_gain"] == {
        "retrieval_gain": True,
        "nll_with": False,
        "nll_without": False,
    }
