#!/usr/bin/env bash
# A transformer layer from ONNX on the simulated device, checked twice: against the host
# reference (ipu run's own check) and against onnxruntime on the same inputs.
#
#   bash scripts/transformer-check.sh [bert|gpt2] [SEQ] [f32|f16] [extra ipu run flags...]
#
# Builds the release CLI, makes the Python environment (scripts/onnx-venv.sh), writes the
# model with random weights from a fixed seed and its inputs as .npy files
# (scripts/transformer_models.py), runs `ipu run MODEL --input NAME=FILE.npy ... --outputs
# DIR` on all 1472 tiles and compares the outputs with onnxruntime's
# (scripts/compare_outputs.py): f32 within 1e-3 of the output's scale with every row's cosine
# at least 0.999; f16 within 2e-2 and 0.999 (docs/numerics.md).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-bert}
seq=${2:-128}
dtype=${3:-f32}
shift $(( $# < 3 ? $# : 3 ))
cargo build --release --quiet -p ipu-cli
ipu="${CARGO_TARGET_DIR:-target}/release/ipu"
python=$(bash scripts/onnx-venv.sh)
dir=target/transformers/$model-$seq-$dtype
rm -rf "$dir"
"$python" scripts/transformer_models.py "$model" --seq "$seq" --dtype "$dtype" --out "$dir"
inputs=()
for f in "$dir"/*.npy; do
  name=$(basename "$f" .npy)
  case "$name" in expected_*) ;; *) inputs+=(--input "$name=$f") ;; esac
done
"$ipu" run "$dir/model.onnx" "${inputs[@]}" --outputs "$dir/out" \
  --artifacts "$dir/artifacts" --report "$dir/report.json" "$@"
case "$dtype" in
  f32) limits=(--max-rel 1e-3 --min-cosine 0.999) ;;
  *) limits=(--max-rel 2e-2 --min-cosine 0.999) ;;
esac
"$python" scripts/compare_outputs.py "$dir" "$dir/out" "${limits[@]}"
