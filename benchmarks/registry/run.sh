#!/usr/bin/env bash
# The shared registry's costs (BENCHMARKS.md, "Shared registry"), on one machine:
#   1. single-pair /v1/predict throughput and latency, one replica on SQLite, then one on
#      PostgreSQL (the prediction path must not touch the database: same figures);
#   2. registrations per second, spread over two replicas on one PostgreSQL database;
#   3. propagation delay between the two replicas over N writes (p50, p99);
#   4. observations stored per second (POST /v1/observations, batches of 1 and of 100), over
#      the two PostgreSQL replicas and on one SQLite replica.
# Usage: benchmarks/registry/run.sh [seconds] [connections] [writes]
# Needs PostgreSQL as the tests do (scripts/postgres-env.sh) and psql.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-20}"
connections="${2:-8}"
n="${3:-1000}"
eval "$(scripts/python-env.sh)"
source scripts/postgres-env.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q --workspace --bins --examples
bin="$CARGO_TARGET_DIR/debug/duet"
load="$CARGO_TARGET_DIR/debug/examples/registry_load"
work=$(mktemp -d)
db="duet_bench_$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -q "$DUET_TEST_PG" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap 'cleanup; if declare -F duet_pg_stop >/dev/null; then duet_pg_stop; fi' EXIT
psql -q "$DUET_TEST_PG" -c "CREATE DATABASE $db" >/dev/null
dsn="${DUET_TEST_PG%/*}/$db"
token=bench-token
echo "$token" >"$work/token"

start() { # port state
  "$bin" serve --model models/default --addr "127.0.0.1:$1" --state "$2" \
    --token-file "$work/token" --log-format json 2>>"$work/server-$1.log" &
  pids+=($!)
  until curl -sf "http://127.0.0.1:$1/readyz" >/dev/null; do sleep 0.2; done
}

echo "== $(date -u +%F), $(nproc) cores, engine onnx, ${seconds}s, $connections connections"
start 18201 "$work/registry.sqlite"
"$load" predict http://127.0.0.1:18201 "$seconds" "$connections" | sed 's/^/sqlite     /'
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
start 18202 "$dsn"
"$load" predict http://127.0.0.1:18202 "$seconds" "$connections" | sed 's/^/postgres   /'
start 18203 "$dsn"
"$load" writes "$token" "$n" "$connections" http://127.0.0.1:18202 http://127.0.0.1:18203 \
  | sed 's/^/postgres   /'
"$load" propagation "$token" "$n" http://127.0.0.1:18202 http://127.0.0.1:18203 \
  | sed 's/^/postgres   /'
for batch in 1 100; do
  "$load" observations "$token" $((batch == 1 ? n : n * 10)) "$batch" "$connections" \
    http://127.0.0.1:18202 http://127.0.0.1:18203 | sed 's/^/postgres   /'
done
echo "== for comparison: registrations and observations on an SQLite replica"
start 18204 "$work/registry2.sqlite"
"$load" writes "$token" "$n" "$connections" http://127.0.0.1:18204 | sed 's/^/sqlite     /'
for batch in 1 100; do
  "$load" observations "$token" $((batch == 1 ? n : n * 10)) "$batch" "$connections" http://127.0.0.1:18204 \
    | sed 's/^/sqlite     /'
done
