#!/usr/bin/env bash
# Set up a virtualenv on a fresh machine, run the linters (ruff, ruff format --check, mypy) and the test suite
# (this is what CI runs). The fast subset, on every core: bash scripts/test.sh -m "not integration" -n auto.
#   VENV        virtualenv folder (default .venv; created if missing)
#   PYTHON      interpreter that creates it (default python3, 3.10+)
#   TORCH_SPEC  torch to install when the venv has none (default torch==2.13.0: a CPU build here;
#               an unpinned torch pulls a multi-GB CUDA build)
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "$TORCH_SPEC"
# A real (non-editable) install, so the tests see what users get: the wheel, its task YAMLs and
# its discovery hook.
"$PY" -m pip install -q ".[test]"

# No model or dataset may come from a hub during tests.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy"
exec "$PY" -m pytest -q "$@"
