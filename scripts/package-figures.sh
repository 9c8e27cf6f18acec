#!/usr/bin/env bash
# The package figures of docs/perf.md ("Package bytes and host memory"): for each model, the
# package's bytes and, per section, how it is stored (docs/package-format.md: stored or
# deflated, stored and decoded bytes), the shared images and patch records, the compile
# milliseconds (`ipu bench compile`, median of 3) and the peak resident memory of its whole
# `ipu run` (GNU time; skipped with --no-run).
#
#   bash scripts/package-figures.sh [--no-run]
set -euo pipefail
cd "$(dirname "$0")/.."
run=1
[ "${1:-}" = "--no-run" ] && run=0
cargo build --release --quiet -p ipu-cli
ipu="${CARGO_TARGET_DIR:-target}/release/ipu"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
figures() {
  local name=$1
  shift
  "$ipu" build "$@" --no-db -o "$out/p.ipuexe" >/dev/null 2>&1 || { echo "$name: refused"; return; }
  local ms
  ms=$("$ipu" bench compile "$@" --runs 3 2>/dev/null | grep -o 'median_compile_ms=[0-9.]*' | cut -d= -f2)
  local rss="-"
  if [ "$run" = 1 ]; then
    /usr/bin/time -v "$ipu" run "$@" --no-db --artifacts "$out/run" --outputs "$out/run/out" \
      >"$out/run.txt" 2>"$out/time.txt"
    grep -q 'numericalTest=PASS' "$out/run.txt" || { echo "$name: the run failed its checks" >&2; exit 1; }
    rss=$(grep 'Maximum resident set size' "$out/time.txt" | awk '{print $NF}')
  fi
  python3 - "$out/p.ipuexe" "$name" "$ms" "$rss" <<'P'
import struct, sys
path, name, ms, rss = sys.argv[1:]
b = open(path, "rb").read()
kinds = {1: "manifest", 2: "images", 3: "tile table", 4: "constants", 5: "patches"}
count = struct.unpack_from("<I", b, 12)[0]
parts = []
decoded_total = 0
for i in range(count):
    kind, enc, off, length, crc, decoded = struct.unpack_from("<IIQQII", b, 32 + 32 * i)
    dec = decoded if enc == 1 else length
    decoded_total += dec
    how = "deflated" if enc == 1 else "stored"
    parts.append(f"{kinds.get(kind, kind)} {length:,} ({how}, {dec:,} decoded)")
print(f"{name}: package {len(b):,} B, {decoded_total:,} B decoded; compile {ms} ms; "
      f"peak RSS of ipu run {rss} KB")
print("  " + "; ".join(parts))
P
}
figures "matmul 2048^3 f16" matmul --set m=2048 --set k=2048 --set n=2048
figures "matmul 2048^3 f32" matmul --set m=2048 --set k=2048 --set n=2048 --set dtype=f32
figures "attention-flash" attention-flash
figures "typed-attention-small-fp8 --tiles 64" typed-attention-small-fp8 --tiles 64
