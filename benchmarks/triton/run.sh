#!/usr/bin/env bash
# duet against the Triton Inference Server on the same KServe v2 requests (BENCHMARKS.md,
# "Against Triton (issue 24)"). Starts, on loopback ports chosen free:
# - `duet serve --engine onnx` on the model (with --grpc-addr when this binary has it),
# - Triton 2.51 (nvidia-pytriton 0.7.0) serving the same model.onnx through ONNX Runtime in its
#   Python backend, configured like duet (benchmarks/triton/serve_triton.py),
# both loading the same ONNX Runtime library (the comparison's environment's), then runs
# benchmarks/triton/bench.py: 1 row and 10,000 rows in JSON, binary tensors and gRPC, the same
# bodies and the same load generator (h2load) for both servers, median of RUNS runs of SECONDS
# seconds each. About 8 minutes with the defaults. Needs benchmarks/triton/setup.sh run once and
# the duet binary ($DUET_BIN, default $CARGO_TARGET_DIR/debug/duet: `cargo build -p duet-cli`).
# Usage: benchmarks/triton/run.sh [SECONDS=10] [RUNS=3] [MODEL_DIR=models/default]
#   TRITON_ARGS="--instances 2 --cores 1" gives serve_triton.py another configuration.
#   TRITON_SIZES=10000 times only the 10,000-row requests (TRITON_SIZES=1: only one row).
#   Every figure is also written to target/triton/results.json (or $TRITON_RESULTS/).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-10}"
runs="${2:-3}"
model="${3:-models/default}"
venv="${TRITON_VENV:-$HOME/.cache/duet-triton-venv}"
target="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
duet="${DUET_BIN:-$target/debug/duet}"
benchmarks/triton/setup.sh
[ -x "$duet" ] || { echo "triton run: no duet binary at $duet (cargo build -p duet-cli)" >&2; exit 1; }
[ -f "$model/model.onnx" ] || { echo "triton run: no $model/model.onnx" >&2; exit 1; }
py="$venv/bin/python"
ORT_DYLIB_PATH="$("$py" -c 'import glob, os, onnxruntime
print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])')"
export ORT_DYLIB_PATH

work="$(mktemp -d)"
duet_pid=""
triton_pid=""
cleanup() {
  for pid in $duet_pid $triton_pid; do kill "$pid" 2>/dev/null || true; done
  for pid in $duet_pid $triton_pid; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# Five free loopback ports, all held while chosen so they differ.
read -r duet_port duet_grpc triton_http triton_grpc triton_metrics < <("$py" -c '
import socket
held = [socket.socket() for _ in range(5)]
for s in held: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in held])')

grpc_args=()
if "$duet" serve --help | grep -q -- '--grpc-addr'; then
  grpc_args=(--grpc-addr "127.0.0.1:$duet_grpc")
  duet_grpc_addr="127.0.0.1:$duet_grpc"
else
  echo "triton run: this duet binary ($duet) has no --grpc-addr: duet's gRPC is skipped"
  duet_grpc_addr=""
fi
# --max-queue 64: the 32 connections of the 1-row case all wait for a place (duet's default, one
# per core, answers the excess 503 at once), as they do in Triton, which queues without a bound.
"$duet" serve --engine onnx --model "$model" --addr "127.0.0.1:$duet_port" "${grpc_args[@]}" \
  --max-queue 64 2> "$work/duet.log" &
duet_pid=$!
"$py" benchmarks/triton/serve_triton.py --model "$model" --http-port "$triton_http" \
  --grpc-port "$triton_grpc" --metrics-port "$triton_metrics" ${TRITON_ARGS:-} > "$work/triton.log" 2>&1 &
triton_pid=$!

# Both ready: the model loaded and answering /v2/models/NAME/ready (at most 120 s).
name="$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$model/model.json")"
ready() { "$py" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; }
for server in duet triton; do
  if [ "$server" = duet ]; then port=$duet_port pid=$duet_pid; else port=$triton_http pid=$triton_pid; fi
  for _ in $(seq 1 600); do
    ready "http://127.0.0.1:$port/v2/models/$name/ready" && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/$server.log" >&2; echo "triton run: $server exited" >&2; exit 1; }
    sleep 0.2
  done
  ready "http://127.0.0.1:$port/v2/models/$name/ready" \
    || { tail -n 30 "$work/$server.log" >&2; echo "triton run: $server not ready after 120 s" >&2; exit 1; }
done
grep '^serve_triton:' "$work/triton.log" || true
echo "triton run: duet $("$duet" --version 2>/dev/null | head -n1) on 127.0.0.1:$duet_port${duet_grpc_addr:+ (gRPC $duet_grpc_addr)}; Triton on 127.0.0.1:$triton_http (gRPC :$triton_grpc); $(nproc) cores; ORT $ORT_DYLIB_PATH"
"$py" benchmarks/triton/bench.py --model "$model" --work "$work" --seconds "$seconds" --runs "$runs" \
  --sizes "${TRITON_SIZES:-1,10000}" \
  --duet-http "127.0.0.1:$duet_port" --duet-grpc "$duet_grpc_addr" \
  --triton-http "127.0.0.1:$triton_http" --triton-grpc "127.0.0.1:$triton_grpc"
mkdir -p "${TRITON_RESULTS:-target/triton}"
cp "$work/results.json" "${TRITON_RESULTS:-target/triton}/results.json"
echo "triton run: results in ${TRITON_RESULTS:-target/triton}/results.json"
