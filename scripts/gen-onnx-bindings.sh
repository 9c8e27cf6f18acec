#!/usr/bin/env bash
# Regenerates crates/ipu-onnx/src/generated/onnx.rs, the ONNX protobuf bindings, from the
# onnx.proto inside a pinned onnx Python package. Needs python3 (with venv) and cargo; no
# system protoc. The venv lives under target/ (ignored by git) and is reused.
#
#   bash scripts/gen-onnx-bindings.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ONNX_VERSION=1.23.2
VENV=target/onnx-venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import onnx, sys; sys.exit(onnx.__version__ != '$ONNX_VERSION')" 2>/dev/null; then
  "$VENV/bin/pip" install --quiet "onnx==$ONNX_VERSION" numpy
fi
PROTO=$("$VENV/bin/python" -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx.proto'))")
OUT=crates/ipu-onnx/src/generated/onnx.rs
mkdir -p "$(dirname "$OUT")"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/onnx-bindgen" \
  cargo run --quiet --release --manifest-path tools/onnx-bindgen/Cargo.toml -- \
  "$PROTO" "$OUT" "$ONNX_VERSION"
echo "wrote $OUT from $PROTO (onnx $ONNX_VERSION)"
