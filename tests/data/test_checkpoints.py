"""A checkpoint's identity (``data/checkpoints.py``): the file-digest memo is only a memo (one that cannot be read or
written changes nothing and never waits on a FIFO); the audit's top-level digests are the same digests."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from lm_eval_longctx.data import checkpoints


def _checkpoint(folder):
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    return folder


@pytest.mark.parametrize("memo", ["fifo", "symlink loop", "a file for the folder", "a folder for the file"])
def test_a_memo_that_cannot_be_used_changes_nothing(tmp_path, memo):
    checkpoint = _checkpoint(tmp_path / "model")
    expected = checkpoints.folder_fingerprint(checkpoint)
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
        target=lambda: got.append(checkpoints.folder_fingerprint(checkpoint, memo_dir)), daemon=True
    )
    thread.start()
    thread.join(10)
    if thread.is_alive():  # open the FIFO's other end so that the waiting read returns, then fail
        os.close(os.open(memo_dir / "file_sha256.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the memo was waited on")
    assert got == [expected]


def test_top_level_digests_are_the_files_own_and_the_memo_is_reused(tmp_path):
    checkpoint = _checkpoint(tmp_path / "model")
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "extra.json").write_text("{}")
    (checkpoint / ".hidden.json").write_text("{}")
    top = checkpoints.folder_digests(checkpoint, tmp_path / "memo", recursive=False)
    assert list(top) == ["config.json", "model.safetensors"]
    assert top["model.safetensors"] == hashlib.sha256(b"weights" * 100).hexdigest()
    assert list(checkpoints.folder_digests(checkpoint)) == ["config.json", "model.safetensors", "sub/extra.json"]
    memo = json.loads((tmp_path / "memo" / checkpoints.MEMO_FILE).read_text())
    assert sorted(memo.values()) == sorted(top.values())
    # a changed weight file is another checkpoint
    before = checkpoints.folder_fingerprint(checkpoint, tmp_path / "memo")
    (checkpoint / "model.safetensors").write_bytes(b"other weights")
    assert checkpoints.folder_fingerprint(checkpoint, tmp_path / "memo") != before
