"""scripts/bench_suite.py on the CPU at its tiny size: every task through lm-eval, each with its wall time, peak
memory, tokens forwarded and their floor, and LongEval's generation against its prefill + decode-step floor."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_benchmark_measures_every_task_and_its_floor(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_suite
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out = tmp_path / "suite.json"
    assert bench_suite.main(["--body", "tiny", "--size", "tiny", "--generation-cases", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["task"] for r in result["rows"]] == list(bench_suite.TASKS)
    assert result["decoder_tokens_per_second"] > 0 and result["task_index_seconds"] > 0
    for row in result["rows"]:
        assert row["seconds"] > 0 and row["peak_mib"] >= 0, row
        assert row["tokens_forwarded"] > 0, row  # the engine's own count, from the results' runtime.scoring
        assert row["floor_seconds"] == row["tokens_forwarded"] / result["decoder_tokens_per_second"]
        assert row["retries"] == []
    (gen,) = result["generation"]
    assert gen["prompt_tokens"] > 0 and gen["prefill_seconds"] > 0 and gen["decode_step_seconds"] > 0
    printed = capsys.readouterr().out
    assert "| task | wall s | peak MiB | tokens forwarded | floor s | wall / floor |" in printed
    assert all(f"| {task} |" in printed for task in bench_suite.TASKS)
