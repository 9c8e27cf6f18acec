#!/usr/bin/env bash
# The project's test command: builds everything it needs from the repository and crates.io,
# checks formatting and lints, runs every test of the workspace, every fuzz target for 8 seconds
# (scripts/fuzz.sh, docs/robustness.md), then the ONNX conformance run
# (scripts/onnx-conformance.sh, docs/onnx.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 2; }
cargo fmt --all -- --check
# No import circle over two files inside a crate (ARCHITECTURE.md, invariants).
python3 scripts/module-circles.py
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --quiet
# Every fuzz target briefly on the stable engine over the committed corpora (about a minute;
# docs/robustness.md has the long campaigns).
bash scripts/fuzz.sh --seconds 8
# Runs the scripts make record into a scratch database, not the user's.
export XDG_DATA_HOME="${CARGO_TARGET_DIR:-$PWD/target}/test-data"
# The ONNX backend node tests of the imported operators (about 20 s on 2 cores; it sets up
# target/onnx-venv with pip on first use), with the debug `ipu` the tests built.
cargo build --quiet -p ipu-cli
IPU="${CARGO_TARGET_DIR:-target}/debug/ipu" bash scripts/onnx-conformance.sh
# The HTML report in headless Chromium (installed on first use, about a minute; then about 30
# s): the flash-attention preset's and a refused graph's, no JavaScript error allowed.
IPU="${CARGO_TARGET_DIR:-target}/debug/ipu" bash scripts/report-check.sh
