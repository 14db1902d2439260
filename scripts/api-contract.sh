#!/usr/bin/env bash
# Checks that /openapi.json is the truth about the real server: starts `duet serve` on the shipped
# default model (a loopback port of the kernel's choice, a token, a fresh registry file), runs schemathesis with
# every check and every phase (examples, coverage, fuzzing, stateful) on a fixed seed, then
# generates a Python client from the document and calls predict, put, get, list and delete with
# it. Any finding fails. Run by scripts/test.sh; needs the Python environment
# (scripts/python-env.sh) and the duet binary ($DUET_BIN, default the shared debug build).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
eval "$("$here/scripts/python-env.sh")"
target="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
duet="${DUET_BIN:-$target/debug/duet}"
[ -x "$duet" ] || { echo "api-contract: no duet binary at $duet (cargo build -p duet-cli)" >&2; exit 1; }
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
token="contract-$$-$RANDOM"
printf '%s\n' "$token" > "$work/token"
# Port 0: the kernel's choice, read back from the log (a port picked free and released first
# could be taken by another program before the server binds it).
RUST_LOG=info "$duet" serve --engine burn --model "$here/models/default" --addr "127.0.0.1:0" \
  --token-file "$work/token" --state "$work/registry.sqlite" 2> "$work/server.log" &
server=$!
base=""
for _ in $(seq 1 600); do
  if [ -z "$base" ]; then
    addr="$(grep -o 'listening addr=[0-9.:]*' "$work/server.log" | head -1 | cut -d= -f2 || true)"
    [ -n "$addr" ] && base="http://$addr"
  fi
  if [ -n "$base" ] && "$DUET_VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('$base/readyz')" 2>/dev/null; then break; fi
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; echo "api-contract: duet serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$base" ] || { cat "$work/server.log" >&2; echo "api-contract: duet serve logged no address" >&2; exit 1; }
cd "$work"
"$DUET_VENV/bin/schemathesis" --config-file "$here/scripts/schemathesis.toml" run "$base/openapi.json" \
  --checks all --phases examples,coverage,fuzzing,stateful --max-examples 100 --seed 20261201 \
  --header "Authorization: Bearer $token" --no-color
printf 'post_hooks: []\n' > "$work/client.yaml"
"$DUET_VENV/bin/openapi-python-client" generate --url "$base/openapi.json" --meta none \
  --output-path "$work/generated/duet_client" --config "$work/client.yaml" --fail-on-warning >/dev/null
"$DUET_VENV/bin/python" "$here/scripts/check-generated-client.py" "$work/generated" "$base" "$token"
