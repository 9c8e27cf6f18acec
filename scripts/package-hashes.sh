#!/usr/bin/env bash
# Builds every built-in model at its defaults, and a few variants (each dtype, causal, few
# tiles), and prints one line per package: its SHA-256 and the build's name. Run it on two
# commits and diff the output to show that a change keeps package bytes identical.
#
#   bash scripts/package-hashes.sh > before.txt; ...; bash scripts/package-hashes.sh > after.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p ipu-cli
ipu="${CARGO_TARGET_DIR:-target}/release/ipu"
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
