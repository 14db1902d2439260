#!/usr/bin/env bash
# scikit-learn's HistGradientBoostingRegressor on duet's own folds and features, beside duet's MLP:
# exports the evaluation folds of the default model's data (the three Gavel datasets) for the
# seeds the default model was evaluated on, then fits and scores one regressor per fold.
#   benchmarks/histgb/run.sh [export folder] [histgb.py options, e.g. --identities doubled]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
eval "$(scripts/python-env.sh)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
out="${1:-$(mktemp -d)}"
shift || true
seeds=$("$DUET_VENV/bin/python" -c 'import json; print(",".join(map(str, json.load(open("models/default/model.json"))["evaluation"]["seeds"])))')
cargo build -q --workspace --examples >&2
"$CARGO_TARGET_DIR/debug/examples/export_folds" "$out" --seeds "$seeds" --group-by model >&2
"$DUET_VENV/bin/python" benchmarks/histgb/histgb.py "$out" --duet models/default/model.json "$@"
