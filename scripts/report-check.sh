#!/usr/bin/env bash
# The HTML report in a real browser: runs the flash-attention preset and a refused graph with
# --artifacts, renders each report.html with headless Chromium (Debian's `chromium` package,
# installed when missing) to a PNG, and fails unless the page's script marked the page
# `data-ok="1"` (it does only after drawing everything without a JavaScript error).
#
#   bash scripts/report-check.sh [OUT_DIR]     (default: target/report-check)
#
# IPU may name the `ipu` binary (default: the debug build, built here). The screenshots land
# in OUT_DIR/flash.png and OUT_DIR/refused.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${CARGO_TARGET_DIR:-target}/report-check}"
mkdir -p "$out"
if ! command -v chromium >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
if [ -z "${IPU:-}" ]; then
  cargo build --quiet -p ipu-cli
  IPU="${CARGO_TARGET_DIR:-target}/debug/ipu"
fi
db="$out/runs.sqlite"
IPU_LOG=warn "$IPU" run attention-flash --artifacts "$out/flash" --db "$db" >"$out/flash.txt"
# A graph planning refuses for memory: exit 2, and the report is still written, with the view
# of every tile at the refused operation (the weights of later layers live beside it).
status=0
IPU_LOG=warn "$IPU" run mlp --set width=4096 --set depth=3 --tiles 4 --artifacts "$out/refused" \
  --db "$db" >"$out/refused.txt" 2>&1 || status=$?
[ "$status" -eq 2 ] || { echo "the refused graph exited with $status, not 2" >&2; exit 1; }
check() {
  local name="$1" page="$2"
  [ -f "$page" ] || { echo "$page is missing" >&2; exit 1; }
  local url="file://$(realpath "$page")"
  local flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=5000)
  local dom
  dom=$(timeout 120 chromium "${flags[@]}" --dump-dom "$url" 2>/dev/null)
  if ! grep -q '<body[^>]*data-ok="1"' <<<"$dom"; then
    echo "$page: the report's script did not finish without an error:" >&2
    grep -o 'data-error="[^"]*"' <<<"$dom" >&2 || echo "(no data-ok marker)" >&2
    exit 1
  fi
  timeout 120 chromium "${flags[@]}" --window-size=1280,2400 --screenshot="$out/$name.png" "$url" \
    >/dev/null 2>&1
  [ -s "$out/$name.png" ] || { echo "no screenshot of $page" >&2; exit 1; }
  echo "report-check: $page ok ($(wc -c <"$page") bytes), screenshot $out/$name.png"
}
check flash "$out/flash/report.html"
check refused "$out/refused/report.html"
grep -q '"planning":true' "$out/refused/report.html" \
  || { echo "the refused graph's report has no planning refusal's memory view" >&2; exit 1; }
