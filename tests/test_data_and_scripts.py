"""The GovReport selection on a local stand-in, the span precomputation script, the offline demo."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_longctx.data import documents as data
from lm_eval_longctx.keytokens import span_files
from tests.harness_utils import run_task, write_docs

# runs the harness, a subprocess or the demo: left out of the fast subset (-m 'not integration')
pytestmark = pytest.mark.integration


ROOT = Path(__file__).resolve().parents[1]


def test_govreport_selection_and_decoding(tmp_path, model_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dirs["a"])
    rows = []
    for i, n in enumerate([30, 5, 40, 12, 50, 60]):
        ids = [(7 * i + j) % 200 + 10 for j in range(n)]
        rows.append({"input": f"doc {i}", "input_ids": ids, "tokenized_len": n})
    path = tmp_path / "gov.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs = data.load_govreport(
        data_files=str(path), decode_tokenizer=model_dirs["a"], min_tokens=12, max_tokens=35, num_docs=3
    )
    # rows with tokenized_len >= 12, first 3 in order (rows 0, 2, 3), first 35 ids, decoded
    expected = [tok.decode(rows[i]["input_ids"][:35]) for i in (0, 2, 3)]
    assert docs.texts == expected
    assert docs.provenance["num_docs"] == 3 and docs.provenance["texts_sha256"] == data.texts_sha256(expected)
    with pytest.warns(UserWarning, match="only 5 documents"):
        assert (
            len(
                data.load_govreport(
                    data_files=str(path), decode_tokenizer=model_dirs["a"], min_tokens=12, num_docs=10
                ).texts
            )
            == 5
        )
    with pytest.raises(FileNotFoundError):
        data.load_govreport(data_files=str(tmp_path / "missing.jsonl"))


def test_precomputed_spans_reproduce_the_evaluator_run(tmp_path, model_dirs, corpus_texts):
    texts = [t[:1500] for t in corpus_texts[:2]]
    docs = write_docs(tmp_path / "docs.jsonl", texts)
    settings = {"trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10.0}
    out = tmp_path / "spans"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval_longctx",  # the installed command a pip user has (scripts/precompute_key_spans.py wraps it)
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


def test_offline_demo_builds(tmp_path):
    from lm_eval_longctx.demo.offline import build_demo

    info = build_demo(tmp_path / "demo", n_docs=2, chars_per_doc=3000, vocab_size=400)
    assert Path(info["model"], "config.json").is_file()
    lines = Path(info["docs"]).read_text().splitlines()
    assert len(lines) == 2 and all(len(json.loads(x)["text"]) == 3000 for x in lines)
