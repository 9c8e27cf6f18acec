#!/usr/bin/env bash
# Builds every built-in model at its defaults, and a few variants (each dtype, causal, few
# tiles), and prints one line per package: its SHA-256 and the build's name. Run it on two
# commits and diff the output to show that a change keeps package bytes identical.
#
#   bash scripts/package-hashes.sh > before.txt; ...; bash scripts/package-hashes.sh > after.txt
#
# The ONNX transformer layers need the Python environment (pip); `--no-onnx` leaves them out.
# IPU=path/to/ipu uses that binary (for example a copy built at the earlier commit) instead of
# building the release CLI of the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${IPU:-}" ]; then
  ipu=$IPU
else
  cargo build --release --quiet -p ipu-cli
  ipu="${CARGO_TARGET_DIR:-target}/release/ipu"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build() {
  local name=$1
  shift
  "$ipu" build "$@" -o "$out/p.ipuexe" >/dev/null 2>&1 || { echo "refused  $name"; return; }
  echo "$(sha256sum "$out/p.ipuexe" | cut -c1-16)  $name"
}
for m in $("$ipu" models | grep -v '^ ' | cut -d: -f1); do
  build "$m" "$m"
done
for d in f32 f16 f143 f152; do
  build "matmul dtype=$d tiles=16" matmul --tiles 16 --set dtype=$d
  build "mlp dtype=$d tiles=32" mlp --tiles 32 --set dtype=$d
  build "attention dtype=$d causal" attention --set dtype=$d --set causal=true
  build "attention-flash dtype=$d seq=512 tiles=64" attention-flash --tiles 64 --set dtype=$d --set seq=512
done
build "attention-flash causal" attention-flash --set causal=true
build "attention-flash seq=256 tiles=3" attention-flash --tiles 3 --set seq=256 --set heads=1
# The transformer layers of scripts/transformer-check.sh, written by transformer_models.py with
# its fixed seed (the Python environment of scripts/onnx-venv.sh), on all 1472 tiles; skipped
# with --no-onnx.
if [ "${1:-}" != "--no-onnx" ]; then
  python=$(bash scripts/onnx-venv.sh)
  for layer in "bert 128 f32" "bert 128 f16" "bert 384 f16" "gpt2 256 f32" "gpt2 256 f16" "gpt2 1024 f16"; do
    set -- $layer
    "$python" scripts/transformer_models.py "$1" --seq "$2" --dtype "$3" --out "$out/$1-$2-$3" >/dev/null
    build "onnx $1 seq=$2 $3" "$out/$1-$2-$3/model.onnx"
  done
fi
