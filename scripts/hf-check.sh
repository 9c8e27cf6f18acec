#!/usr/bin/env bash
# A Hugging Face transformers model as a user exports it, on the simulated device, checked
# against onnxruntime on the same inputs.
#
#   bash scripts/hf-check.sh MODEL [BATCH] [SEQ] [f32|f16] [scripts/hf_export.py flags...]
#   bash scripts/hf-check.sh --venv-only     (makes the environment, prints its python)
#
# MODEL: bert-base, distilbert, gpt2 or llama (SmolLM2-135M's shape); defaults: batch 1,
# sequence 128, f32. Extra flags go to scripts/hf_export.py, e.g. `--layers 2`,
# `--exporter torchscript`, `--attn sdpa`, `--pad 40`.
#
# Makes its own Python environment under target/hf-venv (torch, transformers, onnx,
# onnxruntime, onnxscript from the package registry: about 5 GB with torch's CUDA libraries),
# builds the model from its configuration with random weights from a fixed seed (nothing is
# downloaded), exports it with torch.onnx.export (the dynamo exporter unless told), writes the
# ids and a padding mask (rows 1, 3, ... padded when BATCH > 1) as .npy files with onnxruntime's
# outputs, builds the release CLI, runs `ipu run model.onnx --input ... --outputs DIR` on all
# 1472 tiles and compares every output with onnxruntime's (scripts/compare_outputs.py): f32
# within 1e-3 of the output's scale with every row's cosine at least 0.999; f16 within 2e-2 and
# 0.999 (docs/numerics.md).
set -euo pipefail
cd "$(dirname "$0")/.."
venv_only=false
if [ "${1:-}" = --venv-only ]; then venv_only=true; set -- x; fi
model=${1:?usage: hf-check.sh MODEL [BATCH] [SEQ] [f32|f16] [hf_export.py flags...]}
batch=${2:-1}
seq=${3:-128}
dtype=${4:-f32}
shift $(( $# < 4 ? $# : 4 ))
python=$(bash scripts/venv.sh target/hf-venv "torch, transformers, onnx, onnxruntime, onnxscript" \
  torch transformers onnx==1.23.2 onnxruntime==1.32.0 onnxscript numpy)
if $venv_only; then echo "$python"; exit 0; fi
dir=target/hf/$model-b$batch-s$seq-$dtype
rm -rf "$dir"
"$python" scripts/hf_export.py "$model" "$dir" --batch "$batch" --seq "$seq" --dtype "$dtype" \
  --pad $(( seq / 4 )) "$@"
cargo build --release --quiet -p ipu-cli
ipu="${CARGO_TARGET_DIR:-target}/release/ipu"
inputs=()
for f in "$dir"/inputs/*.npy; do
  inputs+=(--input "$(basename "$f" .npy)=$f")
done
"$ipu" run "$dir/model.onnx" "${inputs[@]}" --outputs "$dir/out" \
  --artifacts "$dir/artifacts" --report "$dir/report.json"
case "$dtype" in
  f32) limits=(--max-rel 1e-3 --min-cosine 0.999) ;;
  *) limits=(--max-rel 2e-2 --min-cosine 0.999) ;;
esac
"$python" scripts/compare_outputs.py "$dir" "$dir/out" "${limits[@]}"
