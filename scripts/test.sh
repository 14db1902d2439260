#!/usr/bin/env bash
# Runs duet's whole test suite: sets up the Python environment (ONNX Runtime for the ONNX
# agreement tests, the notebooks' packages, the contract and manifest checkers) and PostgreSQL
# (the machine's, else a throwaway cluster, installing Debian's package where it is missing) and
# the real Kubernetes programs the Kubernetes tests run, runs the Rust tests of every crate, then
# checks the API contract against the real server, validates the Kubernetes manifests offline and
# executes the notebooks. Each step prints a line when it starts and its time when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/steps.sh
eval "$(scripts/python-env.sh test)"
# PostgreSQL for the shared registry's tests (DUET_TEST_PG): the machine's, else a throwaway one.
step "finding PostgreSQL for the shared registry's tests"
source scripts/postgres-env.sh
step_done
# The real Kubernetes programs (etcd, kube-apiserver, kube-scheduler) for the Kubernetes tests:
# built once from the Go module proxy into $HOME/.cache/duet-kube, found there afterwards.
step "the Kubernetes programs for the Kubernetes tests (scripts/kube-testbed.sh)"
DUET_KUBE_BIN="$(scripts/kube-testbed.sh)"
export DUET_KUBE_BIN
step_done
# One build for every README command and CI (scripts/duet and scripts/serve.sh use the same).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
step "the Rust tests of every crate (cargo test --workspace; the first run builds the test targets)"
cargo test --workspace "$@"
step_done
# /openapi.json against the real server: schemathesis (every check and phase) and a generated
# client.
step "the API contract against the real server (scripts/api-contract.sh)"
scripts/api-contract.sh
step_done
# Clients nobody in duet wrote: tritonclient over HTTP (binary and JSON) and gRPC, and a client
# generated from proto/duet.proto, against the real server and /v1/predict.
step "tritonclient and a generated gRPC client against the real server (scripts/clients.sh)"
scripts/clients.sh
step_done
step "the Kubernetes manifests, alert rules and dashboard (deploy/validate.sh)"
deploy/validate.sh
step_done
step "the notebooks (scripts/run-notebooks.py)"
"$DUET_VENV/bin/python" scripts/run-notebooks.py
step_done
