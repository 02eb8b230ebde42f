#!/usr/bin/env bash
# The GPU benchmarks in one call on a lent GPU machine (../shared/device-kit/README.md says how lm-eval travels
# there: copy its wheels to .device-kit/ and build this project's wheel into it, then carry .device-kit).
# Writes JSON and the printed tables under $OUT (default out/gpu). Each step is cut to fit a few minutes on an
# H100; raise the limits for whole runs:
#   LIMIT        lm-eval --limit per task of bench_suite.py (default 2)
#   LENGTHS      long-pass lengths of bench_long_pass.py (default "32768 131072")
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
LIMIT="${LIMIT:-2}"
LENGTHS="${LENGTHS:-32768 131072}"
mkdir -p "$OUT"
if ! python3 -c "import lm_eval" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps .device-kit/*.whl
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/device.txt"
# shellcheck disable=SC2086
python3 scripts/bench_long_pass.py --device cuda --dtype bfloat16 --shape llama8b --lengths $LENGTHS \
    --map-length 32768 --repeats 2 --json "$OUT/long_pass_bf16.json" | tee "$OUT/long_pass_bf16.txt"
for dtype in bfloat16 float32; do
    python3 scripts/bench_suite.py --body llama8b --device cuda --dtype "$dtype" --size paper --limit "$LIMIT" \
        --generation-cases 13 --json "$OUT/suite_$dtype.json" | tee "$OUT/suite_$dtype.txt"
done
