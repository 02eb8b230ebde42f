"""The files of an audit's stages, recorded and verified: a verdict is computed only from files the audit wrote.

When a stage finishes, ``audit.json`` records the SHA-256 and size of each of its files (the results JSON, the samples
files beside it, its pictures), by a path relative to the audit folder. Before a verdict is computed (the audit, its
early stop, ``--from-run``) and before a stage is copied (``--reuse``), every file is checked against that record: a
path that leaves the folder, a missing file, a file of another size or hash, or a samples file beside the results
that the record does not hold is refused, naming the file; nothing is followed outside the folder.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .. import output_dirs

FILES_KEY = "files"


class StageFileError(ValueError):
    """A stage file that is not the one the audit wrote (or a record that does not say which one it wrote)."""


def written_with(results_file: Path) -> list[Path]:
    """The files lm-eval and the suite wrote for one run beside its ``results_<stamp>.json``: every file of that
    folder whose name holds the stamp (the samples files, the pictures), the results file first."""
    stamp = results_file.stem[len("results_") :]
    beside = sorted(p for p in results_file.parent.iterdir() if p.is_file() and stamp in p.name and p != results_file)
    return [results_file, *beside]


def describe(path: Path) -> dict:
    return {"sha256": output_dirs.file_sha256(path), "bytes": path.stat().st_size}


def record_files(out: Path, results_file: Path) -> dict[str, dict]:
    """``{path relative to out: {"sha256", "bytes"}}`` of the files of the run whose results file is given."""
    root = out.resolve()
    return {path.resolve().relative_to(root).as_posix(): describe(path) for path in written_with(results_file)}


RERUN = "Run the audit again into a new folder"


def inside(out: Path, relative, where: str, way_out: str = RERUN) -> Path:
    """The file ``relative`` names under ``out``; a path that is absolute, not a string, or leads out of ``out``
    (``..``, a symbolic link) is refused, never followed (``where``: the record and key that hold it)."""
    if not isinstance(relative, str) or not relative:
        raise StageFileError(f"{where}: {relative!r} is not a path relative to the audit folder")
    pure = PurePosixPath(relative)
    if pure.is_absolute() or Path(relative).is_absolute() or ".." in pure.parts:
        raise StageFileError(
            f"{where}: {relative} is not inside the audit folder {out}; an audit is judged only on its own files "
            f"(nothing was read there). {way_out}"
        )
    root = out.resolve()
    path = (root / pure).resolve()
    if not path.is_relative_to(root):
        raise StageFileError(
            f"{where}: {relative} leads out of the audit folder {out} (a symbolic link to {path}); an audit is "
            f"judged only on its own files (nothing was read there). {way_out}"
        )
    return path


def verify_stage(out: Path, stage, where: str, way_out: str = RERUN) -> Path:
    """Check every file ``stage`` (a stage's record in ``audit.json``) lists against its size and SHA-256, and that
    every samples file beside its results file is one of them; return the results file. ``where`` names the record
    in messages, ``way_out`` is what they offer.

    Raises:
        StageFileError: a key missing, a path outside ``out``, a file missing, changed or not recorded.
    """
    if not isinstance(stage, dict):
        raise StageFileError(f"{where}: a stage record must be an object, got {type(stage).__name__}")
    length = stage.get("length", "?")
    where = f"{where}, stage of length {length}"
    for key in ("length", "results_file", FILES_KEY):
        if key not in stage:
            raise StageFileError(
                f'{where}: no "{key}" key; this audit.json was not written by this version of the audit (or was '
                f"edited). {way_out}"
            )
    results = inside(out, stage["results_file"], f'{where}, "results_file"', way_out)
    files = stage[FILES_KEY]
    if not isinstance(files, dict) or stage["results_file"] not in files:
        raise StageFileError(f'{where}: "{FILES_KEY}" does not list its results file {stage["results_file"]!r}')
    checked = set()
    for relative, expected in files.items():
        path = inside(out, relative, f'{where}, "{FILES_KEY}"', way_out)
        if not path.is_file():
            raise StageFileError(f"{path}: missing (audit.json lists it, {where}). {way_out}")
        if not isinstance(expected, dict) or describe(path) != {
            "sha256": expected.get("sha256"),
            "bytes": expected.get("bytes"),
        }:
            raise StageFileError(
                f"{path}: its size or SHA-256 differs from what audit.json records for it ({where}): not the file "
                f"the audit wrote (edited, cut or replaced); nothing was judged. {way_out}"
            )
        checked.add(path)
    stamp = results.stem[len("results_") :]
    for path in sorted(results.parent.glob(f"samples_*_{stamp}.jsonl")):
        if path.resolve() not in checked:
            raise StageFileError(
                f"{path}: a samples file beside {results.name} that audit.json does not list ({where}); the audit "
                f"did not write it. {way_out}"
            )
    return results
