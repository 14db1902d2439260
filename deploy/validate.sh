#!/usr/bin/env bash
# Validates the Kubernetes manifests against the Kubernetes JSON schemas, offline (the schemas
# ship inside the kubernetes-validate wheel that scripts/python-env.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DUET_VENV:-$HOME/.cache/duet-venv}"
"$venv/bin/kubernetes-validate" --strict deploy/k8s/*.yaml
