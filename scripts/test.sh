#!/usr/bin/env bash
# Runs duet's whole test suite: sets up the Python environment (ONNX Runtime for the ONNX
# agreement tests, the notebook's packages), then the Rust tests of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/python-env.sh)"
cargo test --workspace "$@"
