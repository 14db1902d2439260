#!/usr/bin/env bash
# What a group costs in an observation (BENCHMARKS.md, "Observations", groups): one batch of
# 10,000 co-locations of two jobs and one of 10,000 groups of eight (every job a registered Gavel
# workload, solo throughputs reported), each POSTed twice (new ids each time) to
# `duet serve --engine ENGINE` on the shipped default model, memory store, and then
# `GET /v1/drift` over the newest 10,000 (the groups). Prints each call's wall time.
# Usage: benchmarks/observations/groups.sh [burn|onnx]
set -euo pipefail
cd "$(dirname "$0")/../.."
engine="${1:-burn}"
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
echo bench-token >"$work/token"
"$DUET_VENV/bin/python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
jobs = ["a3c", "cyclegan", "resnet-50-bs64", "transformer-bs32", "lm-bs20",
        "recommendation-bs512", "resnet-18-bs64", "resnet-50-bs32"]
def observation(ident, size):
    o = {"id": ident, "gpu": "v100", "mode": "space",
         "a": {"workload": jobs[0]}, "b": {"workload": jobs[1]},
         "throughput_a": 5.0, "throughput_b": 5.0,
         "solo_throughput_a": 10.0, "solo_throughput_b": 10.0,
         "window_s": 10, "observed_at": "2026-12-01T12:00:00Z"}
    if size > 2:
        o["others"] = [{"job": {"workload": w}, "throughput": 2.0, "solo_throughput": 10.0}
                       for w in jobs[2:size]]
    return o
for size, name in [(2, "pairs"), (8, "groups8")]:
    for run in (1, 2):
        body = {"observations": [observation(f"{name}-{run}-{i}", size) for i in range(10000)]}
        with open(f"{work}/{name}-{run}.json", "w") as f:
            json.dump(body, f)
PY
"$bin" serve --model models/default --engine "$engine" --addr 127.0.0.1:0 \
  --token-file "$work/token" 2>"$work/server.log" &
server=$!
base=""
for _ in $(seq 1 600); do
  addr="$(grep -o 'listening addr=[0-9.:]*' "$work/server.log" | head -1 | cut -d= -f2 || true)"
  if [ -n "$addr" ] && curl -sf "http://$addr/readyz" >/dev/null; then base="http://$addr"; break; fi
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$base" ] || { cat "$work/server.log" >&2; echo "the server never became ready" >&2; exit 1; }
for name in pairs groups8; do
  for run in 1 2; do
    code=$(curl -s -o "$work/answer.json" -w '%{http_code} %{time_total}' \
      -H "Authorization: Bearer bench-token" -H "Content-Type: application/json" \
      --data-binary @"$work/$name-$run.json" "$base/v1/observations")
    [ "${code%% *}" = 200 ] || { head -c 400 "$work/answer.json" >&2; exit 1; }
    echo "$engine: 10,000 $name, run $run: ${code#* } s"
  done
done
code=$(curl -s -o "$work/drift.json" -w '%{http_code} %{time_total}' "$base/v1/drift")
echo "$engine: GET /v1/drift over the newest 10,000 (groups of eight): ${code#* } s"
