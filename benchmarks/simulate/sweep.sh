#!/usr/bin/env bash
# The committed cluster simulations (BENCHMARKS.md, "Scheduler"): the whole default trace on 512
# GPUs at several offered loads and on 64 GPUs at two, and its GPU-sharing variant, four policies
# each, the pricing loop running duet's default model in process; then the same trace at load 1.5 with the pricing loop asking a real
# `duet serve` over loopback, to time /v1/predict. Reports go to reports/simulation/.
# Usage: benchmarks/simulate/sweep.sh [loads at 512 GPUs...]   (default: 0.8 1.0 1.5 2.0)
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
out=reports/simulation
mkdir -p "$out"
loads=("$@")
[ ${#loads[@]} -gt 0 ] || loads=(0.8 1.0 1.5 2.0)
for load in "${loads[@]}"; do
    rm -rf "$out/512-load$load"
    "$bin" simulate --gpus 512 --load "$load" --out "$out/512-load$load"
done
for load in 1.0 1.5; do
    rm -rf "$out/64-load$load"
    "$bin" simulate --gpus 64 --load "$load" --out "$out/64-load$load"
done
# The trace's variant where every GPU pod asks for part of a GPU.
share=traces/alibaba-gpu-v2023/openb_pod_list_gpushare100.csv
for run in "64 1.0" "64 1.5" "512 1.5"; do
    set -- $run
    rm -rf "$out/gpushare100-$1-load$2"
    "$bin" simulate --pods "$share" --gpus "$1" --load "$2" --out "$out/gpushare100-$1-load$2"
done
port=18098
work=$(mktemp -d)
"$bin" serve --model models/default --addr 127.0.0.1:$port 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
rm -rf "$out/512-load1.5-http"
"$bin" simulate --gpus 512 --load 1.5 --policies duet,oracle \
    --predictor-url "http://127.0.0.1:$port" --out "$out/512-load1.5-http"
