#!/usr/bin/env bash
# Load test of the real server on loopback with wrk (BENCHMARKS.md, "Server").
# Usage: benchmarks/load/run.sh [burn|onnx] [seconds]
# Starts `duet serve` on the default model, then: one connection sending 10,000-pair requests
# back to back (latency percentiles), and 32 connections sending single-pair requests
# (throughput). Prints wrk's reports and the server's resident memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
engine="${1:-onnx}"
seconds="${2:-20}"
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
python3 benchmarks/load/make_bodies.py "$work" 10000
port=18099
"$bin" serve --model "${MODEL:-models/default}" --engine "$engine" --addr 127.0.0.1:$port --log-format json 2>"$work/server.log" &
server=$!
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
url="http://127.0.0.1:$port/v1/predict"
echo "== engine $engine, 10,000 pairs per request, 1 connection, ${seconds}s"
BODY="$work/pairs-10000.json" wrk -t1 -c1 -d"${seconds}s" --latency -s benchmarks/load/post.lua "$url"
echo "== engine $engine, 1 pair per request, 32 connections, ${seconds}s"
BODY="$work/pairs-1.json" wrk -t2 -c32 -d"${seconds}s" --latency -s benchmarks/load/post.lua "$url"
echo "== server resident memory: $(grep VmRSS /proc/$server/status)"
echo "== server peak resident memory: $(grep VmHWM /proc/$server/status)"
