"""scripts/bench_suite.py on the CPU at its tiny size: every task through lm-eval, each with its wall time, peak
memory, tokens forwarded and their floor, and LongEval's generation against its prefill + decode-step floor."""

from __future__ import annotations

import json

from tests.scripts import script


def test_the_suite_benchmark_measures_every_task_and_its_floor(tmp_path, capsys):
    bench_suite = script("bench_suite")
    out = tmp_path / "suite.json"
    assert bench_suite.main(["--body", "tiny", "--size", "tiny", "--generation-cases", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["task"] for r in result["rows"]] == list(bench_suite.TASKS)
    assert result["task_index_seconds"] > 0
    for row in result["rows"]:
        assert row["seconds"] > 0 and row["peak_mib"] >= 0, row
        assert row["tokens_forwarded"] > 0, row  # the engine's own count, from the results' runtime.scoring
        # the ledger saw at least the tokens the engine says it forwarded (probes add a few)
        assert row["decoder_tokens"] >= row["tokens_forwarded"] and row["decoder_calls"] > 0, row
        # the floor is the time measured inside the decoder: part of the wall time, never all of it
        assert 0 < row["floor_seconds"] < row["seconds"] and row["head_rows"] > 0, row
        assert row["over_floor"] == row["seconds"] / row["floor_seconds"], row
        parts = row["floor_seconds"] + row["head_seconds"] + row["outside_forwards_seconds"]
        assert abs(parts - row["seconds"]) < 1e-9, row
        assert row["retries"] == []
    (gen,) = result["generation"]
    assert gen["prompt_tokens"] > 0 and gen["prefill_seconds"] > 0 and gen["decode_step_seconds"] > 0
    printed = capsys.readouterr().out
    assert "| task | wall s | peak MiB | tokens forwarded (engine) | decoder tokens | floor: in decoder s |" in printed
    assert "| **suite** |" in printed
    assert all(f"| {task} |" in printed for task in bench_suite.TASKS)
