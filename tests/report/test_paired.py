"""The paired gate: per-document values from --log_samples files, the paired bootstrap against a slow reference,
the same-documents check, the fallbacks, and a real run of two checkpoints through `lm_eval --log_samples`."""

import hashlib
import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from lm_eval_longctx.cli import main
from lm_eval_longctx.metrics import bootstrap, per_token
from lm_eval_longctx.report import paired, run_samples
from tests.report_fixtures import DATE_BASE, DATE_RUN, corpus, doc_hash, write_run

TASK = "longppl_govreport"


def run_gate(tmp_path, run_docs, base_docs, *extra, **kw):
    write_run(tmp_path / "run", run_docs, DATE_RUN, **kw.get("run_kw", {}))
    write_run(tmp_path / "base", base_docs, DATE_BASE, **kw.get("base_kw", {}))
    return main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base"), *extra])


def rows_of(out: str) -> dict:
    rows = {}
    for line in out.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].split("`")[1]] = cells
    return rows


# ----------------------------------------------------------------------------------------------- the statistics


def slow_paired_ci(run_items, base_items, agg, hib, z, n_resamples, seed, name):
    """The obviously-correct version: the same resamples, each corpus metric recomputed by the tasks' own
    aggregation from a Python list of the resampled documents."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    idx = rng.integers(0, len(run_items), size=(n_resamples, len(run_items)))
    worse = []
    for row in idx:
        d = agg([run_items[i] for i in row]) - agg([base_items[i] for i in row])
        worse.append(-d if hib else d)
    level = paired.level_for_z(z)
    return tuple(np.quantile(np.asarray(worse), [(1 - level) / 2, (1 + level) / 2]))


@pytest.mark.parametrize(
    "metric,agg,fn,hib",
    [
        ("ppl", per_token.token_weighted_perplexity, paired._token_weighted_perplexity, False),
        ("key_token_fraction", per_token.corpus_ratio, paired._corpus_ratio, True),
        ("n_key_tokens", lambda xs: float(np.mean(xs)), paired._mean, True),
    ],
)
def test_paired_bootstrap_matches_slow_reference(metric, agg, fn, hib):
    base, run = corpus(n_docs=25), corpus(n_docs=25, shift=0.05, noise=0.1)
    if metric == "n_key_tokens":
        run[metric] = [k + int(j) for k, j in zip(run[metric], np.random.default_rng(3).integers(-3, 4, 25))]
    if metric == "key_token_fraction":
        run[metric] = [[k + 1, n] for k, n in run[metric]]
    xr, xb = paired.as_array(run[metric]), paired.as_array(base[metric])
    res = paired.paired_bootstrap(xr, xb, fn, hib, 1.96, n_resamples=700, seed=4, name=f"{TASK}/{metric}")
    lo, hi = slow_paired_ci(run[metric], base[metric], agg, hib, 1.96, 700, 4, f"{TASK}/{metric}")
    assert res.low == pytest.approx(lo, rel=1e-9, abs=1e-12) and res.high == pytest.approx(hi, rel=1e-9, abs=1e-12)
    assert res.n_docs == 25 and res.n_degenerate == 0 and res.level == pytest.approx(0.95, abs=1e-4)


@pytest.mark.parametrize("rule", ["largest", "contiguous"])
def test_memory_length_aggregations_vectorised_match_the_metrics_functions(rule):
    """Within-length resampling, vectorised, against metrics.*_from_samples on every resample (the slow, obviously
    correct path), with a failed length (NaN accuracies), dips and exact ties."""
    rng = np.random.default_rng(2)
    lengths = [32, 64, 128, 256, 512]
    p_copy = {32: 0.999, 64: 0.995, 128: 0.7, 256: 0.95, 512: 0.3}
    items = []
    for L in lengths:
        for _ in range(6):
            c = 1.0 if rng.random() < p_copy[L] else 0.5
            items.append([L, float("nan") if L == 256 and rng.random() < 0.2 else c, float(rng.random() < 0.3)])
    items.sort(key=lambda r: r[0])
    x = paired.as_array(items)
    settings = {"fine_threshold": 0.75, "fine_rule": rule, "coarse_margin": 0.1, "coarse_rule": rule}  # 0.75: ties
    aggs = paired._memory_aggregations(settings)
    idx = bootstrap.indices(np.random.default_rng(0), len(x), 300, x[:, 0])
    stack = x[idx]
    assert np.array_equal(stack[:, :, 0], np.broadcast_to(x[:, 0], stack.shape[:2]))  # lengths kept in place
    ref = {
        "fine_memory_length": [per_token.fine_memory_length_from_samples(r, 0.75, rule) for r in stack],
        "coarse_memory_length": [per_token.coarse_memory_length_from_samples(r, 0.1, rule) for r in stack],
        "n_failed_lengths": [per_token.n_failed_lengths_from_samples(r) for r in stack],
    }
    for name, fn in aggs.items():
        got = fn(stack)
        np.testing.assert_array_equal(got, np.asarray(ref[name], dtype=np.float64), err_msg=name)
        assert len(set(got.tolist())) > 1 or name == "n_failed_lengths"  # the resamples really differ
    # a stack without the within-length layout goes row by row, with the same numbers
    shuffled = stack[:, np.random.default_rng(1).permutation(len(x))]
    np.testing.assert_array_equal(aggs["fine_memory_length"](shuffled), np.asarray(ref["fine_memory_length"]))


def test_memory_length_aggregation_is_found_and_resampled():
    rng = np.random.default_rng(0)
    lengths = [64, 128, 256, 512]
    items = [
        [L, float(rng.random() < (0.999 if L <= 128 else 0.5)), float(rng.random() < 0.2)]
        for L in lengths
        for _ in range(8)
    ]
    x = paired.as_array(items)
    settings = {"fine_threshold": 0.99, "fine_rule": "largest", "coarse_margin": 0.1, "coarse_rule": "largest"}
    reported = per_token.fine_memory_length_from_samples(items, 0.99, "largest")
    name, fn = paired.find_aggregation("fine_memory_length", x, x, reported, reported, settings)
    assert name == "fine_memory_length"
    # other thresholds than the run's would not reproduce it
    assert paired.find_aggregation("fine_memory_length", x, x, reported + 64, reported + 64, settings) == (None, None)
    res = paired.paired_bootstrap(x, x, fn, True, 1.96, n_resamples=200, seed=0, name="fc/fine")
    assert res.low == res.high == 0.0  # identical runs: every resample gives the same value for both


@pytest.mark.parametrize(
    ("metric", "two_lengths", "depths"),
    [
        ("effective_length", False, 3),
        ("effective_length_abs", True, 3),
        ("effective_length", False, 0),  # runs logged before the items held depths: one gain per length
        ("effective_length_abs", True, 0),
    ],
)
def test_the_maps_effective_lengths_are_recomputed_on_each_resample(metric, two_lengths, depths):
    from lm_eval_longctx.metrics import gain_map

    rng = np.random.default_rng(0)
    lengths = (256, 512) if two_lengths else (256, 512, 1024, 2048)
    # gains that fall with length (the far depths faster), noisy per document: the effective length moves between
    # resamples
    if depths:
        curves = [
            [
                [2.4 - (0.3 + 0.3 * (depths - d)) * i + rng.normal(0, 0.4) for d in range(depths)]
                for i in range(len(lengths))
            ]
            for _ in range(12)
        ]
    else:
        curves = [[2.0 - 0.6 * i + rng.normal(0, 0.4) for i in range(len(lengths))] for _ in range(12)]
    settings = {
        "lengths_used": list(lengths),
        "effective_fraction": 0.5,
        "effective_threshold": 0.5,
        "effective_rule": "contiguous",
    }
    if metric == "effective_length":
        reported = gain_map.effective_length_from_docs(curves, lengths, 0.5, "contiguous", base_minimum=0.5)
    else:
        reported = gain_map.effective_length_abs_from_docs(curves, lengths, 0.5, "contiguous")
    x = paired.as_array(curves)
    name, fn = paired.find_aggregation(metric, x, x, reported, reported, settings)
    assert name == metric
    # the aggregation is the task's on any resample, not only on the whole set
    rows = rng.integers(0, len(curves), size=(5, len(curves)))
    again = [
        gain_map.effective_length_from_docs([curves[i] for i in r], lengths, 0.5, "contiguous", base_minimum=0.5)
        if metric == "effective_length"
        else gain_map.effective_length_abs_from_docs([curves[i] for i in r], lengths, 0.5, "contiguous")
        for r in rows
    ]
    assert list(fn(x[rows])) == again
    # another rule than the run's would not reproduce it
    other = dict(settings, effective_threshold=10.0, effective_fraction=0.99)
    assert paired.find_aggregation(metric, x, x, reported, reported, other) == (None, None)
    # the same model twice: a CI of nothing at all
    res = paired.paired_bootstrap(x, x, fn, True, 1.96, n_resamples=200, seed=0, name=f"map/{metric}")
    assert res.low == res.high == 0.0


def test_aggregation_is_chosen_by_reproducing_the_reported_value():
    items = corpus(n_docs=10)["ppl"]
    x = paired.as_array(items)
    twp, ratio = per_token.token_weighted_perplexity(items), per_token.corpus_ratio(items)
    assert paired.find_aggregation("ppl", x, x, twp, twp, {})[0] == "token_weighted_perplexity"
    assert paired.find_aggregation("x", x, x, ratio, ratio, {})[0] == "corpus_ratio"
    assert paired.find_aggregation("ppl", x, x, twp * 1.01, twp, {}) == (None, None)
    assert paired.as_array([[1, 2], [3]]) is None and paired.as_array(["a", "b"]) is None


# ----------------------------------------------------------------------------------------------- the gate


def test_paired_gate_flags_a_small_regression_the_unpaired_band_misses(tmp_path, capsys):
    base = corpus()
    run = corpus(shift=0.03, noise=0.005)  # +0.03 nats per token on every document, documents very unequal
    assert run_gate(tmp_path, run, base) == 1
    out = capsys.readouterr().out
    rows = rows_of(out)
    assert "regressed" in rows["longppl_govreport/ppl"][-1] and rows["longppl_govreport/ppl"][5].startswith("paired")
    assert "40 docs, token_weighted_perplexity" in rows["longppl_govreport/ppl"][5]
    # the same files with the unpaired band: the change is inside z x combined stderr, so it passes
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base"), "--unpaired"]) == 0
    rows = rows_of(capsys.readouterr().out)
    assert rows["longppl_govreport/ppl"][5].startswith("unpaired (paired test turned off)")
    assert rows["longppl_govreport/ppl"][-1] == "ok"
    # diagnostics are shown and never gated
    assert rows["longppl_govreport/n_key_tokens"][-1] == "not gated"


def test_paired_gate_passes_an_unchanged_model_and_tolerance_still_applies(tmp_path, capsys):
    base = corpus()
    assert run_gate(tmp_path, base, base) == 0  # the same values: every CI is [0, 0]
    rows = rows_of(capsys.readouterr().out)
    assert rows["longppl_govreport/ppl"][-1] == "ok" and rows["longppl_govreport/ppl"][6] == "[+0, +0]"
    # per-document changes that cancel out in the corpus perplexity: not a regression
    run_gate(tmp_path, corpus(noise=0.05, noise_seed=7, centred=True), base)
    rows = rows_of(capsys.readouterr().out)
    assert rows["longppl_govreport/ppl"][-1] == "ok" and rows["longppl_govreport/ppl"][5].startswith("paired")
    lo, hi = (float(v) for v in rows["longppl_govreport/ppl"][6].strip("[]").split(","))
    assert lo < 0 < hi
    # a significant regression smaller than the tolerance passes
    cfg = tmp_path / "gate.yaml"
    cfg.write_text("metrics:\n  '*ppl': {rel: 0.05}\n")
    assert run_gate(tmp_path, corpus(shift=0.03, noise=0.005), base, "--config", str(cfg)) == 0
    assert run_gate(tmp_path, corpus(shift=0.3, noise=0.005), base, "--config", str(cfg)) == 1
    # an improvement is reported as such
    assert run_gate(tmp_path, corpus(shift=-0.05, noise=0.005), base) == 0
    assert rows_of(capsys.readouterr().out)["longppl_govreport/ppl"][-1] == "✅ improved"


def test_paired_gate_is_seeded(tmp_path, capsys):
    base, run = corpus(), corpus(shift=0.01, noise=0.05)
    outs = []
    for seed in ("1", "1", "2"):
        run_gate(tmp_path, run, base, "--seed", seed, "--n-resamples", "500")
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0] != outs[2] and "500 resamples, seed 1" in outs[0]


def test_other_documents_are_exit_2(tmp_path, capsys):
    base = corpus()
    texts = [f"document {i}" for i in range(40)]
    texts[7] = "another text"
    assert run_gate(tmp_path, base, base, run_kw={"texts": texts}) == 2
    err = capsys.readouterr().err
    assert "1 document(s) differ" in err and "doc_ids [7]" in err and err.count("\n") == 1
    # other doc_ids: the run has 39 documents
    short = {k: v[:39] for k, v in base.items()}
    write_run(tmp_path / "run", short, DATE_RUN)
    write_run(tmp_path / "base", base, DATE_BASE)
    # (n-samples differ too, and are refused first; make them agree to reach the samples check)
    res = json.loads((tmp_path / "run" / f"results_{DATE_RUN}.json").read_text())
    res["n-samples"][TASK] = {"original": 40, "effective": 40}
    (tmp_path / "run" / f"results_{DATE_RUN}.json").write_text(json.dumps(res))
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")]) == 2
    assert "scored different documents" in capsys.readouterr().err


@pytest.mark.parametrize(
    "corrupt,what",
    [
        (lambda lines: lines + [lines[0]], "appears twice"),
        (lambda lines: lines[:3] + ["{not json"] + lines[4:], "malformed JSON"),
        (lambda lines: [json.dumps({**json.loads(x), "doc_id": "3"}) for x in lines], "doc_id is not an integer"),
        (
            lambda lines: [json.dumps({k: v for k, v in json.loads(x).items() if k != "doc_hash"}) for x in lines],
            "no doc_hash",
        ),
    ],
)
def test_malformed_samples_are_exit_2(tmp_path, capsys, corrupt, what):
    base = corpus()
    write_run(tmp_path / "run", base, DATE_RUN)
    write_run(tmp_path / "base", base, DATE_BASE)
    f = tmp_path / "run" / f"samples_{TASK}_{DATE_RUN}.jsonl"
    f.write_text("\n".join(corrupt(f.read_text().splitlines())) + "\n")
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")]) == 2
    err = capsys.readouterr().err
    assert what in err and str(f.name) in err and err.count("\n") == 1


def test_without_samples_falls_back_to_the_unpaired_band_and_says_so(tmp_path, capsys):
    base, run = corpus(), corpus(shift=0.03, noise=0.005)
    assert run_gate(tmp_path, run, base, base_kw={"samples": False}) == 0
    row = rows_of(capsys.readouterr().out)["longppl_govreport/ppl"]
    assert row[5] == "unpaired (no --log_samples file for the baseline)" and row[6].startswith("±")


def test_samples_that_do_not_reproduce_the_results_are_not_used(tmp_path, capsys):
    base, run = corpus(), corpus(shift=0.03, noise=0.005)
    write_run(tmp_path / "run", run, DATE_RUN)
    write_run(tmp_path / "base", base, DATE_BASE)
    # a stale samples file: another run's values under this run's date
    stale = corpus(shift=0.5)
    other = tmp_path / "other"
    write_run(other, stale, DATE_RUN)
    (tmp_path / "run" / f"samples_{TASK}_{DATE_RUN}.jsonl").write_text(
        (other / f"samples_{TASK}_{DATE_RUN}.jsonl").read_text()
    )
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")]) == 0
    row = rows_of(capsys.readouterr().out)["longppl_govreport/ppl"]
    assert row[5] == "unpaired (per-document values do not reproduce the reported value)"


def test_unit_samples_file_naming(tmp_path):
    r = write_run(tmp_path, corpus(n_docs=3), DATE_RUN)
    assert run_samples.date_id_of(r) == DATE_RUN
    assert run_samples.samples_file(r, TASK).name == f"samples_{TASK}_{DATE_RUN}.jsonl"
    assert run_samples.samples_file(r, "other_task") is None
    # lm_eval --output_path out.json writes out_<date_id>.json beside the samples
    custom = r.with_name(f"out_{DATE_RUN}.json")
    r.rename(custom)
    assert run_samples.samples_file(custom, TASK).name == f"samples_{TASK}_{DATE_RUN}.jsonl"


# ----------------------------------------------------------------------------------------------- real runs


def hook_active() -> bool:
    probe = "import sys; print('_lm_eval_longctx_discovery_hook' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/")
    return out.stdout.strip() == "True"


def lm_eval_run(model_dir, docs, out, cwd, evaluator="self"):
    md = {"data_files": docs, "evaluator": evaluator, "trunc_len": 40, "sliding_window": 16, "alpha": 0.5, "beta": -10}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--tasks",
            TASK,
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_dir},dtype=float32",
            "--device",
            "cpu",
            "--metadata",
            json.dumps(md),
            "--output_path",
            str(out),
            "--log_samples",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.integration
@pytest.mark.skipif(not hook_active(), reason="the package (with its discovery hook) is not installed")
def test_paired_gate_on_real_lm_eval_log_samples_output(tmp_path, model_dirs, corpus_texts, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.harness_utils import write_docs

    # a second checkpoint: the first with noise on its weights (same tokenizer, same documents)
    noisy = tmp_path / "noisy"
    model = AutoModelForCausalLM.from_pretrained(model_dirs["a"])
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(noisy)
    AutoTokenizer.from_pretrained(model_dirs["a"]).save_pretrained(noisy)

    # 12 documents (the paired test needs 10): two pieces of each test text
    docs = write_docs(tmp_path / "docs.jsonl", [t[i : i + 700] for t in corpus_texts[:6] for i in (0, 1500)])
    # one evaluator for both checkpoints: with "self" each would pick its own key tokens (refused below)
    lm_eval_run(model_dirs["a"], docs, tmp_path / "base", tmp_path, evaluator=model_dirs["b"])
    lm_eval_run(noisy, docs, tmp_path / "run", tmp_path, evaluator=model_dirs["b"])
    (samples,) = (tmp_path / "run").rglob(f"samples_{TASK}_*.jsonl")
    line = json.loads(samples.read_text().splitlines()[0])
    assert json.loads(line["resps"][0][0])["long_scored"] == line["ppl"][1]  # this version's lines, read below

    code = main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base"), "--n-resamples", "2000"])
    out = capsys.readouterr().out
    rows = rows_of(out)
    for m in ("ppl", "longppl"):
        row = rows[f"{TASK}/{m}"]
        assert row[5] == "paired (12 docs, token_weighted_perplexity)", out
        lo, hi = (float(v) for v in row[6].strip("[]").split(","))
        change = float(row[3])
        assert lo <= change <= hi or math.isclose(change, lo) or math.isclose(change, hi)
        assert row[-1] == ("❌ regressed" if lo > 0 else "✅ improved" if hi < 0 else "ok")
    for m in ("n_key_tokens", "key_token_fraction"):
        assert rows[f"{TASK}/{m}"][-1] == "not gated"
    assert code == (1 if "regressed" in out.split("| metric |")[1] else 0)
    # the same checkpoint against itself: every paired CI is [0, 0], nothing flagged
    assert main(["gate", str(tmp_path / "base"), "--baseline", str(tmp_path / "base"), "--allow-same"]) == 0
    rows = rows_of(capsys.readouterr().out)
    assert rows[f"{TASK}/ppl"][6] == "[+0, +0]" and rows[f"{TASK}/ppl"][-1] == "ok"
    # each checkpoint its own evaluator ("self"): the key tokens differ by construction, the runs are not compared
    lm_eval_run(model_dirs["a"], docs, tmp_path / "base_self", tmp_path)
    lm_eval_run(noisy, docs, tmp_path / "run_self", tmp_path)
    assert main(["gate", str(tmp_path / "run_self"), "--baseline", str(tmp_path / "base_self")]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and "longppl_govreport: " in err and "evaluator (" in err


def test_paired_verdict_is_the_whole_ci_against_the_tolerance(tmp_path, capsys):
    base, run = corpus(), corpus(shift=0.03, noise=0.02)
    ppl = {k: per_token.token_weighted_perplexity(v["ppl"]) for k, v in (("run", run), ("base", base))}
    change = ppl["run"] - ppl["base"]
    # tolerance just below the observed change: the point estimate exceeds it, the CI does not lie above it
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(f"metrics:\n  '*/ppl': {{abs: {0.98 * change}}}\n  '*': {{skip: true}}\n")
    assert run_gate(tmp_path, run, base, "--config", str(cfg)) == 0
    row = rows_of(capsys.readouterr().out)["longppl_govreport/ppl"]
    lo, hi = (float(v) for v in row[6].strip("[]").split(","))
    assert row[-1] == "ok" and lo < 0.98 * change < change < hi
    # tolerance below the whole CI: regressed
    cfg.write_text(f"metrics:\n  '*/ppl': {{abs: {0.9 * lo}}}\n  '*': {{skip: true}}\n")
    assert run_gate(tmp_path, run, base, "--config", str(cfg)) == 1


def test_power_benchmark_decisions_on_known_cases():
    """scripts/bench_gate_power.py's simulation: identical runs are never flagged, a large regression always,
    and under its random-direction null the paired test stays near its nominal one-sided 2.5%."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_gate_power", Path(__file__).resolve().parents[2] / "scripts" / "bench_gate_power.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    base = np.asarray(corpus(n_docs=120)["ppl"])
    assert bench.decisions(base, base, 30, 20, 1.96, 300, 50, 0, flip=False) == (0.0, 0.0)
    worse = np.asarray(corpus(n_docs=120, shift=1.0)["ppl"])
    assert bench.decisions(worse, base, 30, 20, 1.96, 300, 50, 0, flip=False) == (1.0, 1.0)
    noisy = np.asarray(corpus(n_docs=120, shift=0.0, noise=0.05)["ppl"])
    unpaired, paired_rate = bench.decisions(noisy, base, 30, 200, 1.96, 300, 50, 1, flip=True)
    assert unpaired <= paired_rate <= 0.08


def test_samples_without_a_metrics_list_are_read_from_their_fields(tmp_path):
    write_run(tmp_path, corpus(n_docs=4), DATE_RUN)
    f = tmp_path / f"samples_{TASK}_{DATE_RUN}.jsonl"
    f.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(x).items() if k != "metrics"}) + "\n"
            for x in f.read_text().splitlines()
        )
    )
    s = run_samples.read_samples(f)
    assert set(s.docs[("none", 0)][1]) == {"ppl", "longppl", "n_key_tokens", "key_token_fraction"}


def give_responses(samples: Path, line_format: str) -> None:
    """Give a fabricated longppl samples file the responses and target a real run writes: ``old`` as this suite
    wrote them before (a repr string, an empty target), ``new`` as now (JSON text, what is predicted)."""
    records = [json.loads(x) for x in samples.read_text().splitlines()]
    for rec in records:
        nll_sum, n = rec["ppl"]
        if line_format == "old":
            response, target = f"SequenceScores(n={n + 1}, long_nll={nll_sum / n:.4f})", ""
        else:
            summary = {"n_tokens": n + 1, "long_scored": n, "long_nll_sum": nll_sum, "long_greedy_hits": 0}
            response = json.dumps(summary, separators=(",", ":"))
            target = "every token of doc.text but the first, each predicted from all the tokens before it"
        target_hash = hashlib.sha256(target.encode("utf-8")).hexdigest()
        rec.update(resps=[[response]], filtered_resps=[response], target=target, target_hash=target_hash)
    samples.write_text("".join(json.dumps(rec) + "\n" for rec in records))


@pytest.mark.parametrize("run_format,base_format", [("new", "new"), ("old", "old"), ("new", "old")])
def test_samples_files_of_earlier_versions_are_read_like_new_ones(tmp_path, capsys, run_format, base_format):
    """Earlier samples files differ in `resps` and `target` only, which the gate does not read: the same values,
    the same paired verdict, whichever version wrote the run's and the baseline's file."""
    base, run = corpus(), corpus(shift=0.03, noise=0.005)
    args = ["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base"), "--n-resamples", "2000"]
    assert run_gate(tmp_path, run, base, "--n-resamples", "2000") == 1
    rows_from_values = rows_of(capsys.readouterr().out)
    for who, line_format, per_doc, date_id in (
        ("run", run_format, run, DATE_RUN),
        ("base", base_format, base, DATE_BASE),
    ):
        samples = tmp_path / who / f"samples_{TASK}_{date_id}.jsonl"
        give_responses(samples, line_format)
        read = run_samples.read_samples(samples)
        for metric, values in per_doc.items():
            assert read.values(metric) == dict(enumerate(values))
    assert main(args) == 1
    rows = rows_of(capsys.readouterr().out)
    assert rows == rows_from_values
    assert rows[f"{TASK}/ppl"][5] == "paired (40 docs, token_weighted_perplexity)"


def write_forgetting_curve_run(folder: Path, copy_p: dict, date_id: str, samples_per_length=8, seed=0):
    """forgetting_curve results and samples as the task writes them: per document (one sample at one length)
    copy_acc@L and lm_acc@L, and the (length, copy_acc, lm_acc) item of the memory-length aggregations."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    task, settings = (
        "forgetting_curve",
        {
            "fine_threshold": 0.9,
            "fine_rule": "largest",
            "coarse_margin": 0.1,
            "coarse_rule": "largest",
            "lengths": sorted(copy_p),
        },
    )
    docs = []
    for L in sorted(copy_p):
        for _ in range(samples_per_length):
            docs.append((L, float(np.clip(copy_p[L] + rng.normal(0, 0.02), 0, 1)), float(rng.uniform(0.1, 0.3))))
    res, hib = {"alias": task}, {}
    for L in sorted(copy_p):
        for what, col in (("copy_acc", 1), ("lm_acc", 2)):
            vals = [d[col] for d in docs if d[0] == L]
            res[f"{what}@{L:05d},none"] = float(np.mean(vals))
            res[f"{what}@{L:05d}_stderr,none"] = float(np.std(vals, ddof=1) / math.sqrt(len(vals)))
            hib[f"{what}@{L:05d}"] = True
    items = [list(d) for d in docs]
    res["fine_memory_length,none"] = per_token.fine_memory_length_from_samples(items, 0.9, "largest")
    res["coarse_memory_length,none"] = per_token.coarse_memory_length_from_samples(items, 0.1, "largest")
    res["n_failed_lengths,none"] = per_token.n_failed_lengths_from_samples(items)
    hib.update(fine_memory_length=True, coarse_memory_length=True, n_failed_lengths=False)
    data = {
        "results": {task: res},
        "higher_is_better": {task: hib},
        "configs": {task: {"task": task, "metadata": {"longctx_settings": settings}}},
        "versions": {task: 1},
        "n-samples": {task: {"original": len(docs), "effective": len(docs)}},
        "model_name": "org/ckpt",
    }
    (folder / f"results_{date_id}.json").write_text(json.dumps(data))
    with open(folder / f"samples_{task}_{date_id}.jsonl", "w") as f:
        # lm-eval writes them in doc_id order; the doc is the sample's position, not the model's output
        for i, (L, c, m) in enumerate(docs):
            doc = {"length": L, "sample": i % samples_per_length, "start": 1000 * i}
            vals = {
                f"copy_acc@{L:05d}": c,
                f"lm_acc@{L:05d}": m,
                "fine_memory_length": [L, c, m],
                "coarse_memory_length": [L, c, m],
                "n_failed_lengths": [L, c, m],
            }
            f.write(
                json.dumps(
                    {
                        "doc_id": i,
                        "doc": doc,
                        "filter": "none",
                        "metrics": list(vals),
                        "doc_hash": doc_hash(doc),
                        **vals,
                    }
                )
                + "\n"
            )


def test_paired_gate_on_forgetting_curve_samples(tmp_path, capsys):
    base_p = {64: 0.99, 128: 0.97, 256: 0.95, 512: 0.6}
    write_forgetting_curve_run(tmp_path / "base", base_p, DATE_BASE, samples_per_length=10, seed=0)
    # the run: same documents, copy accuracy lower at 256 (fine memory length 256 -> 128)
    write_forgetting_curve_run(tmp_path / "run", {**base_p, 256: 0.8}, DATE_RUN, samples_per_length=10, seed=0)
    code = main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base"), "--n-resamples", "2000"])
    rows = rows_of(capsys.readouterr().out)
    assert code == 1
    assert rows["forgetting_curve/copy_acc@00256"][5] == "paired (10 docs, mean)"
    assert rows["forgetting_curve/copy_acc@00256"][-1] == "❌ regressed"
    assert rows["forgetting_curve/fine_memory_length"][5] == "paired (40 docs, fine_memory_length)"
    assert rows["forgetting_curve/fine_memory_length"][1:3] == ["256", "128"]
    assert rows["forgetting_curve/n_failed_lengths"][5] == "paired (40 docs, n_failed_lengths)"
    # too few samples per length (4) or documents (8) for a bootstrap: the unpaired band, and the row says why
    write_forgetting_curve_run(tmp_path / "base", base_p, DATE_BASE, samples_per_length=4, seed=0)
    write_forgetting_curve_run(tmp_path / "run", {**base_p, 256: 0.8}, DATE_RUN, samples_per_length=4, seed=0)
    main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")])
    rows = rows_of(capsys.readouterr().out)
    assert rows["forgetting_curve/copy_acc@00256"][5] == "unpaired (4 documents: the paired bootstrap needs 10)"
    assert rows["forgetting_curve/fine_memory_length"][5] == (
        "unpaired (4 samples at some length: the paired bootstrap needs 5 per length)"
    )
    assert rows["forgetting_curve/n_failed_lengths"][-1] == "ok"
    assert rows["forgetting_curve/copy_acc@00064"][-1] == "ok"


def test_per_configuration_metrics_use_their_own_documents(tmp_path, capsys):
    """longeval_lines-style metrics: acc on every case, acc_0200 / acc_0400 only on the cases of one
    configuration; each is recomputed on its own documents. A configuration whose documents differ between the
    runs (a case skipped as over-length in one run only) falls back to the unpaired band."""
    task = "longeval_lines_acc"

    def write(folder, acc, date_id, skip=()):
        folder.mkdir(parents=True, exist_ok=True)
        recs, per = [], {"acc": [], "acc_0200": [], "acc_0400": []}
        for i, a in enumerate(acc):
            key = "acc_0200" if i < 20 else "acc_0400"
            vals = {} if i in skip else {"acc": a, key: a}
            for k, v in vals.items():
                per[k].append(v)
            doc = {"case": i, "num_lines": 200 if i < 20 else 400}
            recs.append(
                {"doc_id": i, "doc": doc, "filter": "none", "metrics": list(vals), "doc_hash": doc_hash(doc), **vals}
            )
        res = {"alias": task}
        for k, v in per.items():
            res[f"{k},none"] = float(np.mean(v))
            res[f"{k}_stderr,none"] = float(np.std(v, ddof=1) / math.sqrt(len(v)))
        data = {
            "results": {task: res},
            "higher_is_better": {task: {k: True for k in per}},
            "configs": {task: {"metadata": {"longctx_settings": {"num_lines": [200, 400]}}}},
            "versions": {task: 1},
            "n-samples": {task: {"original": 40, "effective": 40}},
            "model_name": "m",
        }
        (folder / f"results_{date_id}.json").write_text(json.dumps(data))
        (folder / f"samples_{task}_{date_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    rng = np.random.default_rng(0)
    base = (rng.random(40) < 0.8).astype(float)
    run = base.copy()
    run[20:28] = 0.0  # the 400-line configuration loses 8 of its cases (those it had right, mostly)
    write(tmp_path / "base", base, DATE_BASE)
    write(tmp_path / "run", run, DATE_RUN)
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")]) == 1
    rows = rows_of(capsys.readouterr().out)
    assert rows[f"{task}/acc_0200"][5] == "paired (20 docs, mean)" and rows[f"{task}/acc_0200"][-1] == "ok"
    assert rows[f"{task}/acc_0400"][5] == "paired (20 docs, mean)" and rows[f"{task}/acc_0400"][-1] == "❌ regressed"
    assert rows[f"{task}/acc"][5] == "paired (40 docs, mean)"
    write(tmp_path / "run", run, DATE_RUN, skip=(25,))
    main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "base")])
    rows = rows_of(capsys.readouterr().out)
    assert rows[f"{task}/acc_0400"][5] == "unpaired (the runs have this metric on different documents)"
    assert rows[f"{task}/acc_0200"][5] == "paired (20 docs, mean)"


def test_resamples_where_the_metric_is_undefined_are_dropped_and_counted():
    # LongPPL of a resample that holds only documents without key tokens is undefined (0 / 0)
    run = paired.as_array([[5.0, 2], [0.0, 0], [0.0, 0], [0.0, 0]])
    base = paired.as_array([[4.0, 2], [0.0, 0], [0.0, 0], [0.0, 0]])
    res = paired.paired_bootstrap(run, base, paired._token_weighted_perplexity, False, 1.96, 1000, 0, "x")
    # P(no document 0 in 4 draws) = (3/4)^4 = 32%
    assert 250 < res.n_degenerate < 390 and res.low == res.high == pytest.approx(math.exp(2.5) - math.exp(2.0))


def test_a_baseline_that_is_the_run_itself_is_refused(tmp_path, capsys):
    """A CI job whose baseline path is wired to the run would pass every checkpoint: the same folder, or a copy of
    its files, is refused (exit 2) unless --allow-same."""
    import shutil

    docs = corpus(6, seed=3)
    write_run(tmp_path / "run", docs, DATE_RUN)
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    for baseline in ("run", "copy"):
        assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / baseline)]) == 2
        err = capsys.readouterr().err
        assert "the baseline is the run itself" in err and "--allow-same" in err
    assert "a copy" in err
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "run"), "--allow-same"]) == 0
    # a rerun (another date, the same numbers) is a baseline
    write_run(tmp_path / "rerun", docs, DATE_BASE)
    assert main(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "rerun")]) == 0
