"""Every input of the audit is checked before a model loads or a file is written, the same way for a new audit,
--from-run and --reuse; each refusal names the flag or key and the way out."""

from __future__ import annotations

import argparse

import pytest

from lm_eval_longctx.audit import command, inputs


def parse(*argv: str):
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "-5"], "--window -5: must be a whole number at least 1"),
        (["--window", "0"], "--window 0: must be a whole number at least 1"),
        (["--docs", "1"], "--docs 1: must be a whole number from 2"),
        (["--model-args", "dtype=float17"], "--model-args dtype=float17: not a torch dtype"),
        (["--model-args", "foo=1"], "--model-args foo: not an argument of lm-eval's hf backend"),
        (["--model-args", "max_length=abc"], "--model-args max_length 'abc': not a whole number"),
        (["--model-args", "pretrained=x"], "--model-args pretrained=: give it with --model"),
        (["--model-args", "device=cpu"], "--model-args device=: give it with --device"),
        (["--model-args", "dtype"], "'dtype' is not key=value"),
        (["--device", "foo"], "--device foo: not a device; give cpu, cuda, cuda:N or mps"),
        (["--batch-size", "abc"], "--batch-size 'abc': give a whole number"),
        (["--batch-size", "0"], "--batch-size '0': give a whole number"),
        (["--batch-size", "auto:x"], "--batch-size auto:N 'x': not a whole number"),
        (["--fraction", "1.5"], "--fraction 1.5: must lie in"),
        (["--threshold", "nan"], "--threshold nan: must be a finite number"),
    ],
)
def test_a_bad_flag_is_refused_by_name(argv, message, tmp_path):
    with pytest.raises(inputs.AuditInputError, match=message.replace("(", r"\(").replace("*", r"\*")):
        inputs.check(parse(str(tmp_path / "out"), "--model", str(tmp_path), *argv))
    assert not (tmp_path / "out").exists()


def test_cuda_without_a_gpu_is_refused(monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        inputs.AuditInputError, match="--device cuda: torch sees no CUDA device here; run with --device cpu"
    ):
        inputs.check_device("cuda")
    assert inputs.check_device(None) == "cpu"


def test_good_flags_pass_as_given(tmp_path):
    checked = inputs.check(
        parse(str(tmp_path / "out"), "--model", str(tmp_path), "--model-args", "dtype=bfloat16,max_length=4096",
              "--batch-size", "auto:4", "--device", "cpu", "--window", "8192", "--docs", "4")
    )  # fmt: skip
    assert checked.model_args == {"dtype": "bfloat16", "max_length": "4096"}
    assert (checked.batch_size, checked.device, checked.window, checked.docs) == ("auto:4", "cpu", 8192, 4)
    assert (checked.budget, checked.documents) == ("ci", "embedded")
    assert inputs.check_batch_size("auto") == "auto" and inputs.check_batch_size(" 8 ") == "8"


def test_from_run_takes_the_same_window_check_and_refuses_flags_it_would_ignore(tmp_path):
    with pytest.raises(inputs.AuditInputError, match="--window 0"):
        inputs.check(parse(str(tmp_path), "--from-run", "--window", "0"))
    with pytest.raises(inputs.AuditInputError, match="--model, --device: --from-run judges the stages already"):
        inputs.check(parse(str(tmp_path), "--from-run", "--model", "m", "--device", "cpu"))
    assert inputs.check(parse(str(tmp_path), "--from-run", "--window", "2048")).window == 2048


def test_reuse_must_name_an_earlier_audit_other_than_out(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(inputs.AuditInputError, match="--reuse .*: no audit.json there"):
        inputs.check(parse(str(out), "--model", str(tmp_path), "--reuse", str(tmp_path / "none")))
    out.mkdir()
    (out / "audit.json").write_text("{}")
    with pytest.raises(inputs.AuditInputError, match="is OUT itself"):
        inputs.check(parse(str(out), "--model", str(tmp_path), "--reuse", str(out)))


def test_the_model_args_examples_run():
    import doctest

    assert doctest.testmod(inputs, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
