#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of client bytes (fuzz/: cargo fuzz on libFuzzer,
# nightly Rust; a workspace of its own that neither README command builds):
#   scripts/fuzz.sh [SECONDS]        # every target for SECONDS each (default 60)
#   scripts/fuzz.sh SECONDS TARGET   # one target
# cargo-fuzz is installed once into $HOME/.cache/duet-fuzz-tools; the build goes to
# $HOME/.cache/duet-fuzz-target; each target's corpus grows in $HOME/.cache/duet-fuzz-corpus
# from the seeds in fuzz/seeds. Prints each target's executions and what it found; a crash
# leaves its input in fuzz/artifacts/TARGET and fails the script.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/steps.sh"
seconds="${1:-60}"
targets=(predict_json kserve_json grpc_scan http_routes csv_import)
[ $# -ge 2 ] && targets=("$2")
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz.sh: the fuzzer needs nightly Rust: rustup toolchain install nightly" >&2
  exit 2
fi
tools="$HOME/.cache/duet-fuzz-tools"
export PATH="$tools/bin:$PATH"
if ! command -v cargo-fuzz >/dev/null; then
  step "installing cargo-fuzz into $tools"
  cargo install --locked --quiet cargo-fuzz --root "$tools"
  step_done
fi
export CARGO_TARGET_DIR="${DUET_FUZZ_TARGET_DIR:-$HOME/.cache/duet-fuzz-target}"
cd "$here"
step "building the fuzz targets (nightly, address sanitizer, dev profile)"
cargo +nightly fuzz build --dev --fuzz-dir fuzz
step_done
failed=0
summary=()
for target in "${targets[@]}"; do
  corpus="$HOME/.cache/duet-fuzz-corpus/$target"
  mkdir -p "$corpus" "fuzz/artifacts/$target"
  log="$(mktemp)"
  step "fuzzing $target for $seconds s"
  set +e
  cargo +nightly fuzz run --dev --fuzz-dir fuzz "$target" "$corpus" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
    -artifact_prefix="fuzz/artifacts/$target/" >"$log" 2>&1
  rc=$?
  set -e
  runs="$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -1 || true)"
  cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+' || true)"
  if [ "$rc" -ne 0 ]; then
    failed=1
    summary+=("$target: FOUND a failure (exit $rc); input in fuzz/artifacts/$target; log $log")
    tail -40 "$log" >&2
  else
    summary+=("$target: ${runs:-?} executions in $seconds s, coverage ${cov:-?} edges, no finding")
    rm -f "$log"
  fi
  step_done
done
printf '%s\n' "${summary[@]}"
exit "$failed"
