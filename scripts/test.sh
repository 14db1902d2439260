#!/usr/bin/env bash
# Runs duet's whole test suite: sets up the Python environment (ONNX Runtime for the ONNX
# agreement tests, the notebook's packages) and PostgreSQL (the machine's, else a throwaway
# cluster), runs the Rust tests of every crate, then executes
# the notebooks and validates the Kubernetes manifests offline.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/python-env.sh)"
# PostgreSQL for the shared registry's tests (DUET_TEST_PG): the machine's, else a throwaway one.
source scripts/postgres-env.sh
# One build for every README command and CI (scripts/duet and scripts/serve.sh use the same).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo test --workspace "$@"
# /openapi.json against the real server: schemathesis (every check and phase) and a generated
# client.
scripts/api-contract.sh
deploy/validate.sh
"$DUET_VENV/bin/python" scripts/run-notebooks.py
