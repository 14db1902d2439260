#!/usr/bin/env bash
# The Python environment of the Triton comparison (BENCHMARKS.md, "Against Triton (issue 24)"):
# nvidia-pytriton 0.7.0, which ships the Triton Inference Server 2.51 binary and its Python
# backend, with ONNX Runtime to run duet's model.onnx inside it, and tritonclient. Made with
# Debian's /usr/bin/python3.11: pytriton's backend stub is built against that interpreter, and
# with another 3.11 patch release it fails at start. Installs the load generator (h2load, from
# nghttp2-client) with apt-get when it is missing and this runs as root. Idempotent: a stamp records what
# was installed, so a second run only prints where the environment is.
# Usage: benchmarks/triton/setup.sh      (prints progress lines; the venv is $TRITON_VENV,
#                                         default $HOME/.cache/duet-triton-venv)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${TRITON_VENV:-$HOME/.cache/duet-triton-venv}"
python=/usr/bin/python3.11
requirements="$here/requirements.txt"
stamp="$venv/.duet-triton-stamp"
[ -x "$python" ] || { echo "triton setup: $python is missing (Debian's python3.11 package)" >&2; exit 1; }
want="$(sha256sum "$requirements" | cut -d' ' -f1) $("$python" --version 2>&1)"

if ! command -v h2load >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "triton setup: installing nghttp2-client (for h2load) with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nghttp2-client >/dev/null
  else
    echo "triton setup: h2load is missing: install nghttp2-client (apt-get install nghttp2-client)" >&2
    exit 1
  fi
fi
echo "triton setup: load generator $(h2load --version | head -n1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "triton setup: $venv is up to date ($want)"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "triton setup: creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
echo "triton setup: installing $requirements (nvidia-pytriton ships a 55 MB wheel)"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
echo "triton setup: checking that the Triton server binary and the backend stub are there"
"$venv/bin/python" - <<'PY'
import pathlib
import pytriton
root = pathlib.Path(pytriton.__file__).parent / "tritonserver"
for part in ("bin/tritonserver", "python_backend_stubs/3.11/triton_python_backend_stub"):
    assert (root / part).is_file(), f"pytriton has no {part} under {root}"
print(f"triton setup: Triton server at {root / 'bin/tritonserver'}")
PY
printf '%s\n' "$want" > "$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "triton setup: done ($venv)"
