#!/usr/bin/env bash
# Re-measures the compiled-model figures of docs/perf.md ("Compiled models on the simulated
# device"): builds the release binary, runs each model, and prints one line per model with the
# planner estimate, the placed program's cost, the simulated cycles, the checks, the compile
# time and the peak tile memory (from the run's JSON report).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ipu-cli
ipu=target/release/ipu
out=$(mktemp -d)
f16_partials="$out/matmul_f16_partials.ipug"
cat > "$f16_partials" <<'G'
graph matmul_f16_partials {
  input %a: f16[2048, 2048]
  input %b: f16[2048, 2048]
  %c = matmul(%a, %b) {partials = f16}: f16[2048, 2048]
  output %c
}
G
run() {
  local name=$1; shift
  "$ipu" run "$@" --no-db --artifacts "$out/$name" --report "$out/$name.json" 2>/dev/null \
    | grep -E '^(estimated_cycles|numericalChecks)' | tr '\n' ' '
  python3 - "$out/$name.json" "$out/$name/build.view.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1]))
v = json.load(open(sys.argv[2]))
chosen = [f["mapping"] for f in v["finalists"] if f["mapping"].startswith("matmul")][:1]
mapping = f" mapping=\"{chosen[0]}\"" if chosen else ""
print(f"compile_ms={j['compile_ms']} peak_standard={j['peak_tile_bytes']['standard']} peak_interleaved={j['peak_tile_bytes']['interleaved']}{mapping}")
P
}
run mm2048_f32_partials matmul --set m=2048 --set k=2048 --set n=2048
run mm2048_f16_partials "$f16_partials"
run mm2048_f32 matmul --set m=2048 --set k=2048 --set n=2048 --set dtype=f32
# Transformer shapes (f16, f32 partials) and the largest square product.
run mm_512x768x3072 matmul --set m=512 --set k=768 --set n=3072
run mm_512x3072x768 matmul --set m=512 --set k=3072 --set n=768
run mm_128x768x768 matmul --set m=128 --set k=768 --set n=768
"$ipu" build matmul --set m=4096 --set k=4096 --set n=4096 --no-db -o "$out/mm4096.ipuexe" 2>&1 \
  | grep -E '^(error|package=)' || true
run typed_attention typed-attention-small-fp8 --tiles 64
run attention attention
run attention_512 attention --set seq=512 --set heads=8 --set head_dim=128
run flash attention-flash
run flash_causal attention-flash --set causal=true
