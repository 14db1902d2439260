#!/usr/bin/env bash
# README's main command: serves the shipped default model on 127.0.0.1:8080 through
# scripts/duet (ONNX Runtime set up, duet built into the shared CARGO_TARGET_DIR). Extra
# arguments go to `duet serve` (for example --addr 0.0.0.0:8080 --state registry.sqlite
# --token-file token). Once the model is loaded it prints the URL and a prediction to try;
# Ctrl-C (or SIGTERM) stops the server gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/steps.sh
addr="127.0.0.1:8080"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --addr) addr="${args[i + 1]:-$addr}" ;;
    --addr=*) addr="${args[i]#--addr=}" ;;
  esac
done
port="${addr##*:}"
host="${addr%:*}"
case "$host" in 0.0.0.0 | "[::]" | "") host=127.0.0.1 ;; esac
url="http://$host:$port"
scripts/duet serve --model models/default "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM
ready=0
while kill -0 "$server" 2>/dev/null; do
  if python3 -c "import urllib.request; urllib.request.urlopen('$url/readyz', timeout=1)" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.5
done
if [ "$ready" = 1 ]; then
  try="scripts/duet predict --gpu v100 --mode space resnet-50-bs64,transformer-bs32"
  [ "$url" = "http://127.0.0.1:8080" ] || try="scripts/duet predict --server $url --gpu v100 --mode space resnet-50-bs64,transformer-bs32"
  printf '==> duet is serving models/default at %s (Ctrl-C stops it)\n' "$url" >&2
  printf '    try, from another shell:  %s\n' "$try" >&2
fi
status=0
wait "$server" || status=$?
# A signal interrupts the first wait; wait again for the server's own exit.
if kill -0 "$server" 2>/dev/null; then wait "$server" || status=$?; fi
exit "$status"
