"""Profiles of known checkpoints, one JSON file each (``<name>.json`` in this folder): the model card, the window it
declares and where that is stated, the GGUF file a registry package ships it in (``from-gguf``), and what the audit
must find (``audit --profile``). A second model is a second file. A variant profile is the checkpoint of another
profile with keys of its ``config.json`` set (``variant``): the same tensors, a reach known by construction. The files
are parsed as data and checked key by key; no import beyond the standard library."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
VERDICTS = (
    "uses its claimed window",
    "effective below the claim",
    "no effective context",
    "not tested up to W",
    "undecided at W",
)
# what RULER's needle tasks find of the claimed window (the audit's RULER stage)
RULER_ANSWERS = ("used", "refuted", "undecided")


class ProfileError(ValueError):
    """A profile that does not exist or whose file does not hold what a profile must."""


class PackagePin:
    """A package of the Python package index at one version: what pip is asked for, and how its wheel is named."""

    package: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class GgufPart(PackagePin):
    """One chunk of a GGUF file that is shipped in several packages: its package and the chunk's path inside it."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class GgufSource(PackagePin):
    """A GGUF file shipped inside a package of the Python package index, pinned by the file's SHA-256."""

    name: str  # the profile's name: the SOURCE of ``from-gguf``
    package: str  # pip's name of the package
    version: str
    member: str  # path of the GGUF inside the wheel
    sha256: str  # of the GGUF file
    size: int  # bytes of the GGUF file
    licence: str
    original: str  # the model the GGUF was quantized from
    quantized_from: str  # where the GGUF file itself comes from
    # a file shipped in chunks: the packages that hold them, in order (``member`` is then the assembled file's name)
    parts: tuple[GgufPart, ...] = ()


@dataclass(frozen=True)
class Variant:
    """The checkpoint of another profile with keys of its ``config.json`` set; every other file is the base's."""

    of: str  # the base profile: one with a ``gguf`` part and no variant
    config: dict  # config.json key -> the value set
    why: str  # what the change does to the model's reach


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    card: str
    window: int
    window_source: str
    gguf: GgufSource | None
    # "verdict" (one of VERDICTS), "claim" and "ruler" (one of RULER_ANSWERS: what the audit and RULER say of the
    # claim), "effective_length" (tokens)
    expect: dict
    variant: Variant | None = None


def _fields(data, where: str, required: dict[str, type], optional: dict[str, type] | None = None) -> dict:
    optional = optional or {}
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r}; known: {sorted({*required, *optional})}")
    for key, kind in {**required, **optional}.items():
        if key not in data:
            if key in required:
                raise ProfileError(f"{where}: key {key!r} is missing")
            continue
        value = data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProfileError(f"{where}: {key} must be a {kind.__name__}, got {type(value).__name__}")
    return data


def parse(data, where: str) -> Profile:
    """A profile from its parsed JSON; ``where`` names the file in errors. A variant's base is checked by ``load``."""
    d = _fields(
        data,
        where,
        {"name": str, "title": str, "card": str, "window": dict, "expect": dict},
        {"gguf": dict, "variant": dict},
    )
    window = _fields(d["window"], f"{where}: window", {"tokens": int, "source": str})
    if window["tokens"] < 1:
        raise ProfileError(f"{where}: window.tokens must be a positive number of tokens")
    expect = _fields(
        d["expect"], f"{where}: expect", {}, {"verdict": str, "claim": str, "effective_length": int, "ruler": str}
    )
    if "claim" in expect and expect["claim"] not in RULER_ANSWERS:
        raise ProfileError(f"{where}: expect.claim {expect['claim']!r} is not one of {list(RULER_ANSWERS)}")
    if "verdict" in expect and expect["verdict"] not in VERDICTS:
        raise ProfileError(f"{where}: expect.verdict {expect['verdict']!r} is not one of {list(VERDICTS)}")
    if expect.get("effective_length", 0) < 0:
        raise ProfileError(f"{where}: expect.effective_length must be a number of tokens, 0 or more")
    if "ruler" in expect and expect["ruler"] not in RULER_ANSWERS:
        raise ProfileError(f"{where}: expect.ruler {expect['ruler']!r} is not one of {list(RULER_ANSWERS)}")
    gguf = None
    if "gguf" in d:
        g = _fields(
            d["gguf"],
            f"{where}: gguf",
            {
                "package": str, "version": str, "member": str, "sha256": str, "size": int, "licence": str,
                "original": str, "quantized_from": str,
            },
            {"parts": list},
        )  # fmt: skip
        parts = tuple(
            GgufPart(**_fields(part, f"{where}: gguf.parts[{i}]", {"package": str, "version": str, "member": str}))
            for i, part in enumerate(g.get("parts", ()))
        )
        gguf = GgufSource(name=d["name"], **{**g, "parts": parts})
    variant = None
    if "variant" in d:
        if gguf is not None:
            raise ProfileError(
                f"{where}: a variant has no gguf part of its own (its base's is used): drop 'gguf' or 'variant'"
            )
        v = _fields(d["variant"], f"{where}: variant", {"of": str, "config": dict, "why": str})
        if not v["config"]:
            raise ProfileError(f"{where}: variant.config is empty: name the config.json keys the variant sets")
        if not v["why"].strip():
            raise ProfileError(f"{where}: variant.why is empty: say what the change does to the model's reach")
        variant = Variant(v["of"], dict(v["config"]), v["why"])
    return Profile(d["name"], d["title"], d["card"], window["tokens"], window["source"], gguf, dict(expect), variant)


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.json"))


def _read(name: str) -> Profile:
    """The profile ``name`` as its file states it, its variant's base unchecked."""
    path = FOLDER / f"{name}.json"
    if "/" in name or "\\" in name or not path.is_file():
        raise ProfileError(f"unknown profile {name!r}; known: {names()}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ProfileError(f"{path}: not a readable JSON profile ({err})") from None
    profile = parse(data, str(path))
    if profile.name != name:
        raise ProfileError(f"{path}: its name {profile.name!r} differs from its file name")
    return profile


def load(name: str) -> Profile:
    """The profile ``name`` (its file ``<name>.json`` here); an unknown name is an error listing the known ones. A
    variant's base must be a profile with a GGUF source and no variant of its own."""
    profile = _read(name)
    if profile.variant is not None:
        where = f"{FOLDER / name}.json: variant.of"
        bases = [n for n in names() if n != name]
        if profile.variant.of not in bases:
            raise ProfileError(f"{where}: no profile {profile.variant.of!r}; known: {bases}")
        base = _read(profile.variant.of)
        if base.variant is not None:
            raise ProfileError(
                f"{where}: {base.name!r} is itself a variant (of {base.variant.of!r}): name {base.variant.of!r} "
                "and set every key in this profile"
            )
        if base.gguf is None:
            raise ProfileError(f"{where}: {base.name!r} has no gguf part: a variant is built from its base's GGUF")
    return profile


def gguf_sources() -> dict[str, GgufSource]:
    """Every profile's GGUF source by profile name (``from-gguf``'s SOURCE names)."""
    profiles = {name: load(name) for name in names()}
    return {name: profile.gguf for name, profile in profiles.items() if profile.gguf is not None}


def variants() -> dict[str, Profile]:
    """Every variant profile by name (``from-gguf``'s SOURCE names built from their base's GGUF)."""
    profiles = {name: load(name) for name in names()}
    return {name: profile for name, profile in profiles.items() if profile.variant is not None}
