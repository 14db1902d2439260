#!/usr/bin/env bash
# README's main command: serves the shipped default model on 127.0.0.1:8080 through
# scripts/duet (ONNX Runtime set up, duet built into the shared CARGO_TARGET_DIR). Extra
# arguments go to `duet serve` (for example --addr 0.0.0.0:8080 --state registry.sqlite
# --token-file token).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/duet serve --model models/default "$@"
