"""``lm-eval-longctx corpus``: a short local corpus of documents of at least N tokens, in one command."""

from __future__ import annotations

import json

from lm_eval_longctx import cli
from lm_eval_longctx.demo.run import default_model_dir


def test_documents_of_at_least_n_tokens_of_the_given_tokenizer(tmp_path, capsys):
    from transformers import AutoTokenizer

    out = tmp_path / "corpus.jsonl"
    assert (
        cli.main(["corpus", str(out), "--tokens", "3000", "--docs", "3", "--tokenizer", str(default_model_dir())]) == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(default_model_dir())
    sizes = [len(tok(r["text"], add_special_tokens=False)["input_ids"]) for r in rows]
    assert len(rows) == 3 and min(sizes) >= 3000 and max(sizes) < 3000 * 1.5
    assert "data_files" in capsys.readouterr().out


def test_an_existing_file_or_too_much_text_is_exit_2(tmp_path, capsys):
    out = tmp_path / "corpus.jsonl"
    out.write_text("mine")
    assert cli.main(["corpus", str(out), "--tokens", "100", "--docs", "1"]) == 2 and out.read_text() == "mine"
    assert cli.main(["corpus", str(tmp_path / "big.jsonl"), "--tokens", "10000000", "--docs", "2"]) == 2
    assert "holds" in capsys.readouterr().err and not (tmp_path / "big.jsonl").exists()
