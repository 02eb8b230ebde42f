#!/usr/bin/env bash
# The GPU benchmarks in one unattended call. Each step runs under its own `timeout` and writes its JSON and printed
# table under $OUT (default out/gpu) as soon as it ends, so a call cut short still returns what it measured; a step
# that fails or times out is named in $OUT/steps.txt and the next one runs.
#   bash scripts/bench_gpu.sh            # on a CUDA machine: 8B Llama body, bf16 and float32
#   bash scripts/bench_gpu.sh --cpu      # rehearsal on a CPU: the same steps at tiny sizes, in a few minutes
# lm-eval itself: where it is not installed, the wheels in .device-kit/ are (docs/scaling.md, "On a GPU: the
# benchmarks in one call").
# Environment: LIMIT (lm-eval --limit per task, default 2), LENGTHS (long-pass lengths, default "32768 131072"),
# STEP_SECONDS (each step's limit, default 120), PYTHON (the interpreter, default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
LIMIT="${LIMIT:-2}"
STEP_SECONDS="${STEP_SECONDS:-120}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
: >"$OUT/steps.txt"
if ! "$PY" -c "import lm_eval" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps .device-kit/*.whl
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ "${1:-}" = "--cpu" ]; then
    DEVICE=cpu SHAPE=tiny SIZE=tiny LENGTHS="${LENGTHS:-1024 4096}" MAP_LENGTH=2048 DTYPES="float32"
else
    DEVICE=cuda SHAPE=llama8b SIZE=paper LENGTHS="${LENGTHS:-32768 131072}" MAP_LENGTH=32768 DTYPES="bfloat16 float32"
fi

"$PY" - >"$OUT/device.txt" <<EOF
import platform, torch, transformers, lm_eval
print("device:", torch.cuda.get_device_name(0) if "$DEVICE" == "cuda" else platform.processor() or "cpu")
if "$DEVICE" == "cuda":
    print("memory GiB:", round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "lm_eval", lm_eval.__version__, "python", platform.python_version())
EOF
cat "$OUT/device.txt"

step() {  # step NAME COMMAND...: run under the step limit, keep its printed output, record how it ended
    local name="$1" rc
    shift
    timeout "$STEP_SECONDS" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    rc=$?
    echo "$name exit $rc$([ $rc = 124 ] && echo ' (timed out)')" | tee -a "$OUT/steps.txt"
}

for dtype in $DTYPES; do
    # shellcheck disable=SC2086
    step "long_pass_$dtype" "$PY" scripts/bench_long_pass.py --device "$DEVICE" --dtype "$dtype" --shape "$SHAPE" \
        --lengths $LENGTHS --map-length "$MAP_LENGTH" --repeats 2 --json "$OUT/long_pass_$dtype.json"
    step "suite_$dtype" "$PY" scripts/bench_suite.py --body "$SHAPE" --device "$DEVICE" --dtype "$dtype" \
        --size "$SIZE" --limit "$LIMIT" --generation-cases 13 --json "$OUT/suite_$dtype.json"
done
