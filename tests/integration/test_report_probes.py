"""The report tools on results a user has mutated: each case gives the right number or a one-line error (exit 2)
naming the file, key or metric; no output replaces an input; no input makes a tool wait forever.

Results files are built by hand in lm-eval 0.4's shape (tests/report_fixtures.py). Every test that could block (FIFOs)
runs under an alarm, and the tool checks a file's type before opening it."""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import os
import re
import signal
import time
import tracemalloc
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx import output_dirs, precompute
from lm_eval_longctx.cli import main
from lm_eval_longctx.data import export_files
from lm_eval_longctx.keytokens import span_files
from tests.report_fixtures import (
    SUITE_SETTINGS,
    read_page,
    results_json,
    suite_results_json,
    write,
    write_export,
    write_results,
)


@contextmanager
def no_hang(seconds: float = 10.0):
    """Fail, instead of waiting forever, when the code inside blocks (a FIFO opened for reading)."""

    def fail(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def tokenizer(name: str, vocab: int, sha: str) -> dict:
    return {"name_or_path": name, "class": "PreTrainedTokenizerFast", "vocab_size": vocab, "vocab_sha256": sha}


def model_results(
    model: str, tok: dict, shift: float = 0.0, dtype: str = "float32", gen=None, tasks=None, every_task=True
) -> dict:
    """The suite's six tasks of one model (evaluator self), each recording its scoring dtype and, with
    ``every_task``, its tokenizer's identity; else only forgetting_curve records the tokenizer, as its path."""
    settings = {}
    for task, s in SUITE_SETTINGS.items():
        settings[task] = {**copy.deepcopy(s), "runtime": {"scoring": {"dtype": dtype}}}
        if every_task:
            settings[task]["tokenizer"] = tok
    if not every_task:
        settings["forgetting_curve"]["tokenizer"] = tok["name_or_path"]
    data = suite_results_json(model, shift=shift, settings=settings, tasks=tasks)
    data["config"]["model_args"] = f"pretrained={model},dtype={dtype}"
    data["config"]["model_dtype"] = f"torch.{dtype}"
    if "longeval_lines_acc" in data["configs"]:
        data["configs"]["longeval_lines_acc"]["generation_kwargs"] = gen or {
            "until": [],
            "max_gen_toks": 100,
            "do_sample": False,
            "temperature": 0.0,
        }
    return data


SMOL = tokenizer("HuggingFaceTB/SmolLM2-135M", 49152, "a1" * 32)
GEMMA = tokenizer("google/gemma-3-270m", 262144, "b2" * 32)


# ----------------------------------------------------------------------------------------------- which file


def test_gate_never_reads_the_baseline_folder_inside_the_run_folder(tmp_path, capsys):
    """The baseline folder inside the run folder, with a newer file name: its 5.469 used to be shown as the run's
    value and the gate passed; the run regressed to 0.5."""
    run_dir = tmp_path / "run"
    run = results_json(model="org/m")
    run["results"]["forgetting_curve"]["copy_acc,none"] = 0.5
    write(run_dir / "results_2026-01-01T00-00-00.json", run)
    write(run_dir / "baseline" / "results_2026-02-01T00-00-00.json", results_json(model="org/m"))
    assert main(["gate", str(run_dir), "--baseline", str(run_dir / "baseline")]) == 1
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith("| `forgetting_curve/copy_acc`"))
    assert "| 0.8 ± 0.01 | 0.5 ± 0.01 |" in row and "regressed" in row
    # the same with the run's file given itself
    assert (
        main(["gate", str(run_dir / "results_2026-01-01T00-00-00.json"), "--baseline", str(run_dir / "baseline")]) == 1
    )


def test_a_task_in_two_results_files_of_one_folder_is_named_not_picked_by_name(tmp_path, capsys):
    folder = tmp_path / "run"
    old, new = results_json(model="org/m", longppl=9.0), results_json(model="org/m", longppl=5.0)
    old["date"], new["date"] = 1_700_000_000.0, 1_800_000_000.0
    # the older run has the later file name: the name must not decide
    write(folder / "results_2026-09-09T00-00-00.json", old)
    write(folder / "results_2026-01-01T00-00-00.json", new)
    base = write(tmp_path / "base.json", results_json(model="org/m"))
    assert main(["gate", str(folder), "--baseline", str(base)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "longppl_govreport is in 2 results files" in line and "--newest" in line
    assert main(["gate", str(folder), "--baseline", str(base), "--newest"]) == 0  # the newer (by its date) is 5.0
    out, err = capsys.readouterr()
    assert "| `longppl_govreport/longppl` (lower better) | 5 ± 0.05 | 5 ± 0.05 |" in out
    assert "results_2026-01-01T00-00-00.json" in err and "the newest" in err


@pytest.mark.parametrize("order", ["new-old", "old-new"])
def test_leaderboard_order_of_arguments_decides_nothing(tmp_path, capsys, order):
    old, new = results_json(model="org/m", longppl=9.0), results_json(model="org/m", longppl=5.0)
    old["date"], new["date"] = 1_700_000_000.0, 1_800_000_000.0
    paths = [write(tmp_path / "new.json", new), write(tmp_path / "old.json", old)]
    if order == "old-new":
        paths.reverse()
    argv = ["leaderboard", *map(str, paths), "--metric", "*/longppl"]
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert "'org/m': longppl_govreport under the same settings in two results files" in line
    assert "new.json" in line and "old.json" in line
    assert main([*argv, "--newest"]) == 0
    assert "| org/m | 5 ± 0.05 |" in capsys.readouterr().out


def test_checkpoint_folders_in_natural_order_and_the_order_printed(tmp_path, capsys):
    """ckpt-200/ and ckpt-1000/ in one folder with --label step200 --label step1000: string order read ckpt-1000
    first and swapped the labels, the trend and its gate."""
    root = tmp_path / "runs"
    for step, shift in ((200, 0.0), (1000, 0.5)):
        data = suite_results_json(f"org/run/ckpt-{step}", shift=shift, tasks=["retrieval_gain"])
        write_results(root / f"ckpt-{step}", data)
    out = tmp_path / "card.html"
    assert main(["report", str(root), "-o", str(out), "--label", "step200", "--label", "step1000"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"1\. step200: .*ckpt-200\b", printed) and re.search(r"2\. step1000: .*ckpt-1000\b", printed)
    assert "shown by step: 200, 1000" in printed
    gains = {
        a["data-run"]: float(a["data-value"])
        for a, _ in read_page(out).numbers
        if a["data-metric"] == "retrieval_gain/retrieval_gain"
    }
    assert gains == {"step200": 5.469, "step1000": 5.469 - 0.5}
    # by the results' dates instead: the later run first when it started first
    for step, date in ((200, 1_800_000_000.0), (1000, 1_700_000_000.0)):
        f = next((root / f"ckpt-{step}").glob("results_*.json"))
        data = json.loads(f.read_text())
        data["date"] = date
        f.write_text(json.dumps(data))
    assert main(["report", str(root), "-o", str(out), "--order", "date"]) == 0
    printed = capsys.readouterr().out
    assert printed.index("ckpt-1000") < printed.index("ckpt-200")


# ----------------------------------------------------------------------------------------------- duplicates


@pytest.mark.parametrize(
    "header, column",
    [("model,longbench,longbench", "longbench"), ("model,model,longbench", "model")],
)
def test_correlate_refuses_a_column_named_twice(tmp_path, capsys, header, column):
    rows = "".join(f"m{i},{i},{-i}\n" for i in range(6))
    bench = write(tmp_path / "bench.csv", f"{header}\n{rows}")
    scores = write(tmp_path / "scores.csv", "model,longppl\n" + "".join(f"m{i},{i}\n" for i in range(6)))
    assert main(["correlate", "--scores", str(scores), "--benchmark", str(bench), "--n-resamples", "50"]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"column '{column}' appears 2 times" in line and str(bench) in line


# ----------------------------------------------------------------------------------------------- escaping


def markdown_rows(text: str) -> list[list[str]]:
    """The cells of every table row, split on unescaped pipes as GitHub does."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append(cells)
    return rows


FORGED = "org/evil | 0.0 ± 0 |\n| org/forged"


def test_markdown_tables_keep_their_columns_with_pipes_and_newlines_in_names(tmp_path, capsys):
    write(tmp_path / "a" / "results_2026.json", results_json(model=FORGED, longppl=7.0))
    write(tmp_path / "b" / "results_2026.json", results_json(model="org/fine", longppl=5.0))
    board_csv = tmp_path / "board.csv"
    assert (
        main(
            ["leaderboard", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "*/longppl", "--csv", str(board_csv)]
        )
        == 0
    )
    rows = markdown_rows(capsys.readouterr().out)
    assert len(rows) == 4 and all(len(r) == 2 for r in rows)  # header, rule, two models: no forged row
    assert "org/forged" not in [r[0].strip() for r in rows]
    parsed = list(csv.reader(io.StringIO(board_csv.read_text())))
    assert len(parsed) == 3 and all("\n" not in cell for row in parsed for cell in row)
    # the gate's summary too
    summary = tmp_path / "summary.md"
    run = write(tmp_path / "run" / "results_2026.json", results_json(model=FORGED))
    base = write(tmp_path / "base" / "results_2026.json", results_json(model=FORGED, longppl=7.5))
    assert main(["gate", str(run), "--baseline", str(base), "--summary", str(summary)]) == 0
    text = summary.read_text()
    assert text.splitlines()[0].count("\n") == 0 and "org/forged" in text.splitlines()[0]  # the name, escaped
    assert all(len(r) == 8 for r in markdown_rows(text))


def test_a_bidi_override_in_a_model_name_is_shown_as_an_escape(tmp_path):
    """Two runs whose names differ only by a right-to-left override looked identical on the page."""
    tricky = "org/mode\u202el"
    for name, folder in (("org/model", "a"), (tricky, "b")):
        write_results(tmp_path / "out" / folder, suite_results_json(name, tasks=["retrieval_gain"]))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "\u202e" not in text and "org/mode\\u202el" in text


def test_settings_differ_box_says_where_it_cuts(tmp_path):
    long_a, long_b = "/data/" + "x" * 100 + "/a.jsonl", "/data/" + "x" * 100 + "/b.jsonl"
    for folder, path in (("a", long_a), ("b", long_b)):
        s = {**SUITE_SETTINGS["retrieval_gain"], "data_files": path}
        s["data"] = {}  # no content hash: the path is compared
        data = suite_results_json(f"org/{folder}", tasks=["retrieval_gain"], settings={"retrieval_gain": s})
        write_results(tmp_path / "out" / folder, data)
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out)]) == 0
    box = out.read_text(encoding="utf-8").split('id="settings-differ"', 1)[1].split("</div>", 1)[0]
    assert "…" in box and f'title="{long_a}"' in box and f'title="{long_b}"' in box


# ----------------------------------------------------------------------------------------------- not comparable


def write_pair(tmp_path, run: dict, base: dict) -> tuple[Path, Path]:
    return (
        write(tmp_path / "run" / "results_2026-01-02T00-00-00.json", run),
        write(tmp_path / "base" / "results_2026-01-01T00-00-00.json", base),
    )


@pytest.mark.parametrize("every_task", [True, False])
@pytest.mark.parametrize("only", [None, "longppl_govreport/*", "retrieval_gain/*"])
def test_gate_never_compares_models_with_other_tokenizers(tmp_path, capsys, only, every_task):
    """SmolLM2-135M against Gemma-3-270M, each evaluator self: restricted to LongPPL it said 'regressed', to
    retrieval_gain PASS with nll_with 'improved' (nats per token across two tokenizers). A tokenizer recorded by
    one task (forgetting_curve, today) tells the models apart for every task."""
    run, base = write_pair(
        tmp_path,
        model_results("google/gemma-3-270m", GEMMA, shift=2.0, every_task=every_task),
        model_results("SmolLM2", SMOL, every_task=every_task),
    )
    extra = []
    if only:
        extra = ["--config", str(write(tmp_path / "gate.json", {"only": [only]}))]
    assert main(["gate", str(run), "--baseline", str(base), *extra]) == 2
    line = one_line(capsys.readouterr().err)
    assert "refusing to compare" in line
    assert 'longppl_govreport: evaluator ("self (SmolLM2)" -> "self (google/gemma-3-270m)")' in line
    if every_task:  # every task's differing settings are named
        for task in SUITE_SETTINGS:
            assert f"{task}: " in line and "tokenizer.vocab_sha256" in line
    else:
        assert 'forgetting_curve: tokenizer ("HuggingFaceTB/SmolLM2-135M" -> "google/gemma-3-270m")' in line


@pytest.mark.parametrize("every_task", [True, False])
def test_report_card_box_names_the_differences_of_every_task(tmp_path, every_task):
    """The box used to list forgetting_curve's tokenizer only: LongPPL's evaluator (self: each model its own)
    differs too, and, once recorded, every task's tokenizer."""
    write_results(tmp_path / "out" / "smol", model_results("SmolLM2", SMOL, every_task=every_task))
    write_results(tmp_path / "out" / "gemma", model_results("google/gemma-3-270m", GEMMA, every_task=every_task))
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(out)]) == 0
    box = out.read_text(encoding="utf-8").split('id="settings-differ"', 1)[1].split("</div>", 1)[0]
    tasks = SUITE_SETTINGS if every_task else ["longppl_govreport", "forgetting_curve"]
    for task in tasks:
        assert f"<strong>{task}</strong>" in box
    assert "<code>evaluator</code>: <code>self (google/gemma-3-270m)</code> → <code>self (SmolLM2)</code>" in box


@pytest.mark.parametrize(
    "gen, key",
    [
        ({"until": [], "max_gen_toks": 100, "do_sample": True, "temperature": 1.5}, "generation_kwargs.do_sample"),
        ({"until": [], "max_gen_toks": 3, "do_sample": False, "temperature": 0.0}, "generation_kwargs.max_gen_toks"),
    ],
)
def test_gate_refuses_other_generation_settings(tmp_path, capsys, gen, key):
    run, base = write_pair(tmp_path, model_results("org/m", SMOL, gen=gen), model_results("org/m", SMOL))
    assert main(["gate", str(run), "--baseline", str(base)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "longeval_lines_acc: " in line and key in line


def test_gate_refuses_another_dtype_even_for_another_task(tmp_path, capsys):
    run, base = write_pair(tmp_path, model_results("org/m", SMOL, dtype="bfloat16"), model_results("org/m", SMOL))
    cfg = write(tmp_path / "gate.json", {"only": ["retrieval_gain/*"]})
    assert main(["gate", str(run), "--baseline", str(base), "--config", str(cfg)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "runtime.scoring.dtype" in line and "run.model_dtype" in line


def test_leaderboard_keeps_a_float32_and_a_bfloat16_run_apart(tmp_path, capsys):
    fp32 = model_results("org/m", SMOL, dtype="float32", tasks=["retrieval_gain"])
    bf16 = model_results("org/m", SMOL, shift=0.3, dtype="bfloat16", tasks=["retrieval_gain"])
    write(tmp_path / "fp32" / "results_2026-01-01T00-00-00.json", fp32)
    write(tmp_path / "bf16" / "results_2026-01-02T00-00-00.json", bf16)
    assert main(["leaderboard", str(tmp_path), "--metric", "*/retrieval_gain"]) == 0
    rows = markdown_rows(capsys.readouterr().out)[2:]
    labels = sorted(r[0].strip() for r in rows)
    assert len(rows) == 2 and all("dtype=" in label for label in labels), labels
    assert any("bfloat16" in label for label in labels) and any("float32" in label for label in labels)


@pytest.mark.parametrize(
    "config, named",
    [
        ({"metrics": {"longppl_govrepot/*": {"abs": 1.0}}}, "'longppl_govrepot/*'"),
        ({"only": ["retrieval_gian/*"]}, "'retrieval_gian/*'"),
        ({"ignore_settings": ["tokenzier"]}, "'tokenzier'"),
    ],
)
def test_a_typo_in_the_gate_config_is_named(tmp_path, capsys, config, named):
    run, base = write_pair(tmp_path, model_results("org/m", SMOL), model_results("org/m", SMOL))
    cfg = write(tmp_path / "gate.json", config)
    assert main(["gate", str(run), "--baseline", str(base), "--config", str(cfg)]) == 2
    line = one_line(capsys.readouterr().err)
    assert named in line and "closest: " in line


# ----------------------------------------------------------------------------------------------- outputs


def _six_cases(tmp_path):
    run = write(tmp_path / "run" / "results_2026-01-02T00-00-00.json", results_json(model="org/m"))
    base = write(tmp_path / "base" / "results_2026-01-01T00-00-00.json", results_json(model="org/m"))
    for i in range(5):
        write(tmp_path / "res" / f"m{i}" / "results_2026.json", results_json(model=f"m{i}", longppl=5.0 + i))
    bench = write(tmp_path / "bench.csv", "model,longbench\n" + "".join(f"m{i},{10 - i}\n" for i in range(5)))
    card_in = next((tmp_path / "res" / "m0").glob("results_*.json"))
    return [
        (["gate", str(run), "--baseline", str(base), "--summary", str(run)], run),
        (["gate", str(run), "--baseline", str(base), "--html", str(base)], base),
        (["leaderboard", str(tmp_path / "res"), "--csv", str(card_in)], card_in),
        (["leaderboard", str(tmp_path / "res"), "--markdown", str(card_in)], card_in),
        (["report", str(tmp_path / "res"), "-o", str(card_in)], card_in),
        (
            ["correlate", "--results", str(tmp_path / "res"), "--metric", "longppl_govreport/longppl", "--benchmark"]
            + [str(bench), "--out", str(bench), "--n-resamples", "50"],
            bench,
        ),
    ]


@pytest.mark.parametrize("case", range(6))
def test_no_output_replaces_an_input(tmp_path, capsys, case):
    argv, victim = _six_cases(tmp_path)[case]
    before = victim.read_bytes()
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert "is an input of this command" in line and str(victim) in line
    assert victim.read_bytes() == before


def test_an_output_through_a_link_to_an_input_is_refused(tmp_path, capsys):
    run = write(tmp_path / "run" / "results_2026.json", results_json(model="org/m"))
    link = tmp_path / "summary.md"
    link.symlink_to(run)
    before = run.read_bytes()
    assert main(["gate", str(run), "--baseline", str(run), "--summary", str(link)]) == 2
    assert "is an input of this command" in one_line(capsys.readouterr().err)
    assert run.read_bytes() == before


# ----------------------------------------------------------------------------------------------- span folders


def span_folder(path: Path) -> Path:
    span_files.write_span_dir(path, [[(0, 3)], []], ["abcdef", "ghij"], {"evaluator": "e", "trunc_len": 4})
    return path


def precompute_args(out: Path, overwrite: bool) -> argparse.Namespace:
    return argparse.Namespace(out=str(out), overwrite=overwrite)


def test_overwrite_never_deletes_a_users_file_in_a_span_folder(tmp_path, capsys):
    out = span_folder(tmp_path / "spans")
    (out / "notes.txt").write_text("my notes")
    write(out / "results_2026.json", results_json())
    assert precompute.run(precompute_args(out, overwrite=True)) == 2
    line = one_line(capsys.readouterr().err)
    assert "files this command did not write (notes.txt, results_2026.json)" in line
    assert (out / "notes.txt").read_text() == "my notes" and (out / "results_2026.json").is_file()
    assert (out / "slice_0.txt").is_file()


def test_overwrite_accepts_a_folder_of_its_own_files_only(tmp_path):
    out = span_folder(tmp_path / "spans")
    precompute.check_output(out, overwrite=True)
    (out / output_dirs.MARKER).write_text("{}")
    precompute.check_output(out, overwrite=True)
    with pytest.raises(precompute.OutputFolderError, match="is not empty; pass --overwrite"):
        precompute.check_output(out, overwrite=False)


def test_a_second_writer_of_one_span_folder_fails_instead_of_replacing_it(tmp_path, capsys):
    out = tmp_path / "spans"
    with output_dirs.locked(out, precompute.PURPOSE):
        assert precompute.run(precompute_args(out, overwrite=False)) == 2
        assert "another precompute-spans run is writing it now" in one_line(capsys.readouterr().err)
    assert not output_dirs.lock_path(out).exists()
    # the finished folder of one run is never replaced by another's, even when it appeared after the checks
    first = span_folder(tmp_path / "first")
    first.rename(out)
    second = span_folder(tmp_path / "tmp" / "spans")
    with pytest.raises(precompute.OutputFolderError, match="is not empty"):
        precompute.place(second, out, tmp_path / "tmp" / "previous", overwrite=False)
    assert span_files.read_span_dir(out, ["abcdef", "ghij"]).verified and second.is_dir()


def test_span_files_are_checked_against_their_size_before_reading(tmp_path):
    f = tmp_path / "slice_0.txt"
    f.write_text("[0, 3]" + " " * 100_000)
    with pytest.raises(ValueError, match="more than the"):
        span_files.read_span_file(f, text_length=10)
    fifo = tmp_path / "slice_1.txt"
    os.mkfifo(fifo)
    with no_hang(), pytest.raises(ValueError, match="not a regular file"):
        span_files.read_span_file(fifo, text_length=10)


# ----------------------------------------------------------------------------------------------- no hang


def test_a_fifo_named_like_a_results_file_is_refused_not_read(tmp_path, capsys):
    folder = tmp_path / "run"
    write(folder / "results_2026-01-01T00-00-00.json", results_json(model="org/m"))
    fifo = folder / "results_2026-02-01T00-00-00.json"
    os.mkfifo(fifo)
    base = write(tmp_path / "base.json", results_json(model="org/m"))
    with no_hang():
        assert main(["gate", str(folder), "--baseline", str(base)]) == 2
        line = one_line(capsys.readouterr().err)
        assert str(fifo) in line and "a FIFO" in line
        assert main(["report", str(folder), "-o", str(tmp_path / "card.html")]) == 2
        assert "a FIFO" in one_line(capsys.readouterr().err)
        assert main(["leaderboard", str(folder)]) == 2
        assert "a FIFO" in one_line(capsys.readouterr().err)
        assert main(["gate", str(base), "--baseline", str(base), "--config", str(fifo)]) == 2
        assert "a FIFO" in one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------------------------- exports


def _member(zf: zipfile.ZipFile, name: str, header: dict, data: bytes) -> None:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    zf.writestr(name + ".npy", buf.getvalue() + data, compress_type=zipfile.ZIP_DEFLATED)


def hostile_export(root: Path, member) -> Path:
    write_export(root)
    doc = root / "longppl_govreport" / "doc_00000.npz"
    with np.load(doc) as z:
        arrays = {k: z[k] for k in z.files}
    with zipfile.ZipFile(doc, "w") as zf:
        for k, a in arrays.items():
            if k != "lsd":
                buf = io.BytesIO()
                np.lib.format.write_array(buf, a)
                zf.writestr(k + ".npy", buf.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
        member(zf)
    return root


def test_an_array_header_of_ten_trillion_values_is_refused_before_allocation(tmp_path, capsys):
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**13,)}
    root = hostile_export(tmp_path / "e", lambda zf: _member(zf, "lsd", header, b"\0" * 64))
    assert main(["view", str(root), "-o", str(tmp_path / "page.html")]) == 2
    line = one_line(capsys.readouterr().err)
    assert "doc_00000.npz" in line and "'lsd.npy' declares shape (10000000000000,)" in line


def test_a_compressed_bomb_is_refused_before_it_is_decompressed(tmp_path, capsys):
    n = 24 * 2**20  # 96 MiB of float32 zeros, about 100 KB deflated
    header = {"descr": "<f4", "fortran_order": False, "shape": (n,)}
    root = hostile_export(tmp_path / "e", lambda zf: _member(zf, "lsd", header, bytes(4 * n)))
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        code = main(["view", str(root), "-o", str(tmp_path / "page.html")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2
    line = one_line(capsys.readouterr().err)
    assert "declare" in line and "bytes unpacked, more than the" in line and "doc_00000.npz" in line
    assert peak < 32 * 2**20 and time.perf_counter() - t0 < 5, (peak, time.perf_counter() - t0)


def test_the_viewer_chooses_an_export_by_its_view(tmp_path, capsys):
    root = write_export(tmp_path / "e")
    other = root / "retrieval_gain"
    other.mkdir()
    (other / export_files.MANIFEST).write_text(
        json.dumps(
            {
                "format": export_files.FORMAT,
                "task": "retrieval_gain",
                "settings": {},
                "view": None,
                "columns": {"gain": "x"},
            }
        )
    )
    assert main(["view", str(root), "-o", str(tmp_path / "page.html")]) == 0  # the key-token one of the two
    capsys.readouterr()
    assert main(["view", str(other), "-o", str(tmp_path / "page.html")]) == 2
    line = one_line(capsys.readouterr().err)
    assert "no key-token export" in line and "lack the arrays the key-token view reads" in line
    manifest = json.loads((root / "longppl_govreport" / export_files.MANIFEST).read_text())
    manifest["view"] = "something_else"
    (root / "longppl_govreport" / export_files.MANIFEST).write_text(json.dumps(manifest))
    assert main(["view", str(root), "-o", str(tmp_path / "page.html")]) == 2
    assert "for the view 'something_else'" in one_line(capsys.readouterr().err)


def test_the_viewer_page_is_never_written_over_its_export(tmp_path, capsys):
    root = write_export(tmp_path / "e")
    doc = root / "longppl_govreport" / "doc_00000.npz"
    before = doc.read_bytes()
    assert main(["view", str(root), "-o", str(doc)]) == 2
    assert "is an input of this command" in one_line(capsys.readouterr().err)
    assert doc.read_bytes() == before


# ----------------------------------------------------------------------------------------------- raw errors


def test_a_metric_name_with_dollar_signs_is_text_in_the_pictures(tmp_path, capsys):
    """acc$^$ used to stop the report with "ValueError" and a pyparsing dump from matplotlib's mathtext."""
    for step in (100, 200):
        data = {
            "results": {"arc": {"alias": "arc", "acc$^$,none": 0.5 + step / 1000, "acc$^$_stderr,none": 0.01}},
            "higher_is_better": {"arc": {"acc$^$": True}},
            "configs": {"arc": {"task": "arc"}},
            "versions": {"arc": 1},
            "n-samples": {"arc": {"original": 10, "effective": 10}},
            "model_name": f"org/$run$/step{step}",
        }
        write_results(tmp_path / f"s{step}", data)
    out = tmp_path / "card.html"
    assert main(["report", str(tmp_path / "s100"), str(tmp_path / "s200"), "-o", str(out)]) == 0, (
        capsys.readouterr().err
    )
    assert 'alt="arc/acc$^$ against the training step"' in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "damage, named",
    [
        ("huge_integer", "results.retrieval_gain.retrieval_gain,none is an integer of 400 digits"),
        ("length_beyond_int64", "copy_acc@99999999999999999999"),
        ("claimed_infinity", "claimed_length of forgetting_curve is inf"),
    ],
)
def test_numbers_beyond_any_float_or_length_name_the_file_and_key(tmp_path, capsys, damage, named):
    data = suite_results_json("org/m", tasks=["forgetting_curve", "retrieval_gain"])
    if damage == "huge_integer":
        data["results"]["retrieval_gain"]["retrieval_gain,none"] = 10**399
    elif damage == "length_beyond_int64":
        data["results"]["forgetting_curve"]["copy_acc@99999999999999999999,none"] = 0.5
    else:
        data["configs"]["forgetting_curve"]["metadata"]["longctx_settings"]["claimed_length"] = float("inf")
    path = write_results(tmp_path / "out", data)
    assert main(["report", str(tmp_path / "out"), "-o", str(tmp_path / "card.html")]) == 2
    line = one_line(capsys.readouterr().err)
    assert str(path) in line and named in line, line
    assert "OverflowError: cannot" not in line and "failed" not in line


def test_results_in_lm_eval_0_3_format_are_named(tmp_path, capsys):
    data = {
        "results": {"longppl_govreport": {"longppl": 5.0, "longppl_stderr": 0.1}},
        "versions": {"longppl_govreport": 0},
        "config": {"model_args": "pretrained=org/old"},
    }
    path = write(tmp_path / "old" / "results.json", data)
    for argv in (["report", str(tmp_path / "old"), "-o", str(tmp_path / "card.html")], ["leaderboard", str(path)]):
        assert main(argv) == 2
        line = one_line(capsys.readouterr().err)
        assert str(path) in line and "results.longppl_govreport.longppl has no ',filter'" in line and "0.3" in line
    assert not (tmp_path / "card.html").exists()


def test_no_metrics_at_all_is_named_with_the_files(tmp_path, capsys):
    data = results_json(model="org/m")
    data["results"] = {t: {"alias": t, "bypass,none": 999, "bypass_stderr,none": "N/A"} for t in data["results"]}
    path = write(tmp_path / "p" / "results_2026.json", data)
    assert main(["leaderboard", str(path)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "no metrics in 1 results file(s)" in line and str(path) in line and "--predict_only" in line
    assert main(["report", str(path), "-o", str(tmp_path / "card.html")]) == 2
    assert "no metrics in" in one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------------------------- two real runs


@pytest.mark.integration
def test_two_precompute_runs_into_one_new_folder_at_once(tmp_path, model_dirs, corpus_texts):
    """Both used to exit 0 saying "wrote 2 span files", the first run's folder silently replaced by the second's.
    Now one writes the folder and the other fails, naming it (the lock, or the folder that appeared meanwhile)."""
    import subprocess
    import sys

    from tests.harness_utils import write_docs

    root = Path(__file__).resolve().parents[2]
    docs = write_docs(tmp_path / "docs.jsonl", [t[:1200] for t in corpus_texts[:2]])
    out = tmp_path / "spans"
    common = ["--evaluator", model_dirs["b"], "--out", str(out), "--data-files", docs, "--num-docs", "2"]
    common += ["--device", "cpu", "--trunc-len", "40", "--sliding-window", "16", "--beta", "-10"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lm_eval_longctx", "precompute-spans", *common, "--alpha", alpha],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for alpha in ("2.0", "0.5")
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    won = next(i for i, (code, _) in enumerate(results) if code == 0)
    winner, loser = results[won][1], results[1 - won][1]
    assert "wrote 2 span files" in winner and "wrote" not in loser
    assert "another precompute-spans run is writing it now" in loser or "is not empty" in loser, loser
    assert json.loads((out / span_files.MANIFEST).read_text())["alpha"] == (2.0, 0.5)[won]  # the winner's, whole
    manifest = json.loads((out / span_files.MANIFEST).read_text())
    assert sorted(manifest["slice_sha256"]) == ["slice_0.txt", "slice_1.txt"]
    assert all(output_dirs.file_sha256(out / name) == sha for name, sha in manifest["slice_sha256"].items())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".spans")) == []  # no lock or tmp left
