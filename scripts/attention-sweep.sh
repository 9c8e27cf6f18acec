#!/usr/bin/env bash
# The attention sweep of docs/perf.md: `ipu sweep` of the flash-attention preset over sequence
# length and causality, each point an `ipu run` (build, write, read back, simulate, check) in
# its own directory under DIR (default artifacts/attention-sweep), with DIR/summary.csv and
# DIR/summary.html. Stopped (Ctrl-C) and started again, it runs only the missing points. Prints
# the summary as the markdown table of docs/perf.md. Extra arguments go to `ipu sweep`
# (`--jobs 2`, `--db PATH`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ipu-cli
ipu=${CARGO_TARGET_DIR:-target}/release/ipu
dir=${DIR:-artifacts/attention-sweep}
"$ipu" sweep attention-flash --set seq=512,1024,2048,4096,8192,16384 --set causal=false,true \
  --artifacts "$dir" "$@"
python3 - "$dir/summary.csv" <<'P'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| seq | causal | result | cycles | on chip | efficiency on chip | peak tile bytes (standard + interleaved) | estimate | compile | wall |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    n = lambda k: f"{int(r[k]):,}" if r[k] else "-"
    eff = f"{100 * float(r['efficiency_on_chip']):.1f} %" if r["efficiency_on_chip"] else "-"
    print(f"| {r['seq']} | {r['causal']} | {r['result']} | {n('cycles')} | {n('on_chip_cycles')} | {eff} | "
          f"{n('peak_standard_bytes')} + {n('peak_interleaved_bytes')} | {n('estimated_cycles')} | {n('compile_ms')} ms | {int(r['wall_ms']) / 1000:.1f} s |")
P
