#!/usr/bin/env bash
# The attention sweep of docs/perf.md: `ipu sweep` of the flash-attention preset over sequence
# length and causality, each point an `ipu run` (build, write, read back, simulate, check) in
# its own directory under DIR (default artifacts/attention-sweep), with DIR/summary.csv and
# DIR/summary.html. Stopped (Ctrl-C) and started again, it runs only the missing points. Prints
# the summaries as the markdown tables of docs/perf.md. Extra arguments go to `ipu sweep`
# (`--jobs 2`, `--db PATH`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ipu-cli
ipu=${CARGO_TARGET_DIR:-target}/release/ipu
dir=${DIR:-artifacts/attention-sweep}
"$ipu" sweep attention-flash --set seq=512,1024,2048,4096,8192,16384 --set causal=false,true \
  --artifacts "$dir" "$@"
# The shapes of real models beside the grid: grouped-query attention (32 q heads sharing 8 kv
# heads, head_dim 128) and keys padded through a boolean mask, causal and not. Their points
# live under DIR/models, apart from the grid's.
"$ipu" sweep attention-flash --set heads=32 --set kv_heads=8 --set head_dim=128 --set seq=2048 \
  --artifacts "$dir/models/gqa" "$@"
"$ipu" sweep attention-flash --set mask=padded --set pad=256 --set causal=false,true \
  --artifacts "$dir/models/padded" "$@"
python3 - "$dir/summary.csv" "$dir/models/gqa/summary.csv" "$dir/models/padded/summary.csv" <<'P'
import csv, sys

def cells(r):
    n = lambda k: f"{int(r[k]):,}" if r[k] else "-"
    eff = f"{100 * float(r['efficiency_on_chip']):.1f} %" if r["efficiency_on_chip"] else "-"
    return (f"{r['result']} | {n('cycles')} | {n('on_chip_cycles')} | {eff} | "
            f"{n('peak_standard_bytes')} + {n('peak_interleaved_bytes')} | {n('estimated_cycles')} | "
            f"{n('compile_ms')} ms | {int(r['wall_ms']) / 1000:.1f} s |")

metrics = "result | cycles | on chip | efficiency on chip | peak tile bytes (standard + interleaved) | estimate | compile | wall |"
print("| seq | causal | " + metrics)
print("|---|---|" + "---|" * 8)
for r in csv.DictReader(open(sys.argv[1])):
    print(f"| {r['seq']} | {r['causal']} | " + cells(r))
print()
print("| point | " + metrics)
print("|---|" + "---|" * 8)
for path in sys.argv[2:]:
    for r in csv.DictReader(open(path)):
        keys = list(r)[: list(r).index("result")]
        print("| " + " ".join(f"{k}={r[k]}" for k in keys) + " | " + cells(r))
P
