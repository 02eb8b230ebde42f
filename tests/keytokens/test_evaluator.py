"""The evaluator's file-digest memo is only a memo: one that cannot be read or written changes nothing and never
waits on a FIFO."""

from __future__ import annotations

import os
import threading

import pytest

from lm_eval_longctx.keytokens import evaluator


def _checkpoint(folder):
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    return folder


@pytest.mark.parametrize("memo", ["fifo", "symlink loop", "a file for the folder", "a folder for the file"])
def test_a_memo_that_cannot_be_used_changes_nothing(tmp_path, memo):
    checkpoint = _checkpoint(tmp_path / "model")
    expected = evaluator.folder_fingerprint(checkpoint)
    memo_dir = tmp_path / "memo"
    if memo == "a file for the folder":
        memo_dir.write_text("not a folder")
    else:
        memo_dir.mkdir()
        if memo == "fifo":
            os.mkfifo(memo_dir / "file_sha256.json")
        elif memo == "symlink loop":
            os.symlink(memo_dir / "b", memo_dir / "file_sha256.json")
            os.symlink(memo_dir / "file_sha256.json", memo_dir / "b")
        else:
            (memo_dir / "file_sha256.json").mkdir()
    got: list = []
    thread = threading.Thread(
        target=lambda: got.append(evaluator.folder_fingerprint(checkpoint, memo_dir)), daemon=True
    )
    thread.start()
    thread.join(10)
    if thread.is_alive():  # open the FIFO's other end so that the waiting read returns, then fail
        os.close(os.open(memo_dir / "file_sha256.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the memo was waited on")
    assert got == [expected]
