"""The profiles' reader (``profiles/__init__.py``): the shipped files load, a variant profile names a base profile
with a GGUF source and keys of its config to set, and every key it gets wrong is one error naming the file and key."""

from __future__ import annotations

import json

import pytest

from lm_eval_longctx import profiles

BASE = "smollm2-135m-instruct"
SHIPPED = profiles.FOLDER


def test_the_shipped_profiles_load_and_the_variants_name_their_base():
    assert BASE in profiles.gguf_sources()
    variants = profiles.variants()
    assert sorted(variants) == [f"{BASE}-claims-32k", f"{BASE}-linear-x4", f"{BASE}-sliding-512"]
    for name, profile in variants.items():
        assert profile.variant is not None and profile.variant.of == BASE and profile.gguf is None, name
        assert profile.variant.config and profile.variant.why
    claims = variants[f"{BASE}-claims-32k"]
    assert claims.window == 32768 and claims.variant is not None
    assert claims.variant.config == {"max_position_embeddings": 32768}
    assert claims.expect == {"verdict": "effective below the claim", "effective_length": 8192, "ruler": "refuted"}
    sliding = variants[f"{BASE}-sliding-512"]
    assert sliding.window == 8192 and sliding.expect == {"claim": "refuted", "ruler": "refuted"}
    assert variants[f"{BASE}-linear-x4"].expect == {
        "verdict": "no effective context",
        "effective_length": 0,
        "ruler": "refuted",
    }


def base_profile(name: str = "base") -> dict:
    return json.loads((SHIPPED / f"{BASE}.json").read_text()) | {"name": name}


def variant_profile(name: str = "variant", **variant) -> dict:
    data = {k: v for k, v in base_profile(name).items() if k != "gguf"}
    data["expect"] = {"verdict": "effective below the claim", "ruler": "refuted"}
    data["variant"] = {"of": "base", "config": {"max_position_embeddings": 32768}, "why": "the same weights"} | variant
    return data


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty profiles folder standing in for the shipped one; ``write(data)`` adds a profile file to it."""
    monkeypatch.setattr(profiles, "FOLDER", tmp_path)

    def write(data: dict) -> None:
        (tmp_path / f"{data['name']}.json").write_text(json.dumps(data))

    return write


def test_a_variant_profile_parses(folder):
    folder(base_profile())
    folder(variant_profile())
    profile = profiles.load("variant")
    assert profile.variant == profiles.Variant("base", {"max_position_embeddings": 32768}, "the same weights")
    assert profile.expect["ruler"] == "refuted" and profile.gguf is None
    assert profiles.variants() == {"variant": profile} and list(profiles.gguf_sources()) == ["base"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"variant": "base"}, "variant must be a dict, got str"),
        ({"variant": {"of": "base", "config": {"a": 1}}}, "variant: key 'why' is missing"),
        ({"variant": {"config": {"a": 1}, "why": "x"}}, "variant: key 'of' is missing"),
        ({"variant": {"of": "base", "why": "x"}}, "variant: key 'config' is missing"),
        ({"variant": {"of": "base", "config": {"a": 1}, "why": "x", "weights": 1}}, "variant: unknown key 'weights'"),
        ({"variant": {"of": "base", "config": [], "why": "x"}}, "variant: config must be a dict, got list"),
        ({"variant": {"of": "base", "config": {}, "why": "x"}}, "variant.config is empty"),
        ({"variant": {"of": "base", "config": {"a": 1}, "why": " "}}, "variant.why is empty"),
        ({"variant": {"of": 3, "config": {"a": 1}, "why": "x"}}, "variant: of must be a str, got int"),
        ({"gguf": base_profile()["gguf"]}, "a variant has no gguf part of its own"),
        ({"expect": {"ruler": "maybe"}}, "expect.ruler 'maybe' is not one of"),
        ({"expect": {"claim": "kept"}}, "expect.claim 'kept' is not one of"),
        ({"expect": {"ruler": 1}}, "expect: ruler must be a str, got int"),
        ({"expect": {"effective_length": -1}}, "expect.effective_length must be a number of tokens"),
        ({"expect": {"rulers": "used"}}, "expect: unknown key 'rulers'"),
    ],
)
def test_each_bad_key_is_refused_by_name(folder, change, message):
    folder(base_profile())
    folder(variant_profile() | change)
    with pytest.raises(profiles.ProfileError, match="variant.json") as err:
        profiles.load("variant")
    assert message in str(err.value)


def test_a_variant_must_be_of_a_profile_with_a_gguf_part_and_no_variant(folder):
    folder(base_profile())
    folder(variant_profile("unknown", of="nobody"))
    with pytest.raises(profiles.ProfileError, match=r"unknown.json: variant.of: no profile 'nobody'; known: \['base'"):
        profiles.load("unknown")
    folder(variant_profile("of-itself", of="of-itself"))
    with pytest.raises(profiles.ProfileError, match="variant.of: no profile 'of-itself'"):
        profiles.load("of-itself")
    folder({k: v for k, v in base_profile("plain").items() if k != "gguf"})
    folder(variant_profile("of-plain", of="plain"))
    with pytest.raises(profiles.ProfileError, match="of-plain.json: variant.of: 'plain' has no gguf part"):
        profiles.load("of-plain")
    folder(variant_profile("first"))
    folder(variant_profile("second", of="first"))
    with pytest.raises(profiles.ProfileError, match="second.json: variant.of: 'first' is itself a variant"):
        profiles.load("second")
    assert profiles.load("first").variant is not None  # a variant of the base is fine
    # two variants of each other: refused, not an endless recursion
    folder(variant_profile("ping", of="pong"))
    folder(variant_profile("pong", of="ping"))
    with pytest.raises(profiles.ProfileError, match="'pong' is itself a variant"):
        profiles.load("ping")


def test_a_gguf_file_in_chunks_names_each_part_in_order(folder):
    parts = [{"package": f"p-part{i}", "version": "1.0", "member": f"p_part{i}/data/f.gguf.part0{i}"} for i in (1, 2)]
    folder(base_profile() | {"gguf": base_profile()["gguf"] | {"member": "f.gguf", "parts": parts}})
    source = profiles.load("base").gguf
    assert source is not None and [p.requirement for p in source.parts] == ["p-part1==1.0", "p-part2==1.0"]
    assert source.parts[1].member == "p_part2/data/f.gguf.part02" and source.parts[0].wheel_prefix == "p_part1-1.0-"
    folder(base_profile("bad") | {"gguf": base_profile()["gguf"] | {"parts": [{"package": "p", "version": "1"}]}})
    with pytest.raises(profiles.ProfileError, match=r"bad.json: gguf.parts\[0\]: key 'member' is missing"):
        profiles.load("bad")
