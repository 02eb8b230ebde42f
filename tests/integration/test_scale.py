"""Models split by accelerate (device_map), the evaluator on device "auto", lm-eval's parallelize=True,
and the key-span precompute under several processes: all on CPU, compared with the plain single-piece
and single-process runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_longctx import output_dirs
from lm_eval_longctx.engine import scoring
from lm_eval_longctx.keytokens import evaluator, span_files
from tests.harness_utils import TASK_DIR, write_docs
from tests.tiny import tiny_llama

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


ROOT = Path(__file__).resolve().parents[2]
LAYERS = 3
# Explicit multi-entry maps. All on "cpu": one device, so accelerate attaches its hooks only when forced.
# With "disk" entries: those weights live on the meta device between forwards (the input embedding
# too, so the model's first parameter says "meta"), and the hooks load them for each forward.
ALL_CPU = {
    "model.embed_tokens": "cpu",
    **{f"model.layers.{i}": "cpu" for i in range(LAYERS)},
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}
WITH_DISK = {**ALL_CPU, "model.embed_tokens": "disk", "model.layers.1": "disk", "lm_head": "disk"}


def _dispatched(device_map, tmp_path):
    from accelerate import dispatch_model

    model = tiny_llama(vocab_size=97, seed=3, num_hidden_layers=LAYERS).eval()
    model = dispatch_model(
        model,
        device_map=device_map,
        offload_dir=str(tmp_path / "offload"),
        skip_keys=model._skip_keys_device_placement,
        force_hooks=True,
    )
    return model


def _count_hook_calls(model) -> dict:
    """Count the pre-forward calls of accelerate's hooks on the top model and on one layer."""
    calls = {"top": 0, "layer": 0}
    for name, module in (("top", model), ("layer", model.model.layers[1])):
        hook = module._hf_hook
        original = hook.pre_forward

        def counted(mod, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(mod, *args, **kwargs)

        hook.pre_forward = counted
    return calls


def _ids(n, seed):
    return torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("device_map", [ALL_CPU, WITH_DISK], ids=["all-cpu", "with-disk-offload"])
def test_dispatched_model_scores_like_the_plain_model(device_map, tmp_path):
    plain = tiny_llama(vocab_size=97, seed=3, num_hidden_layers=LAYERS).eval()
    split = _dispatched(device_map, tmp_path)
    calls = _count_hook_calls(split)
    if "disk" in device_map.values():
        assert split.device.type == "meta"  # what the engine must not send its inputs to
    assert scoring.input_device(split).type == "cpu"

    seq, others = _ids(700, 0), [_ids(700, 1), _ids(700, 2)]
    for chunk in (64, 1000):
        a = scoring.score_long(plain, seq, chunk_size=chunk, score_from=50)
        b = scoring.score_long(split, seq, chunk_size=chunk, score_from=50)
        np.testing.assert_allclose(b.logprob, a.logprob, atol=1e-5, equal_nan=True)
        np.testing.assert_array_equal(b.greedy, a.greedy)
    for x, y in zip(
        scoring.score_long_batch(plain, others, chunk_size=128), scoring.score_long_batch(split, others, chunk_size=128)
    ):
        np.testing.assert_allclose(y.logprob, x.logprob, atol=1e-5, equal_nan=True)
    for x, y in zip(
        scoring.score_truncated(plain, [seq, others[0][:500]], 200, 64, batch_size=3),
        scoring.score_truncated(split, [seq, others[0][:500]], 200, 64, batch_size=3),
    ):
        np.testing.assert_allclose(y.logprob, x.logprob, atol=1e-5, equal_nan=True)
        np.testing.assert_array_equal(y.greedy, x.greedy)
        assert np.sum(~np.isnan(x.logprob)) >= 300  # the windows did score something
    conts = [_ids(n, 10 + n) for n in (1, 9, 60)]
    for x, y in zip(
        scoring.score_continuations(plain, seq[:400], conts, chunk_size=100),
        scoring.score_continuations(split, seq[:400], conts, chunk_size=100),
    ):
        np.testing.assert_allclose(y.logprob, x.logprob, atol=1e-5)
        np.testing.assert_array_equal(y.greedy, x.greedy)
    assert calls["top"] > 10 and calls["layer"] > 10  # the scores went through accelerate's hooks


def test_input_device_of_plain_and_dispatched_models(tmp_path):
    assert scoring.input_device(tiny_llama(vocab_size=97)) == torch.device("cpu")
    split = _dispatched(WITH_DISK, tmp_path)
    # the head is offloaded: it runs on the main (execution) device, so the inputs go there
    assert split.lm_head.weight.device.type == "meta"
    assert scoring.input_device(split) == torch.device("cpu")


# ------------------------------------------------------------------ evaluator on device "auto"


def test_parse_max_memory():
    assert evaluator.parse_max_memory(None) is None
    assert evaluator.parse_max_memory('{"0": "1KB", "cuda:1": 2048, "cpu": "2KB"}') == {0: 1000, 1: 2048, "cpu": 2000}
    for bad, match in [
        ("nope", "JSON object"),
        ({}, "non-empty"),
        ({"disk": "1GB"}, "unknown device 'disk'"),
        ({"0": "lots"}, "not a size"),
        ({"0": -5}, "positive"),
    ]:
        with pytest.raises(ValueError, match=match):
            evaluator.parse_max_memory(bad)


def test_load_evaluator_auto_on_a_cpu_machine(model_dirs):
    ident = evaluator.evaluator_identity(model_dirs["b"])
    model, tok = evaluator.load_evaluator(ident, dtype="float32", device="auto")
    assert scoring.input_device(model).type == "cpu" and model.dtype == torch.float32 and not model.training
    plain, _ = evaluator.load_evaluator(ident, dtype="float32", device="cpu")
    ids = tok("the report of the committee found", add_special_tokens=True)["input_ids"]
    np.testing.assert_allclose(
        scoring.score_long(model, ids).logprob, scoring.score_long(plain, ids).logprob, atol=1e-6
    )
    if torch.cuda.device_count() == 0:
        with pytest.raises(ValueError, match="names GPU"):
            evaluator.load_evaluator(ident, dtype="float32", device="auto", max_memory={"0": "1GiB"})
    with pytest.raises(ValueError, match="does not fit"):  # never a silent offload to disk
        evaluator.load_evaluator(ident, dtype="float32", device="auto", max_memory={"cpu": "20KB"})


def _evaluate(lm, task, metadata, limit=None):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_defaults=False, include_path=str(TASK_DIR), metadata=metadata)
    return simple_evaluate(model=lm, tasks=[task], task_manager=tm, bootstrap_iters=0, limit=limit)


def test_evaluator_device_auto_gives_the_same_longppl(model_dirs, corpus_texts, tmp_path):
    from lm_eval.models.huggingface import HFLM

    from lm_eval_longctx.tasks.longppl import resolve_settings

    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:2]])
    md = {
        "data_files": docs,
        "evaluator": model_dirs["b"],
        "span_cache_dir": "none",
        "trunc_len": 40,
        "sliding_window": 16,
        "alpha": 0.5,
        "beta": -10.0,
    }
    lm = HFLM(pretrained=model_dirs["a"], dtype="float32", device="cpu")
    r_cpu = _evaluate(lm, "longppl_govreport", {**md, "evaluator_device": "cpu"})["results"]["longppl_govreport"]
    r_auto = _evaluate(
        lm, "longppl_govreport", {**md, "evaluator_device": "auto", "evaluator_max_memory": '{"cpu": "1GiB"}'}
    )["results"]["longppl_govreport"]
    assert r_cpu["n_key_tokens,none"] > 0
    assert r_auto["longppl,none"] == pytest.approx(r_cpu["longppl,none"], rel=1e-6)
    with pytest.raises(ValueError, match="evaluator_device: auto"):
        resolve_settings({"evaluator_max_memory": {"cpu": "1GiB"}})


# ------------------------------------------------------------------ lm-eval's parallelize=True


def test_hflm_parallelize_serves_our_requests(model_dirs, corpus_texts, tmp_path, monkeypatch):
    """lm-eval's own model parallelism on a CPU-only machine: parallelize=True gives device_map="auto"
    with no GPU memory, so accelerate places the layers on "disk" (offload_folder) and runs them with
    its hooks on the CPU: the dispatched path end to end, compared with the plain model."""
    from lm_eval.models.huggingface import HFLM

    monkeypatch.chdir(tmp_path)
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:2]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10.0}
    rg = {
        "data_files": docs,
        "doc_tokens": 150,
        "query_tokens": 6,
        "answer_tokens": 4,
        "n_queries": 2,
        "separator": "\n",
        "chunk_size": 64,
    }
    plain = HFLM(pretrained=model_dirs["a"], dtype="float32", device="cpu")
    split = HFLM(pretrained=model_dirs["a"], dtype="float32", parallelize=True, offload_folder=str(tmp_path / "off"))
    assert split.model._hf_hook is not None and set(split.model.hf_device_map.values()) == {"disk"}
    for task, metadata, metric in (
        ("longppl_govreport", md, "longppl,none"),
        ("retrieval_gain", rg, "retrieval_gain,none"),
    ):
        a = _evaluate(plain, task, metadata)["results"][task]
        b = _evaluate(split, task, metadata)["results"][task]
        assert np.isfinite(a[metric])
        assert b[metric] == pytest.approx(a[metric], rel=1e-6, abs=1e-9)


# ------------------------------------------------------------------ precompute at scale


def _precompute_args(model_dir, docs, out, *extra):
    return [
        "--evaluator",
        model_dir,
        "--data-files",
        docs,
        "--num-docs",
        "4",
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
        "--out",
        str(out),
        *extra,
    ]


def _folder_bytes(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def span_setup(tmp_path_factory, model_dirs, corpus_texts):
    root = tmp_path_factory.mktemp("spans")
    docs = write_docs(root / "docs.jsonl", [t[:1300] for t in corpus_texts[:4]])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    single = root / "single"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval_longctx",
            "precompute-spans",
            *_precompute_args(model_dirs["b"], docs, single),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    return root, docs, single, env


def test_manifest_counts_and_checksums(span_setup):
    _, _, single, _ = span_setup
    manifest = json.loads((single / span_files.MANIFEST).read_text())
    assert manifest["n_docs"] == 4 and manifest["format"] == span_files.MANIFEST_FORMAT
    for key in (
        "evaluator",
        "evaluator_identity",
        "evaluator_dtype",
        "trunc_len",
        "sliding_window",
        "alpha",
        "beta",
        "span_algorithm_version",
        "texts_sha256",
    ):
        assert key in manifest
    assert sorted(manifest["slice_sha256"]) == [f"slice_{i}.txt" for i in range(4)]
    for name, digest in manifest["slice_sha256"].items():
        assert output_dirs.file_sha256(single / name) == digest
    # the span files, the manifest, and the marker of a folder this package wrote (what --overwrite may replace)
    expected = [span_files.MANIFEST, output_dirs.MARKER, *manifest["slice_sha256"]]
    assert sorted(p.name for p in single.iterdir()) == sorted(expected)
    assert not [p for p in single.parent.iterdir() if p.name.startswith(".single.")]


def test_two_processes_write_the_same_folder_as_one(span_setup, model_dirs):
    root, docs, single, env = span_setup
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("accelerate CLI not found")
    out = root / "two"
    # `--multi_gpu` is accelerate's torch.distributed launcher; without CUDA the ranks talk over gloo
    # (`--cpu` would start one process only).
    proc = subprocess.run(
        [
            accelerate,
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            "29631",
            "-m",
            "lm_eval_longctx",
            "precompute-spans",
            *_precompute_args(model_dirs["b"], docs, out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[rank 1] document 1" in proc.stderr and "[rank 0] document 2" in proc.stderr  # both ranks worked
    assert _folder_bytes(out) == _folder_bytes(single)
