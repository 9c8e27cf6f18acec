#!/usr/bin/env bash
# Makes (or reuses) the Python environment the ONNX scripts use, under target/ (git-ignored):
# the pinned onnx, numpy and onnxruntime from the package registry. Prints its python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/onnx-venv
want="onnx==1.23.2 onnxruntime==1.32.0 numpy"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 lacks ensurepip until python3-venv is installed.
    if command -v apt-get >/dev/null; then
      (apt-get update -qq && apt-get install -y -qq python3-venv) >&2
    fi
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check $want >&2
fi
echo "$venv/bin/python"
