"""scripts/bench_long_pass.py on the CPU at a tiny size: the retrieval-gain map's peak memory stays within 1.25x of
one long pass (its continuations read on the one cache of the prefix, never a copy per cell), full and chunked give
the same log-probs. (The plan's count against the measured peaks is printed, not asserted: a CPU's peak RSS of a
few MiB varies from run to run.)"""

from __future__ import annotations

import json

import pytest

from tests.scripts import script

# five worker processes, each loading torch and transformers: half a minute, so not in the fast subset
pytestmark = pytest.mark.integration


def test_the_map_holds_no_more_than_one_long_pass(tmp_path):
    bench_long_pass = script("bench_long_pass")
    out = tmp_path / "bench.json"
    argv = ["--lengths", "1024", "--map-length", "4096", "--repeats", "1", "--threads", "1", "--json", str(out)]
    assert bench_long_pass.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    (single,) = [r for r in rows if "decoder" in r]
    (with_map,) = [r for r in rows if "map" in r]
    assert single["max_abs_diff_full_chunked"] <= 1e-4
    assert with_map["map_over_full_peak"] <= 1.25, with_map
