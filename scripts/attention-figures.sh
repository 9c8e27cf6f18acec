#!/usr/bin/env bash
# The attention tables of docs/perf.md ("Attention": the shapes, grouped-query attention, masks):
# builds the release binary, runs each row's `ipu run` (build, write the package, read it back,
# simulate, check) and prints the rows as markdown from the run's summary lines and JSON report.
# A row the planner refuses prints its error. Runs one after another (the device is one). The
# long sequences (8192, 16384) are in scripts/attention-sweep.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ipu-cli
ipu=${CARGO_TARGET_DIR:-target}/release/ipu
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
row() {
  local json="$out/report.json"
  rm -f "$json"
  local err
  if err=$("$ipu" run "$@" --no-db --report "$json" 2>&1 >/dev/null); then :; fi
  python3 - "$json" "$*" "$err" <<'P'
import json, os, sys
path, cmd, err = sys.argv[1], sys.argv[2], sys.argv[3]
j = json.load(open(path)) if os.path.exists(path) else {}
if "checks" not in j:
    line = next((l for l in err.splitlines() if l.startswith("error:")), err.strip()[-300:])
    print(f"| `ipu run {cmd}` | {line.removeprefix('error: ')} |")
    sys.exit()
checks = j["checks"]
count = sum(c["count"] for c in checks)
ok = all(c.get("pass", c.get("result") == "PASS") for c in checks) if checks else True
err_max = max((c["max_abs_error"] for c in checks), default=0.0)
n = lambda v: f"{int(v):,}"
peak = j["peak_tile_bytes"]
print(f"| `ipu run {cmd}` | {n(count)} {'PASS' if ok else 'FAIL'} | {err_max:.2g} | "
      f"{n(j['estimated_cycles'])} | {n(j['final_cycles'])} | {n(j['on_chip_cycles'])} | "
      f"{100 * j['efficiency_on_chip']:.1f} % | {n(peak['standard'])} + {n(peak['interleaved'])} | "
      f"{j['compile_ms']} ms |")
P
}
echo "| command | checks | max error | planner estimate | final (placed) | device on chip | efficiency on chip | peak tile bytes (standard + interleaved) | compile |"
echo "|---|---|---|---|---|---|---|---|---|"
row typed-attention-small-fp8 --tiles 64
row attention-flash --set seq=128
row attention-flash --set seq=512
row attention-flash --set seq=1024
row attention-flash
row attention-flash --set causal=true
row attention-flash --set head_dim=128
row attention-flash --set heads=1
row attention-flash --set seq=1024 --set heads=16
row attention-flash --set seq=1024 --set dtype=f32
row attention-flash --set seq=1024 --set dtype=f32 --set causal=true
row attention-flash --set dtype=f143
row attention-flash --set seq=1024 --set dtype=f152 --set head_dim=128
row attention-flash --set partials=f16
row attention-flash --set partials=f16 --set causal=true
row attention-flash --set seq=4096
row attention-flash --set seq=4096 --set partials=f16
row attention-flash --set seq=8192 --set partials=f16
row attention-flash --set seq=4096 --set causal=true
row attention-flash --set seq=6144
row attention-flash --tiles 256
row attention
row attention --set seq=512 --set heads=8 --set head_dim=128
row attention --set seq=256 --set heads=16 --set dtype=f143 --set causal=true
row attention --set seq=2048 --set heads=1
row attention --set seq=4096
echo
echo "Grouped-query attention:"
echo
row attention-flash --set heads=32 --set kv_heads=8 --set head_dim=128 --set seq=1024
row attention-flash --set heads=8 --set kv_heads=2 --set head_dim=128 --set seq=2048
row attention-flash --set heads=8 --set head_dim=128 --set seq=2048
row attention-flash --set heads=2 --set kv_heads=1 --set head_dim=256 --set seq=2048
row attention-flash --set heads=32 --set kv_heads=8 --set head_dim=128 --set seq=2048
echo
echo "Masks:"
echo
row attention-flash --set mask=padded --set pad=256
row attention-flash --set mask=padded --set pad=1024
row attention-flash --set mask=f16
row attention-flash --set mask=f32
row attention-flash --set mask=bool
row attention-flash --set mask=padded --set pad=256 --set causal=true
