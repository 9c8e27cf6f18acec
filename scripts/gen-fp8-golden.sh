#!/usr/bin/env bash
# Regenerates the FP8 golden data (crates/ipu-numerics/tests/data/) with scripts/gen_fp8_golden.py
# in a Python environment of its own under target/ (git-ignored): the pinned ml_dtypes and numpy
# from the package registry, made on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash scripts/venv.sh target/fp8-venv "ml_dtypes, numpy" ml_dtypes==0.7.0 numpy)
"$python" scripts/gen_fp8_golden.py
