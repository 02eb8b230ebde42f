"""Results files, samples and per-token exports built by hand in lm-eval's shape for the report tests, and what
reads the report card's page back.

* What the suite's tasks declare for the report card (``configs.<task>.metadata.longctx_report``): the sections,
  headlines, settings shown and pictures each task declares, and its metrics' directions (``declaration``,
  ``direction``, ``with_declarations``).
* ``results_json``: a results file of two tasks (longppl_govreport, forgetting_curve) under ``SETTINGS``, as the gate,
  leaderboard and correlation tests change it; ``write`` puts it (or any text) in a file.
* ``suite_results_json``: a results file of the suite's six result tasks under ``SUITE_SETTINGS``, awkward floats
  included (``task_metrics``), as the report card shows it; ``write_results`` puts it in a folder.
* ``read_page`` and ``check_numbers``: the marked numbers of a page, compared exactly with the results files.
* ``corpus`` and ``write_run``: per-document items of longppl_govreport and a results file with its samples file, as
  the paired gate reads them.
* ``write_export``: a one-document per-token export of longppl_govreport, as TokenExport writes it.
* ``write_audit`` and ``write_checkpoint``: an audit's ``audit.json`` as the report tools read it, and a checkpoint
  folder (config, weights) for the audit to name.

The files have the shape lm-eval 0.4.13 writes with --output_path: "results" {task: {"metric,none": v,
"metric_stderr,none": se | "N/A", "alias": task}}, "higher_is_better", "configs" {task: {"metadata":
{"longctx_settings": {...}}}}, "versions", "n-samples", "config", "model_name".
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from lm_eval_longctx.data import export_files
from lm_eval_longctx.metrics import per_token
from lm_eval_longctx.report.bounds import LOWER_BOUND_MARK
from lm_eval_longctx.report.card.page import fmt
from lm_eval_longctx.tasks import base

# Read from the task classes themselves, so the hand-built results carry what the tasks write today.
_TASKS = base.suite_tasks()
LONGCTX_REPORT = {name: cls.REPORT.record() for name, cls in _TASKS.items() if cls.REPORT is not None}
DIRECTIONS = {name: tuple(cls.METRIC_DIRECTIONS) for name, cls in _TASKS.items()}
TASK = "longppl_govreport"


def direction(task: str, metric: str) -> bool | None:
    """The direction a task of the suite declares for ``metric`` (None: informational, or not declared)."""
    for pattern, value in DIRECTIONS.get(task, ()):
        if fnmatch.fnmatchcase(metric, pattern):
            return value
    return None


def declaration(task: str) -> dict:
    """The task's ``longctx_report`` (a copy), or {} for a task of another suite."""
    return copy.deepcopy(LONGCTX_REPORT.get(task, {}))


def with_declarations(data: dict) -> dict:
    """``data`` (a results dict) with every suite task's ``longctx_report`` in its config, as the tasks write it."""
    for task, cfg in (data.get("configs") or {}).items():
        if task in LONGCTX_REPORT:
            cfg.setdefault("metadata", {})["longctx_report"] = declaration(task)
    return data


# ----------------------------------------------------------------------------------------------- two tasks


SETTINGS = {
    "longppl_govreport": {
        "trunc_len": 4096,
        "sliding_window": 1024,
        "alpha": 2.0,
        "beta": -2.0,
        "evaluator": "Qwen/Qwen2-72B-Instruct",
        "data": {"dataset": "emozilla/govreport-test", "texts_sha256": "abc123"},
    },
    "forgetting_curve": {
        "lengths": [64, 128, 256],
        "fine_threshold": 0.99,
        "coarse_margin": 0.1,
        "tokenizer": "/ckpt/step-1000",
        "data": {"revision": "r1"},
    },
}


def results_json(
    model="ckpt", longppl=5.0, longppl_se=0.05, copy_acc=0.80, copy_se=0.01, settings=None, n_effective=50
):
    settings = copy.deepcopy(settings or SETTINGS)
    data = {
        "results": {
            "longppl_govreport": {
                "alias": "longppl_govreport",
                "longppl,none": longppl,
                "longppl_stderr,none": longppl_se,
                "ppl,none": 8.0,
                "ppl_stderr,none": "N/A",
            },
            "forgetting_curve": {
                "alias": "forgetting_curve",
                "copy_acc,none": copy_acc,
                "copy_acc_stderr,none": copy_se,
                "n_tokens,none": 1000,
                "n_tokens_stderr,none": "N/A",
            },
        },
        "higher_is_better": {
            "longppl_govreport": {"longppl": False, "ppl": False},
            "forgetting_curve": {"copy_acc": True, "n_tokens": None},
        },
        "configs": {
            t: {"task": t, "metadata": {"pretrained": model, "longctx_settings": s}} for t, s in settings.items()
        },
        "versions": {"longppl_govreport": 1.0, "forgetting_curve": 1.0},
        "n-samples": {t: {"original": 100, "effective": n_effective} for t in settings},
        "config": {"model": "hf", "model_args": f"pretrained={model},dtype=bfloat16"},
        "model_name": model,
    }
    return with_declarations(data)


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# ----------------------------------------------------------------------------------------------- the suite's tasks


LENGTHS = [16, 64, 256]
CONTEXT_LENGTHS, DEPTHS = [128, 512, 2048], [0, 50, 90]
NUM_LINES = [5, 10]
SUITE_SETTINGS = {
    "longppl_govreport": {
        "evaluator": "self",
        "trunc_len": 512,
        "sliding_window": 256,
        "alpha": 2.0,
        "beta": -2.0,
        "data": {"texts_sha256": "ab" * 32},
        "runtime": {"export_tokens": None},
    },
    "forgetting_curve": {"lengths": LENGTHS, "spacing": "geometric", "fine_threshold": 0.99, "coarse_margin": 0.01},
    "retrieval_gain": {
        "doc_tokens": 1024,
        "query_tokens": 24,
        "answer_tokens": 24,
        "data": {"texts_sha256": "cd" * 32},
    },
    "retrieval_gain_map": {
        "context_lengths": CONTEXT_LENGTHS,
        "depths": DEPTHS,
        "effective_fraction": 0.5,
        "effective_threshold": 0.5,
    },
    "longeval_lines_acc": {"num_lines": NUM_LINES, "num_cases": 3, "data": {"prompts_sha256": "ef" * 32}},
    "longeval_lines_ppl": {"num_lines": NUM_LINES, "num_cases": 3, "data": {"prompts_sha256": "ef" * 32}},
}
N_DOCS = {
    "longppl_govreport": 2,
    "forgetting_curve": 12,
    "retrieval_gain": 2,
    "retrieval_gain_map": 2,
    "longeval_lines_acc": 6,
    "longeval_lines_ppl": 6,
}


def task_metrics(shift: float, seed: int) -> dict:
    """{task: {"metric": (value, stderr or "N/A")}} of the suite's six result tasks, awkward floats included."""
    rng = np.random.default_rng(seed)

    def u(lo, hi):
        return float(rng.uniform(lo, hi))

    fc = {}
    for i, length in enumerate(LENGTHS):
        fc[f"copy_acc@{length:05d}"] = (1.0 - 0.1 * i - shift / 10, u(0, 0.02))
        fc[f"lm_acc@{length:05d}"] = (0.1 + 0.05 * i + 1 / 3, u(0.01, 0.05))
    fc.update({"fine_memory_length": (64.0, "N/A"), "coarse_memory_length": (256.0, "N/A")})
    fc["n_failed_lengths"] = (0.0, "N/A")
    gm = {}
    for L in CONTEXT_LENGTHS:
        for d in DEPTHS:
            gm[f"gain@L{L:05d}_d{d:02d}"] = (6.0 - L / 1024 - shift + u(-0.2, 0.2), u(0.1, 0.5))
        gm[f"gain@L{L:05d}"] = (6.0 - L / 1024 - shift, u(0.1, 0.4))
    gm.update(
        {"gain": (5.5 - shift, 0.2), "effective_length": (2048.0, "N/A"), "effective_length_abs": (2048.0, "N/A")}
    )
    acc = {"acc": (0.1 + 0.2 - shift / 10, u(0.05, 0.1))}
    ppl = {"answer_ppl": (1.0 + shift + 1e-7, u(0, 1)), "non_answer_ppl": (50.43 + shift, u(1, 5))}
    for n in NUM_LINES:
        acc[f"acc_{n:04d}"] = (1.0 - n / 40 - shift / 10, u(0, 0.2))
        acc[f"prompt_tokens_{n:04d}"] = (170.0 + 25 * n, u(1, 3))
        ppl[f"answer_ppl_{n:04d}"] = (1.0 + n / 100 + shift, u(0, 0.1))
        ppl[f"non_answer_ppl_{n:04d}"] = (40.0 + n + u(0, 1), u(1, 5))
        ppl[f"prompt_tokens_{n:04d}"] = (169.0 + 25 * n, u(1, 3))
    return {
        "longppl_govreport": {
            "longppl": (1.686 + shift + 0.1 + 0.2, u(0.01, 0.1)),
            "ppl": (268.5 + shift, u(1, 10)),
            "key_token_fraction": (0.02076, "N/A"),
            "n_key_tokens": (72.5, u(10, 20)),
        },
        "forgetting_curve": fc,
        "retrieval_gain": {
            "retrieval_gain": (5.469 - shift, 0.37),
            "nll_with": (0.8496 + shift, 0.4),
            "nll_without": (6.319, 0.78),
        },
        "retrieval_gain_map": gm,
        "longeval_lines_acc": acc,
        "longeval_lines_ppl": ppl,
    }


def suite_results_json(
    model: str, shift: float = 0.0, seed: int = 0, tasks=None, settings=None, skipped="none"
) -> dict:
    """A results file of the suite's tasks as lm-eval 0.4.x writes it (directions as the tasks declare them)."""
    metrics = task_metrics(shift, seed)
    tasks = list(tasks or metrics)
    settings = copy.deepcopy({**SUITE_SETTINGS, **(settings or {})})  # a test may change the file it writes
    results, hib = {}, {}
    for task in tasks:
        entry: dict = {"alias": task}
        for metric, (value, se) in metrics[task].items():
            entry[f"{metric},none"] = value
            entry[f"{metric}_stderr,none"] = se
        if task == "forgetting_curve":
            entry["skipped_lengths,none"] = skipped
            entry["skipped_lengths_stderr,none"] = "N/A"
        results[task] = entry
        hib[task] = {m: direction(task, m) for m in metrics[task]}
    return {
        "results": results,
        "higher_is_better": hib,
        "configs": {
            t: {"task": t, "metadata": {"longctx_settings": settings[t], "longctx_report": declaration(t)}}
            for t in tasks
        },
        "versions": {t: 1 for t in tasks},
        "n-samples": {t: {"original": N_DOCS[t], "effective": N_DOCS[t]} for t in tasks},
        "config": {"model": "hf", "model_args": f"pretrained={model},dtype=float32"},
        "model_name": model,
    }


def write_results(folder: Path, data: dict, date_id: str = "2026-01-01T00-00-00.000001") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"results_{date_id}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- reading the page


class PageNumbers(HTMLParser):
    """The marked metric values of a page, its title, and every element and attribute (for the escaping checks)."""

    def __init__(self):
        super().__init__()
        self.numbers = []  # (attrs, shown text)
        self.tags = []  # (tag, attrs)
        self.title = ""
        self._open = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "title":
            self._in_title = True
        if "data-metric" in a:
            self._open = [a, ""]

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag == "td" and self._open is not None:
            self.numbers.append(tuple(self._open))
            self._open = None


def read_page(path) -> PageNumbers:
    p = PageNumbers()
    p.feed(Path(path).read_text(encoding="utf-8"))
    return p


def raw_results(folder: Path) -> dict:
    """task -> its results entry, from the newest results file of the folder that has it."""
    out = {}
    for f in sorted(Path(folder).rglob("results_*.json")):
        for task, entry in json.loads(f.read_text(encoding="utf-8"))["results"].items():
            out[task] = entry
    return out


def check_numbers(page: PageNumbers, folders: dict) -> int:
    """Every marked number equals the results file's (value and stderr, exactly), and is shown as formatted; the
    number of marked numbers checked."""
    raw = {label: raw_results(folder) for label, folder in folders.items()}
    for attrs, text in page.numbers:
        task, rest = attrs["data-metric"].split("/", 1)
        metric, _, filt = rest.partition(",")
        entry = raw[attrs["data-run"]][task]
        expected = entry[f"{metric},{filt or 'none'}"]
        got = float(attrs["data-value"])
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (attrs, expected)
        se = entry.get(f"{metric}_stderr,{filt or 'none'}")
        if "data-stderr" in attrs:
            assert float(attrs["data-stderr"]) == se, (attrs, se)
        else:
            assert se in (None, "N/A"), (attrs, se)
        shown = text.strip()
        if attrs.get("data-lower-bound") == "true":  # a length that reaches the longest tested: "≥ 2048"
            assert shown.startswith(f"{LOWER_BOUND_MARK} "), shown
            shown = shown[len(LOWER_BOUND_MARK) + 1 :]
        assert shown.startswith(fmt(expected)) or shown.startswith(f"{expected:.4g}"), (shown, expected)
    return len(page.numbers)


# ----------------------------------------------------------------------------------------------- paired samples


DATE_RUN, DATE_BASE = "2026-01-02T00-00-00.000001", "2026-01-01T00-00-00.000001"


def doc_hash(doc) -> str:
    """lm-eval 0.4.13's doc_hash: sha256 of json.dumps(doc, indent=2, ensure_ascii=False)."""
    return hashlib.sha256(json.dumps(doc, indent=2, ensure_ascii=False).encode("utf-8")).hexdigest()


def corpus(n_docs=40, seed=0, shift=0.0, noise=0.0, noise_seed=1, centred=False):
    """Per-document (nll_sum, n_tokens) pairs with very different document difficulties (so the unpaired
    stderr is large), and a run that is the same documents with every token's NLL raised by ``shift`` nats plus
    per-document noise."""
    rng = np.random.default_rng(seed)
    n_tok = rng.integers(200, 2000, n_docs)
    per_tok = rng.uniform(1.0, 4.0, n_docs)  # documents from easy to hard
    n_key = (n_tok * rng.uniform(0.05, 0.2, n_docs)).astype(int)
    key_per_tok = per_tok * rng.uniform(0.3, 0.8, n_docs)
    r2 = np.random.default_rng(noise_seed)
    eps = r2.normal(0, noise, n_docs) if noise else np.zeros(n_docs)
    if centred:  # noise with no net effect on the corpus perplexity: per-document changes that cancel out
        eps -= np.sum(n_tok * eps) / np.sum(n_tok)
    ppl = [[float(n * (p + shift + e)), int(n)] for n, p, e in zip(n_tok, per_tok, eps)]
    longppl = [[float(k * (p + shift + e)), int(k)] for k, p, e in zip(n_key, key_per_tok, eps)]
    return {
        "ppl": ppl,
        "longppl": longppl,
        "n_key_tokens": [int(k) for k in n_key],
        "key_token_fraction": [[int(k), int(n)] for k, n in zip(n_key, n_tok)],
    }


def stderr_of(items, agg, iters=300):
    rng = np.random.default_rng(1234)
    vals = [agg([items[i] for i in rng.integers(0, len(items), len(items))]) for _ in range(iters)]
    return float(np.std(vals, ddof=1))


def write_run(
    folder: Path, per_doc: dict, date_id: str, model="org/ckpt", texts=None, samples=True, settings=None
) -> Path:
    """A results file and its samples file as lm-eval writes them (values aggregated by the tasks' functions)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(per_doc["ppl"])
    agg = {
        "ppl": per_token.token_weighted_perplexity,
        "longppl": per_token.token_weighted_perplexity,
        "n_key_tokens": lambda xs: float(np.mean(xs)),
        "key_token_fraction": per_token.corpus_ratio,
    }
    res = {f"{m},none": agg[m](v) for m, v in per_doc.items()}
    for m in ("ppl", "longppl"):
        res[f"{m}_stderr,none"] = stderr_of(per_doc[m], agg[m])
    res["n_key_tokens_stderr,none"] = float(np.std(per_doc["n_key_tokens"], ddof=1) / math.sqrt(n))
    res["key_token_fraction_stderr,none"] = "N/A"
    data = {
        "results": {TASK: {"alias": TASK, **res}},
        "higher_is_better": {TASK: {"ppl": False, "longppl": False, "n_key_tokens": None, "key_token_fraction": None}},
        "configs": {
            TASK: {
                "task": TASK,
                "metadata": {
                    "longctx_settings": settings or {"trunc_len": 4096, "data": {"texts_sha256": "abc"}},
                    "longctx_report": declaration(TASK),
                },
            }
        },
        "versions": {TASK: 1},
        "n-samples": {TASK: {"original": n, "effective": n}},
        "model_name": model,
    }
    results = folder / f"results_{date_id}.json"
    results.write_text(json.dumps(data))
    if samples:
        texts = texts or [f"document {i}" for i in range(n)]
        with open(folder / f"samples_{TASK}_{date_id}.jsonl", "w") as f:
            for i in range(n):
                doc = {"doc_id": i, "text": texts[i]}
                rec = {
                    "doc_id": i,
                    "doc": doc,
                    "target": "",
                    "arguments": {},
                    "resps": [],
                    "filtered_resps": [],
                    "filter": "none",
                    "metrics": list(per_doc),
                    "doc_hash": doc_hash(doc),
                    "prompt_hash": "p",
                    "target_hash": "t",
                }
                rec.update({m: v[i] for m, v in per_doc.items()})
                f.write(json.dumps(rec) + "\n")
    return results


# ----------------------------------------------------------------------------------------------- per-token export


def write_export(
    root: Path, settings: dict | None = None, doc_text: str = "Title line\nsome words here and more", **over
):
    """A one-document longppl_govreport export, as TokenExport writes it; ``over`` replaces arrays or fields."""
    text = doc_text
    folder = root / TASK
    folder.mkdir(parents=True)
    manifest = {
        "format": export_files.FORMAT,
        "task": TASK,
        "view": export_files.KEY_TOKEN_VIEW,
        "settings": {"alpha": 2.0, "beta": -2.0, "trunc_len": 4, "key_source": "evaluator", "evaluator": "self"}
        if settings is None
        else settings,
    }
    (folder / export_files.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    words = [(m, m + 4) for m in range(0, len(text) - 4, 5)]
    n = len(words)
    lp = np.linspace(-3, -0.5, n).astype(np.float32)
    lp[0] = np.nan
    arrays = {
        "doc_id": 0,
        "text": text,
        "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "token_id": np.arange(n, dtype=np.int64),
        "char_start": np.array([s for s, _ in words], np.int64),
        "char_end": np.array([e for _, e in words], np.int64),
        "logprob": lp,
        "nll": -lp,
        "greedy": np.arange(n) % 2 == 1,
        "key": np.arange(n) % 3 == 1,
        "lsd": np.linspace(-1, 3, n).astype(np.float32),
        "lcl": np.full(n, -1.0, np.float32),
    }
    arrays.update(over)
    np.savez_compressed(folder / "doc_00000.npz", **arrays)
    return root


# ----------------------------------------------------------------------------------------------- audits


def audit_record(model: str, effective: int = 8192, tested=(4096, 8192, 16384), claimed: int = 32768) -> dict:
    """An ``audit.json`` of ``model`` as ``lm-eval-longctx audit`` writes it (the fields the report tools read)."""
    judged = {
        "window": claimed,
        "verdict": "effective below the claim",
        "sentence": f"effective {effective} of claimed {claimed}",
        "rules": {"fraction": 0.5, "threshold": 0.5, "rule": "contiguous", "decides": "relative"},
        "effective": {
            "relative": {"value": float(effective), "low": float(effective), "high": float(effective)},
            "absolute": {"value": float(effective)},
        },
        "tested_lengths": list(tested),
        "per_length": [
            {"length": n, "gain": 2.0 if n <= effective else 0.1, "gain_ci": [1.8, 2.2] if n <= effective else [0, 0.2],
             "weakest_depth": 0, "weakest_gain": 1.5 if n <= effective else 0.0}
            for n in tested
        ],
    }  # fmt: skip
    return {"kind": "lm_eval_longctx.audit", "model": model, "results_model": model,
            "window": {"tokens": claimed, "source": "max_position_embeddings"}, "verdict": judged}  # fmt: skip


def write_audit(folder: Path, model: str, **kwargs) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "audit.json").write_text(json.dumps(audit_record(model, **kwargs)), encoding="utf-8")
    return folder


def write_checkpoint(folder: Path, weights: bytes = b"weights") -> Path:
    """A checkpoint folder: config.json, a weights file and a README that is not part of its identity."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}), encoding="utf-8")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text(f"{folder}", encoding="utf-8")
    return folder
