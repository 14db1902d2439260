#!/usr/bin/env bash
# The committed replays of budgeted campaigns (BENCHMARKS.md, "Budgeted campaigns"): each
# committed Gavel device alone as the oracle, seeds 7, 8 and 9, budgets of 10% to 50% of the
# selectable settings, uncertainty and random selection against the full data, the audit at every
# budget, and the probe curves of held-out workloads and held-out model families (a sample of
# each per seed). Reports go to reports/campaign/<device>/.
# Usage: benchmarks/campaign/sweep.sh [devices...]   (default: k80 p100 v100)
# SEEDS, PROBE_UNITS, MAX_PROBES and OUT change the seeds, the probe curves and the folder:
# the seven more seeds of the p90's coverage (BENCHMARKS.md, "The replays' p90 over ten seeds")
# are `SEEDS=10,11,12,13,14,15,16 PROBE_UNITS=0 MAX_PROBES=0 OUT=reports/campaign-more-seeds
# benchmarks/campaign/sweep.sh`, and `benchmarks/campaign/seeds.py` pools them with these.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
cargo build -q -p duet-cli
bin="$CARGO_TARGET_DIR/debug/duet"
out="${OUT:-reports/campaign}"
mkdir -p "$out"
devices=("$@")
[ ${#devices[@]} -gt 0 ] || devices=(k80 p100 v100)
for device in "${devices[@]}"; do
    rm -rf "$out/$device"
    "$bin" campaign replay --data "datasets/gavel-$device" \
        --budget 10%,20%,25%,30%,40%,50% --select uncertainty,random --seeds "${SEEDS:-7,8,9}" \
        --probe-units "${PROBE_UNITS:-3}" --max-probes "${MAX_PROBES:-5}" --group-by model \
        --out "$out/$device"
done
