"""A context-extended RoPE model (Phi-3 with LongRoPE), a state-space model (Mamba) and a hybrid (Jamba) through
the real `lm_eval` command on all five tasks (`--tasks longctx`): exit 0, every task reported, how each was scored
recorded, and the numbers a plain forward gives."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from lm_eval_longctx.demo.offline import train_tokenizer
from lm_eval_longctx.tasks.base import suite_task_names
from tests import families
from tests.harness_utils import TASK_DIR, write_docs

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


TASKS = suite_task_names()  # every task of the suite, as `--tasks longctx` runs them
METADATA = {
    "evaluator": "self",
    "trunc_len": 64,
    "sliding_window": 32,
    "alpha": 0.5,
    "beta": -20.0,
    "doc_tokens": 240,
    "query_tokens": 8,
    "answer_tokens": 8,
    "context_lengths": [64, 128],
    "depths": [0, 50],
    "lengths": [8, 24],
    "samples_per_length": 2,
    "num_lines": [3],
    "num_cases": 2,
}


def save_family_model(name: str, path, texts) -> str:
    """Family ``name``'s tiny config with a tokenizer trained here, saved as an ordinary checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = train_tokenizer(texts, vocab_size=300, kind="bpe")
    model_type, kwargs = families.FAMILY_CONFIGS[name]
    # larger random weights than the usual 0.02, so predictions depend on the context and some tokens are key
    kwargs = {
        **kwargs,
        "vocab_size": len(tok),
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "initializer_range": 0.3,
    }
    if "max_position_embeddings" in kwargs:
        kwargs["max_position_embeddings"] = 4096
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kwargs), dtype=torch.float32)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@torch.no_grad()
def plain_ppl(model_dir: str, texts) -> float:
    """exp(mean NLL) of every text's tokens (no special tokens), each text one plain forward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    for text in texts:
        ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
        logits = model(input_ids=ids[None], use_cache=False).logits[0].float()
        total -= float(torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None]).sum())
        count += len(ids) - 1
    return math.exp(total / count)


@pytest.mark.parametrize(
    "name,model_type,kv_cache_exact",
    [("phi3_longrope", "phi3", False), ("mamba", "mamba", False), ("jamba", "jamba", False)],
)
def test_all_five_tasks_through_the_lm_eval_command(name, model_type, kv_cache_exact, tmp_path, corpus_texts):
    texts = [t[:1400] for t in corpus_texts[:3]]
    model_dir = save_family_model(name, tmp_path / "model", corpus_texts)
    docs = write_docs(tmp_path / "docs.jsonl", texts)
    out = tmp_path / "results"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--tasks",
            "longctx",
            "--include_path",
            str(TASK_DIR),
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_dir},dtype=float32",
            "--device",
            "cpu",
            "--metadata",
            json.dumps({**METADATA, "data_files": docs}),
            "--output_path",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(next(out.rglob("results_*.json")).read_text())
    assert set(TASKS) <= set(res["results"])
    for task in TASKS:
        values = {k: v for k, v in res["results"][task].items() if "," in k and "_stderr" not in k}
        bad = {k: v for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, (task, bad)
        scoring = res["configs"][task]["metadata"]["longctx_settings"]["runtime"]["scoring"]
        assert scoring["model_type"] == model_type and scoring["kv_cache_exact"] is kv_cache_exact
        assert scoring["dtype"] == "float32"
    passes = {t: res["configs"][t]["metadata"]["longctx_settings"]["runtime"]["scoring"]["passes"] for t in TASKS}
    assert passes["longppl_govreport"]["long"] == {"full": 6}  # 3 documents, scored and judged by themselves
    assert passes["forgetting_curve"]["long"] == {"full": 8}  # 2 lengths x 2 samples x (copy, LM)
    assert passes["retrieval_gain"]["continuations"] == {"one_forward_each": 6}
    assert passes["retrieval_gain_map"]["continuations"] == {"one_forward_each": 12}
    ppl = res["results"]["longppl_govreport"]["ppl,none"]
    assert abs(ppl - plain_ppl(model_dir, texts)) <= 1e-4 * ppl
    assert math.isfinite(res["results"]["longppl_govreport"]["longppl,none"]), res["results"]["longppl_govreport"]


def test_a_run_without_key_tokens_says_why_instead_of_a_bare_nan(tmp_path, corpus_texts):
    """A sliding window (16 tokens, two layers) shorter than trunc_len: the truncated context holds all the model
    reads, so no token gains from the long one. The results and the printed table say so; the gate refuses it."""
    from lm_eval.utils import make_table

    from lm_eval_longctx.report import gate
    from lm_eval_longctx.report.results import UnusableInput
    from lm_eval_longctx.report.runs import load_run
    from tests.harness_utils import run_task

    name = "mistral_window_16"
    families.FAMILY_CONFIGS[name] = ("mistral", {**families.FAMILY_CONFIGS["mistral"][1], "sliding_window": 16})
    try:
        model_dir = save_family_model(name, tmp_path / "model", corpus_texts)
    finally:
        del families.FAMILY_CONFIGS[name]
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1400] for t in corpus_texts[:3]])
    md = {"data_files": docs, "evaluator": "self", "trunc_len": 64, "sliding_window": 32, "alpha": 0.5, "beta": -20.0}
    res = run_task("longppl_govreport", model_dir, md)
    value = res["results"]["longppl_govreport"]["longppl,none"]
    assert isinstance(value, str) and value.startswith(
        "n/a: no key tokens in any document: the long and truncated contexts give the same log-probs"
    ), value
    assert "a sliding window shorter than trunc_len" in value and "(3 documents)" in value
    assert value in make_table(res)
    assert math.isfinite(res["results"]["longppl_govreport"]["ppl,none"])
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            {k: res[k] for k in ("results", "higher_is_better", "configs", "versions", "n-samples")}, default=str
        )
    )
    with pytest.raises(UnusableInput, match="longppl.*n/a: no key tokens"):
        gate.compare(load_run(path), load_run(path))
