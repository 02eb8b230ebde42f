"""Fixed start-up cost that lm_eval_longctx adds to `lm_eval` and that `lm-eval-longctx --help` costs.

Each command runs REPEATS times in a fresh interpreter, alternating the hook on and off
(LM_EVAL_LONGCTX_DISABLE_HOOK=1), and the medians are printed with their ratio. The machine may be shared:
compare medians, and rerun when the spread is large. `-X importtime` then attributes the import time of
the modules that are ours (lm_eval_longctx*, _lm_eval_longctx*) and of the modules that are imported only
because of us (present with the hook, absent without).

    python scripts/bench_startup.py [--repeats 7] [--skip-ls]

Run it in the environment where the package is installed (pip install .), so the start-up hook is active.
The .pth line imports the hook module even when LM_EVAL_LONGCTX_DISABLE_HOOK=1 (the module reads the variable),
so "hook off" still pays that import; the importtime column is the cost of ours in both cases.

Measured on the shared 2-core development machine, Python 3.11, lm-eval 0.4.13, 9 repeats (5 for ls tasks),
medians (wall clock varies by +-10% between runs there; the import times are the steadier figure):

    command                     wall, hook on / off      ours (-X importtime)     before -> after the cut
    python -c pass              0.022 s / 0.021 s        0.56 ms                  0.63 -> 0.56 ms (noise)
    lm_eval --help              0.706 s / 0.629 s        0.59 ms                  unchanged (0.1% of it)
    lm-eval ls tasks            28.9 s / 30.0 s          0.7 ms + 0.6 ms (lm_eval.api.model, imported for
                                                         the backend check)       unchanged
    lm-eval-longctx --help      0.062 s / 0.060 s        11.4 ms                  23.1 -> 11.4 ms (0.49x):
                                                                                  cli.py no longer imports
                                                                                  pathlib at module level
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

DISABLE = "LM_EVAL_LONGCTX_DISABLE_HOOK"
OURS = re.compile(r"^_?lm_eval_longctx")


def _bin(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def _env(hook: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != DISABLE}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if not hook:
        env[DISABLE] = "1"
    return env


def wall(cmd: list[str], hook: bool) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(hook), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return elapsed


def ours_cumulative_ms(cmd: list[str], hook: bool) -> tuple[float, list[str]]:
    """-X importtime (cmd[0] must be the python executable): the cumulative import time of our modules that no
    other module of ours imported (so stdlib modules first imported by ours count as ours), and the modules
    imported under them that are not ours."""
    proc = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]],
        env=_env(hook),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            rows.append((len(m.group(3)) // 2, m.group(4), int(m.group(2))))
    # the output is post-order: a row's parent is the next row one level up
    total, under, parents = 0, [], {}
    for i in range(len(rows) - 1, -1, -1):
        level, name, cumulative = rows[i]
        parents[level] = name
        inside_ours = any(OURS.match(parents.get(k, "")) for k in range(level))
        if OURS.match(name) and not inside_ours:
            total += cumulative
        elif inside_ours and not OURS.match(name):
            under.append(name)
    return total / 1000, under


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--skip-ls", action="store_true", help="skip `lm-eval ls tasks` (it indexes every built-in YAML)")
    args = ap.parse_args()
    py = sys.executable
    lm_eval_main = [py, "-m", "lm_eval"]
    commands = {
        "python -c pass": [py, "-c", "pass"],
        "lm_eval --help": [*lm_eval_main, "--help"],
        "lm-eval ls tasks": [*lm_eval_main, "ls", "tasks"],
        "lm-eval-longctx --help": [py, "-m", "lm_eval_longctx", "--help"],
        "lm-eval-longctx gate --help": [py, "-m", "lm_eval_longctx", "gate", "--help"],
    }
    if args.skip_ls:
        del commands["lm-eval ls tasks"]
    print(
        f"{'command':30s} {'hook on (s)':>12s} {'hook off (s)':>13s} {'on/off':>7s}   "
        "ours in -X importtime, median ms (hook on / off)"
    )
    for name, cmd in commands.items():
        on, off, imp_on, imp_off, under = [], [], [], [], set()
        for _ in range(args.repeats):
            on.append(wall(cmd, True))
            off.append(wall(cmd, False))
            ms, below = ours_cumulative_ms(cmd, True)
            imp_on.append(ms)
            under.update(below)
            imp_off.append(ours_cumulative_ms(cmd, False)[0])
        mon, moff = statistics.median(on), statistics.median(off)
        print(
            f"{name:30s} {mon:12.3f} {moff:13.3f} {mon / moff:7.3f}   {statistics.median(imp_on):6.2f} / "
            f"{statistics.median(imp_off):6.2f}" + (f"  (incl. {', '.join(sorted(under))[:100]})" if under else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
