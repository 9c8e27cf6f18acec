#!/usr/bin/env bash
# Writes the small exported transformers models the tests run (crates/ipu-onnx/tests/data/
# hf_*.onnx) with their ONNX test data sets (hf_*/input_N.pb: ids and a padding mask;
# output_N.pb: onnxruntime's outputs). Two layers, hidden 64, 4 heads, vocabulary 1000, batch
# 2, sequence 16, the second row's last 5 positions padded; parameters perturbed (--perturb) so
# that no two biases or norm weights are equal and the exporter merges none. Needs the
# environment of scripts/hf-check.sh (torch); the tests themselves need no Python.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/hf-check.sh --venv-only >/dev/null
python=target/hf-venv/bin/python
data=crates/ipu-onnx/tests/data
small=(--batch 2 --seq 16 --pad 5 --layers 2 --hidden 64 --heads 4 --vocab 1000 --perturb 0.02 --quiet)
export_one() {
  local name=$1
  shift
  local dir=target/hf-testdata/$name
  rm -rf "$dir" "$data/$name" "$data/$name.onnx"
  "$python" scripts/hf_export.py "$@" "$dir" "${small[@]}"
  cp "$dir/model.onnx" "$data/$name.onnx"
  mkdir -p "$data/$name"
  "$python" - "$dir" "$data/$name" "$data/$name.onnx" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
src, dst, model = sys.argv[1:4]
g = onnx.load(model).graph
for kind, names in (("input", [i.name for i in g.input]), ("output", [o.name for o in g.output])):
    sub = "inputs" if kind == "input" else "expected"
    for n, name in enumerate(names):
        t = numpy_helper.from_array(np.load(f"{src}/{sub}/{name}.npy"), name)
        with open(f"{dst}/{kind}_{n}.pb", "wb") as f:
            f.write(t.SerializeToString())
PY
}
export_one hf_bert bert-base
export_one hf_distilbert_sdpa distilbert --attn sdpa
export_one hf_gpt2_torchscript gpt2 --exporter torchscript
export_one hf_llama llama --kv-heads 2
du -ch "$data"/hf_*.onnx | tail -1
