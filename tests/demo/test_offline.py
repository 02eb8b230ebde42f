"""The offline demo's builder (``demo/offline.py``): a random model and its documents, built without a download."""

import json
from pathlib import Path

import pytest


@pytest.mark.integration
def test_offline_demo_builds(tmp_path):
    from lm_eval_longctx.demo.offline import build_demo

    info = build_demo(tmp_path / "demo", n_docs=2, chars_per_doc=3000, vocab_size=400)
    assert Path(info["model"], "config.json").is_file()
    lines = Path(info["docs"]).read_text().splitlines()
    assert len(lines) == 2 and all(len(json.loads(x)["text"]) == 3000 for x in lines)
