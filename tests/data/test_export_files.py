"""The per-token export on a nearly full disk: each file of it whole or not there, and one error line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_longctx import errors
from lm_eval_longctx.data import export_files
from tests.tiny import writes_cut_at


def _arrays(n: int = 5000) -> dict:
    rng = np.random.default_rng(0)
    return {"doc_id": np.asarray(0), "logprob": rng.normal(size=n).astype(np.float32), "text": np.asarray("a text")}


def test_a_manifest_that_does_not_fit_is_not_left(tmp_path):
    export = export_files.TokenExport(tmp_path / "export", "t", {"logprob": "per token"})
    with pytest.raises(export_files.ExportWriteError) as caught, writes_cut_at(100):
        export.write(0, _arrays(), {"setting": "x" * 500})
    assert f"cannot write {tmp_path / 'export' / 't' / export_files.MANIFEST}: file too large" in str(caught.value)
    assert errors.user_error(caught.value) is caught.value  # one line of ours, exit 2, no traceback
    assert list((tmp_path / "export" / "t").iterdir()) == []


def test_a_document_that_does_not_fit_is_not_left(tmp_path):
    export = export_files.TokenExport(tmp_path / "export", "t", {"logprob": "per token"})
    export.write(0, _arrays(10), {})
    folder = tmp_path / "export" / "t"
    manifest = (folder / export_files.MANIFEST).stat().st_size
    with (
        pytest.raises(export_files.ExportWriteError, match="doc_00001.npz: file too large"),
        writes_cut_at(manifest + 2000),
    ):
        export.write(1, _arrays(), {})
    assert sorted(p.name for p in folder.iterdir()) == ["doc_00000.npz", export_files.MANIFEST]
    with np.load(folder / "doc_00000.npz") as z:
        assert z["logprob"].shape == (10,)
