"""scripts/bench_long_pass.py on the CPU at a tiny size: the retrieval-gain map's peak memory stays within 1.25x of
one long pass (its continuations read on the one cache of the prefix, never a copy per cell), full and chunked give
the same log-probs, and the plan's count is not below what the passes hold."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_map_holds_no_more_than_one_long_pass(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_long_pass
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out = tmp_path / "bench.json"
    argv = ["--lengths", "1024", "--map-length", "4096", "--repeats", "1", "--threads", "1", "--json", str(out)]
    assert bench_long_pass.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    (single,) = [r for r in rows if "decoder" in r]
    (with_map,) = [r for r in rows if "map" in r]
    assert single["max_abs_diff_full_chunked"] <= 1e-4
    assert with_map["map_over_full_peak"] <= 1.25, with_map
    for row, path in ((single, "full"), (single, "chunked"), (with_map, "full"), (with_map, "map")):
        r = row[path]
        # the plan may count more than the pass holds, never much less (the allocator's slack aside)
        assert r["peak_mib"] <= 1.5 * r["estimate_mib"] + 2, (path, r)
