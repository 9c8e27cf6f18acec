#!/usr/bin/env bash
# Makes (or reuses) the Python environment the ONNX scripts use, under target/ (git-ignored):
# the pinned onnx, numpy and onnxruntime from the package registry. Prints its python.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh target/onnx-venv "onnx, onnxruntime, numpy" onnx==1.23.2 onnxruntime==1.32.0 numpy
