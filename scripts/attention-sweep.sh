#!/usr/bin/env bash
# Runs a sweep of attention shapes through `ipu run` (build, write, read back, simulate, check)
# and prints one markdown table row per shape: checks, max error against the device-precision
# reference, planner estimate, placed cost, simulated cycles on chip, efficiency on chip, peak
# tile bytes and compile time (from each run's JSON report). Used for docs/perf.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ipu-cli
ipu=${CARGO_TARGET_DIR:-target}/release/ipu
out=$(mktemp -d)
row() {
  local name=$1; shift
  local log
  if ! log=$("$ipu" run "$@" --artifacts "$out/$name" --report "$out/$name.json" 2>&1); then
    echo "| \`ipu run $*\` | refused or failed: $(echo "$log" | grep -E '^error' | head -1) |"
    return
  fi
  python3 - "$out/$name.json" "$*" "$log" <<'P'
import json, re, sys
j = json.load(open(sys.argv[1]))
args, log = sys.argv[2], sys.argv[3]
m = re.search(r"numericalChecks=(\d+) .*numericalTest=(\w+)", log)
checks, verdict = (m.group(1), m.group(2)) if m else ("0", "?")
errs = [float(e) for e in re.findall(r"max_abs_error=([0-9.e+-]+)", log)]
err = max(errs) if errs else float("nan")
peak = j["peak_tile_bytes"]
print(f"| `ipu run {args}` | {int(checks):,} {verdict} | {err:.2g} | {j['estimated_cycles']:,} | "
      f"{j['final_cycles']:,} | {j['on_chip_cycles']:,} | {100 * j['efficiency_on_chip']:.1f} % | "
      f"{peak['standard']:,} + {peak['interleaved']:,} | {j['compile_ms']:,} ms |")
P
}
echo "| command | checks | max error | planner estimate | final (placed) | device on chip | efficiency on chip | peak tile bytes (standard + interleaved) | compile |"
echo "|---|---|---|---|---|---|---|---|---|"
row tafp8 typed-attention-small-fp8 --tiles 64
row fl128 attention-flash --set seq=128
row fl512 attention-flash --set seq=512
row fl1024 attention-flash --set seq=1024
row fl2048 attention-flash
row fl2048c attention-flash --set causal=true
row fl2048d128 attention-flash --set head_dim=128
row fl2048h1 attention-flash --set heads=1
row fl1024h16 attention-flash --set seq=1024 --set heads=16
row fl1024f32 attention-flash --set seq=1024 --set dtype=f32
row fl1024f32c attention-flash --set seq=1024 --set dtype=f32 --set causal=true
row fl2048f143 attention-flash --set dtype=f143
row fl1024f152 attention-flash --set seq=1024 --set dtype=f152 --set head_dim=128
row fl4096 attention-flash --set seq=4096
row fl4096c attention-flash --set seq=4096 --set causal=true
row fl6144 attention-flash --set seq=6144
row fl256t attention-flash --tiles 256
row at128 attention
row at512 attention --set seq=512 --set heads=8 --set head_dim=128
row at256f143c attention --set seq=256 --set heads=16 --set dtype=f143 --set causal=true
row at2048h1 attention --set seq=2048 --set heads=1
row at4096 attention --set seq=4096
