#!/usr/bin/env bash
# Memory and stability: 10,000 registered workloads, then single-pair requests at a fixed rate
# for a soak, sampling the server's resident memory every 30 s (BENCHMARKS.md, "Server").
# Usage: benchmarks/load/soak.sh [seconds] [requests/s]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-600}"
rate="${2:-2000}"
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
work=$(mktemp -d)
trap 'kill $server $sampler 2>/dev/null || true; rm -rf "$work"' EXIT
port=18098
"$bin" serve --addr 127.0.0.1:$port --state "$work/registry.sqlite" --log-format json \
  2>"$work/server.log" &
server=$!
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
rss() { awk '/VmRSS/ {print $2}' /proc/$server/status; }
echo "rss_kib after start: $(rss)"
python3 benchmarks/load/register.py 127.0.0.1:$port 10000
echo "rss_kib with 10000 registered workloads: $(rss)"
( while sleep 30; do echo "rss_kib t+${SECONDS}s: $(rss)"; done ) &
sampler=$!
body='{"gpu": "v100", "pairs": [{"a": {"workload": "job-00042"}, "b": {"workload": "job-09000"}, "mode": "space"}]}'
oha --no-tui -z "${seconds}s" -q "$rate" -c 8 -m POST -H "Content-Type: application/json" \
  -d "$body" "http://127.0.0.1:$port/v1/predict"
echo "rss_kib at the end: $(rss)"
echo "peak rss (VmHWM): $(awk '/VmHWM/ {print $2}' /proc/$server/status) KiB"
