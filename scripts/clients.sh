#!/usr/bin/env bash
# Checks duet against clients nobody in duet wrote: starts `duet serve` on the shipped default
# model (loopback ports of the kernel's choice for HTTP and gRPC, a token that reads need too), then runs
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
token="clients-$$-$RANDOM"
printf '%s\n' "$token" > "$work/token"
# Ports of the kernel's choice, read back from the log (a port picked free and released first
# could be taken by another program before the server binds it).
RUST_LOG=info "$duet" serve --model "$here/models/default" --addr "127.0.0.1:0" \
  --grpc-addr "127.0.0.1:0" --token-file "$work/token" --protect-reads 2> "$work/server.log" &
server=$!
logged() { grep -o "$1 addr=[0-9.:]*" "$work/server.log" | head -1 | cut -d= -f2 || true; }
http="" grpc="" ready=""
for _ in $(seq 1 600); do
  [ -n "$http" ] || http="$(logged listening)"
  [ -n "$grpc" ] || grpc="$(logged 'serving gRPC')"
  if [ -n "$http" ] && [ -n "$grpc" ] && "$DUET_VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://$http/readyz')" 2>/dev/null; then ready=1; break; fi
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; echo "clients: duet serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$ready" ] || { cat "$work/server.log" >&2; echo "clients: duet serve did not become ready" >&2; exit 1; }
"$DUET_VENV/bin/python" "$here/scripts/check-clients.py" --http "$http" --grpc "$grpc" \
  --token "$token" --model "$here/models/default" --work "$work" \
  || { echo "clients: the server's log:" >&2; tail -n 40 "$work/server.log" >&2; exit 1; }
