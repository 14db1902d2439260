#!/usr/bin/env bash
# README's main command: sets up ONNX Runtime (scripts/python-env.sh), builds duet and serves
# the shipped default model on 127.0.0.1:8080. Extra arguments go to `duet serve`
# (for example --addr 0.0.0.0:8080 --state registry.sqlite --token-file token).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
exec "$CARGO_TARGET_DIR/debug/duet" serve --model models/default "$@"
