#!/usr/bin/env bash
# Checks duet against clients nobody in duet wrote: starts `duet serve` on the shipped default
# model (free loopback ports for HTTP and gRPC, a token that reads need too), then runs
# scripts/check-clients.py: tritonclient over HTTP (the binary tensor extension, its default, and
# JSON) and over gRPC, and a client generated from proto/duet.proto by grpcio-tools, each
# checked against /v1/predict for the same pairs. Run by scripts/test.sh; needs the Python
# environment (scripts/python-env.sh) and the duet binary ($DUET_BIN, default the shared debug
# build).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
eval "$("$here/scripts/python-env.sh")"
target="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
duet="${DUET_BIN:-$target/debug/duet}"
[ -x "$duet" ] || { echo "clients: no duet binary at $duet (cargo build -p duet-cli)" >&2; exit 1; }
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
# Two free loopback ports, both held while chosen so they differ.
read -r port grpc_port < <("$DUET_VENV/bin/python" -c '
import socket
held = [socket.socket() for _ in range(2)]
for s in held: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in held])')
base="http://127.0.0.1:$port"
token="clients-$$-$RANDOM"
printf '%s\n' "$token" > "$work/token"
"$duet" serve --model "$here/models/default" --addr "127.0.0.1:$port" \
  --grpc-addr "127.0.0.1:$grpc_port" --token-file "$work/token" --protect-reads 2> "$work/server.log" &
server=$!
for _ in $(seq 1 600); do
  if "$DUET_VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('$base/readyz')" 2>/dev/null; then break; fi
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; echo "clients: duet serve exited" >&2; exit 1; }
  sleep 0.1
done
"$DUET_VENV/bin/python" "$here/scripts/check-clients.py" --http "127.0.0.1:$port" --grpc "127.0.0.1:$grpc_port" \
  --token "$token" --model "$here/models/default" --work "$work" \
  || { echo "clients: the server's log:" >&2; tail -n 40 "$work/server.log" >&2; exit 1; }
