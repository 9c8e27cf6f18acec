#!/usr/bin/env bash
# Regenerates the FP8 golden data (crates/ipu-numerics/tests/data/) with scripts/gen_fp8_golden.py
# in a Python environment of its own under target/ (git-ignored): the pinned ml_dtypes and numpy
# from the package registry, made on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/fp8-venv
want="ml_dtypes==0.7.0 numpy"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import ml_dtypes, numpy" 2>/dev/null; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 lacks ensurepip until python3-venv is installed.
    if command -v apt-get >/dev/null; then
      (apt-get update -qq && apt-get install -y -qq python3-venv) >&2
    fi
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check $want >&2
fi
"$venv/bin/python" scripts/gen_fp8_golden.py
