#!/usr/bin/env bash
# The committed feedback simulation (BENCHMARKS.md, "Learning from what the cluster observes"):
# the whole default trace on 64 GPUs at load 1.5, the pricing loop on a model trained without
# half of gavel-v100's workloads, with and without retraining every 2 simulated hours on what
# the jobs reported, and on the oracle. The report goes to reports/feedback/.
# Usage: benchmarks/simulate/feedback.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
out=reports/feedback/64-load1.5
rm -rf "$out"
mkdir -p reports/feedback
"$CARGO_TARGET_DIR/debug/duet" simulate --feedback --gpus 64 --load 1.5 --retrain-hours 2 \
  --engine onnx --out "$out"
