#!/usr/bin/env bash
# Creates (or reuses) the Python environment duet's tests and notebooks use, and prints the
# path of the ONNX Runtime shared library inside it (what ort's load-dynamic needs).
# Usage: eval "$(scripts/python-env.sh)"   # exports DUET_VENV and ORT_DYLIB_PATH
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${DUET_VENV:-$HOME/.cache/duet-venv}"
requirements="$here/scripts/requirements.txt"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
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
