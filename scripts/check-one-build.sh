#!/usr/bin/env bash
# Checks README's "one build": what scripts/duet (and so scripts/serve.sh) builds, then what
# scripts/test.sh builds, and fails when the second compiles any third-party crate of the first
# again (other features, or dependencies built otherwise). cargo reports every unit of a build,
# compiled or already fresh, with its features and hashed file names, so the check holds in a
# warm CARGO_TARGET_DIR (seconds; CI runs it there) as well as in a new one:
#   scripts/check-one-build.sh            # in $CARGO_TARGET_DIR (default $HOME/.cache/duet-target)
#   scripts/check-one-build.sh --fresh    # in a new temporary folder: two cold builds, ~40 min
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/steps.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/duet-target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
case "${1:-}" in
  --fresh) export CARGO_TARGET_DIR="$work/target" ;;
  "") ;;
  *) echo "check-one-build.sh: unknown argument '$1' (--fresh or nothing)" >&2; exit 2 ;;
esac
cd "$here"
step "one build: what scripts/duet builds (cargo build -p duet-cli) in $CARGO_TARGET_DIR"
cargo build -p duet-cli --message-format json > "$work/serve.json"
step_done
step "one build: what scripts/test.sh builds (cargo test --workspace --no-run)"
cargo test --workspace --no-run --message-format json > "$work/test.json"
step_done
python3 scripts/one-build.py "$work/serve.json" "$work/test.json"
