"""The key-span cache is an optimisation: a cache folder or entry that cannot be used costs the run one warning,
never the run, and never a wait on a FIFO."""

from __future__ import annotations

import errno
import logging
import os
import threading
import warnings

import numpy as np
import pytest

from lm_eval_longctx.keytokens.cache import SpanCache, default_cache_dir
from lm_eval_longctx.keytokens.evaluator import EvaluatorJudgement


def _judgement(n: int = 20) -> EvaluatorJudgement:
    offsets = np.stack([np.arange(n), np.arange(n) + 1], axis=1).astype(np.int64)
    return EvaluatorJudgement([(0, 1), (5, 7)], offsets, np.linspace(-1, 1, n - 1).astype(np.float32))


def _round_trip(cache: SpanCache, n_texts: int = 3) -> list:
    """What a run does with the cache for ``n_texts`` documents: look each up, store it on a miss."""
    got = []
    for k in range(n_texts):
        key = cache.key(f"text {k}", {"k": 1})
        got.append(cache.get(key))
        cache.put(key, _judgement(), {"k": 1})
    return got


def _cache_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lm_eval_longctx" and r.levelno == logging.WARNING]


def _regular_file(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    return tmp_path / "a-file", "not a directory"


def _symlink_loop(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    return tmp_path / "a", "too many levels of symbolic links"


def _failing_create(monkeypatch, tmp_path, code: int):
    """Creating any file or folder under ``tmp_path`` fails with ``code`` (a read-only or full file system; as root
    a chmod would not stop the write)."""
    real_open, real_mkdir = os.open, os.mkdir

    def failing_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path).startswith(str(tmp_path)):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    def failing_mkdir(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path)) and not os.path.isdir(path):
            raise OSError(code, os.strerror(code), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    monkeypatch.setattr(os, "mkdir", failing_mkdir)


def _read_only(tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir()
    _failing_create(monkeypatch, tmp_path, errno.EROFS)
    return tmp_path / "cache", "read-only file system"


def _full(tmp_path, monkeypatch):
    """The file system fills up while an entry is written: the bytes of the write do not fit."""
    real_fdopen = os.fdopen

    class FullFile:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[:10])
            self.f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fdopen(fd, mode="r", *args, **kwargs):
        f = real_fdopen(fd, mode, *args, **kwargs)
        return FullFile(f) if "w" in mode else f

    monkeypatch.setattr(os, "fdopen", fdopen)
    return tmp_path / "cache", "no space left on device"


@pytest.mark.parametrize("broken", ["regular file", "symlink loop", "read-only", "full"])
def test_a_cache_folder_that_cannot_be_used_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch, caplog, broken):
    """LM_EVAL_LONGCTX_CACHE at a file, a symlink loop, a read-only or a full file system: every document is still
    judged (a miss), one warning names the folder, the OS error and that the run continues without the cache."""
    if broken == "regular file":
        root, cause = _regular_file(tmp_path)
    elif broken == "symlink loop":
        root, cause = _symlink_loop(tmp_path)
    elif broken == "read-only":
        root, cause = _read_only(tmp_path, monkeypatch)
    else:
        root, cause = _full(tmp_path, monkeypatch)
    monkeypatch.setenv("LM_EVAL_LONGCTX_CACHE", str(root))
    cache = SpanCache(default_cache_dir())
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        assert _round_trip(cache) == [None, None, None]
        assert _round_trip(SpanCache(default_cache_dir())) == [None, None, None]
    [message] = _cache_warnings(caplog)
    assert str(default_cache_dir()) in message
    assert cause in message.lower() and "errno" in message and "the run continues without the cache" in message
    monkeypatch.undo()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # no part of an entry left
    assert not [p for p in tmp_path.rglob("*.spans.npz")]


def test_a_read_only_cache_is_still_read(tmp_path, monkeypatch, caplog):
    """A cache shared read-only: its entries are used; the first entry it cannot store is the one warning."""
    cache = SpanCache(tmp_path / "cache")
    key = cache.key("text 0", {"k": 1})
    cache.put(key, _judgement(), {"k": 1})
    _failing_create(monkeypatch, tmp_path, errno.EROFS)
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        got = _round_trip(cache)
    assert got[0] is not None and got[0].spans == [(0, 1), (5, 7)] and got[1:] == [None, None]
    assert len(_cache_warnings(caplog)) == 1


def test_an_entry_replaced_by_a_folder_is_a_miss_and_one_warning(tmp_path, caplog):
    cache = SpanCache(tmp_path)
    key = cache.key("text 0", {"k": 1})
    cache.path(key).mkdir(parents=True)
    (cache.path(key) / "inside").write_text("someone else's")
    with caplog.at_level(logging.WARNING, logger="lm_eval_longctx"):
        assert _round_trip(cache) == [None, None, None]
    [message] = _cache_warnings(caplog)
    assert str(cache.path(key)) in message and "is a directory" in message
    assert (cache.path(key) / "inside").read_text() == "someone else's"  # nothing of it removed


def _without_blocking(fn, fifo, seconds: float = 10.0):
    """``fn()``'s value, or a failure when it has not returned after ``seconds`` (opening a FIFO waits for the other
    end forever)."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):  # open the other end: it returns
            try:
                os.close(os.open(fifo, flags))
            except OSError:
                pass
        pytest.fail(f"the cache waited on the FIFO {fifo}")
    return out.get("value")


@pytest.mark.parametrize("through_symlink", [False, True])
def test_an_entry_replaced_by_a_fifo_never_blocks_the_run(tmp_path, through_symlink):
    cache = SpanCache(tmp_path / "cache")
    key = cache.key("text 0", {"k": 1})
    cache.path(key).parent.mkdir(parents=True)
    fifo = tmp_path / "fifo" if through_symlink else cache.path(key)
    os.mkfifo(fifo)
    if through_symlink:
        os.symlink(fifo, cache.path(key))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _without_blocking(lambda: _round_trip(cache), fifo) == [None, None, None]
    assert cache.get(key) is not None  # the entry took the place of the FIFO (or of the link to it)
    if through_symlink:
        assert fifo.is_fifo()  # the FIFO the link pointed to is left alone


def test_an_unreadable_entry_is_a_miss_and_is_written_again(tmp_path, monkeypatch):
    cache = SpanCache(tmp_path)
    key = cache.key("text 0", {"k": 1})
    cache.put(key, _judgement(), {"k": 1})
    real_open = os.open

    def failing_open(path, flags, *args, **kwargs):
        if str(path) == str(cache.path(key)):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    with pytest.warns(UserWarning, match="unusable.*Input/output error"):
        assert cache.get(key) is None
    monkeypatch.undo()
    cache.put(key, _judgement(), {"k": 1})
    assert cache.get(key).spans == [(0, 1), (5, 7)]
