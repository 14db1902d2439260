#!/usr/bin/env bash
# The 10,000-pair request over every transport duet serves (BENCHMARKS.md, "Transports"): starts
# `duet serve --grpc-addr` on the default model and runs benchmarks/transports/bench.py, which
# sends the same request back to back on one connection over /v1/predict (JSON), duet.v1 gRPC,
# /v2 JSON, /v2 binary and KServe gRPC, and prints each one's latency percentiles.
# Usage: benchmarks/transports/run.sh [onnx|burn] [requests per transport]
set -euo pipefail
cd "$(dirname "$0")/../.."
engine="${1:-onnx}"
requests="${2:-30}"
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
work=$(mktemp -d)
server=""
trap 'if [ -n "$server" ]; then kill $server 2>/dev/null || true; fi; rm -rf "$work"' EXIT
port=18101
grpc_port=18102
"$bin" serve --model models/default --engine "$engine" --addr 127.0.0.1:$port \
  --grpc-addr 127.0.0.1:$grpc_port --log-format json 2>"$work/server.log" &
server=$!
until "$DUET_VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/readyz')" 2>/dev/null; do
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.2
done
"$DUET_VENV/bin/python" benchmarks/transports/bench.py "127.0.0.1:$port" "127.0.0.1:$grpc_port" \
  "$requests" "$work"
