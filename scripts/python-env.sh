#!/usr/bin/env bash
# Creates (or reuses) duet's Python environment and prints the path of the ONNX Runtime shared
# library inside it (what ort's load-dynamic needs).
# Usage: eval "$(scripts/python-env.sh [serve|test])"   # exports DUET_VENV and ORT_DYLIB_PATH
#   serve: ONNX Runtime alone (scripts/requirements-serve.txt), for scripts/serve.sh and
#          scripts/duet;
#   test (the default): also what the tests, notebooks and benchmarks use
#          (scripts/requirements.txt).
# Both levels share one environment ($DUET_VENV, default $HOME/.cache/duet-venv): the test level
# adds to what the serve level installed. Progress goes to stderr; stdout is only the exports.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/steps.sh"
level="${1:-test}"
case "$level" in
  serve) requirements="$here/scripts/requirements-serve.txt" ;;
  test) requirements="$here/scripts/requirements.txt" ;;
  *) echo "scripts/python-env.sh: unknown level '$level' (serve or test)" >&2; exit 2 ;;
esac
venv="${DUET_VENV:-$HOME/.cache/duet-venv}"
stamp="$venv/.requirements-$level"
if [ ! -x "$venv/bin/python" ]; then
  step "creating the Python environment $venv"
  python3 -m venv "$venv" >&2
  step_done
fi
# The stamp holds every file this level reads, so a change to either pin reinstalls.
wanted="$(cat "$here/scripts/requirements-serve.txt" "$requirements")"
if [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
  step "installing the Python packages of the $level level ($(basename "$requirements")) into $venv"
  (cd "$here/scripts" && "$venv/bin/pip" install --disable-pip-version-check -r "$requirements") >&2
  printf '%s' "$wanted" > "$stamp"
  step_done
  printf '    %s now holds %s\n' "$venv" "$(du -sh "$venv" | cut -f1)" >&2
fi
lib=$("$venv/bin/python" - <<'PY'
import glob, os, onnxruntime
capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so*")))
print(libs[0] if libs else "")
PY
)
if [ -z "$lib" ]; then
  echo "scripts/python-env.sh: no libonnxruntime.so in the onnxruntime wheel" >&2
  exit 1
fi
echo "export DUET_VENV='$venv'"
echo "export ORT_DYLIB_PATH='$lib'"
