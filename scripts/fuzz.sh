#!/usr/bin/env bash
# The fuzz targets of crates/ipu-fuzz (docs/robustness.md), on one of two engines:
#
#   bash scripts/fuzz.sh [--engine stable|libfuzzer] [--seconds N] [--minimize] [TARGET...]
#
# stable (the default, what CI runs): the `ipu-fuzz` mutation loop, seeded and without
#   instrumentation, over the committed corpora in fuzz/corpus/TARGET, N seconds a target
#   (default 8: about a minute for all eight).
# libfuzzer: cargo-fuzz (installed with `cargo install cargo-fuzz --locked` if missing) with
#   `--sanitizer none` on the stable toolchain, coverage guided, N seconds a target (default
#   600); it grows a working corpus in fuzz/target/corpus/TARGET from the committed one.
#   --minimize then writes the minimised working corpus back to fuzz/corpus/TARGET.
#
# A finding (a panic, an internal compiler error, a device result that disagrees with the
# reference) stops its target with the input saved under fuzz/artifacts/TARGET and makes the
# script exit 1 after the other targets ran. Every target prints its executions and seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=stable
SECONDS_PER_TARGET=
MINIMIZE=0
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) ENGINE=$2; shift 2 ;;
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --minimize) MINIMIZE=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(graph_text graph_diff package manifest asm disasm sim onnx)

failed=0
case "$ENGINE" in
  stable)
    SECONDS_PER_TARGET=${SECONDS_PER_TARGET:-8}
    cargo build --quiet -p ipu-fuzz
    BIN="${CARGO_TARGET_DIR:-target}/debug/ipu-fuzz"
    for t in "${TARGETS[@]}"; do
      "$BIN" run "$t" --corpus "fuzz/corpus/$t" --seconds "$SECONDS_PER_TARGET" || failed=1
    done
    ;;
  libfuzzer)
    SECONDS_PER_TARGET=${SECONDS_PER_TARGET:-600}
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    for t in "${TARGETS[@]}"; do
      work="fuzz/target/corpus/$t"
      mkdir -p "$work"
      cp -n "fuzz/corpus/$t"/* "$work"/ 2>/dev/null || true
      (cd fuzz && cargo fuzz run --sanitizer none -O "$t" "../$work" -- \
          -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=6144 -timeout=60 \
          -max_len=1048576 -print_final_stats=1) 2>&1 | tee "fuzz/target/$t.log" \
          | grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|==|SUMMARY|Done)" || true
      grep -q "Done [0-9]* runs" "fuzz/target/$t.log" || failed=1
      if [ "$MINIMIZE" = 1 ]; then
        rm -rf "fuzz/target/cmin/$t" && mkdir -p "fuzz/target/cmin/$t"
        (cd fuzz && cargo fuzz cmin --sanitizer none -O "$t" "../$work" >/dev/null 2>&1) || true
        rm -rf "fuzz/corpus/$t" && cp -r "$work" "fuzz/corpus/$t"
      fi
    done
    ;;
  *) echo "unknown engine $ENGINE (stable or libfuzzer)" >&2; exit 2 ;;
esac
exit $failed
