#!/usr/bin/env bash
# One GPU campaign that ends within 8 minutes: eight workloads (Burn on CUDA: an MLP in fp32, a
# transformer encoder in bf16, a KV-cache decoder in fp16, a convolutional net, a matrix product
# and a memory stream; PyTorch: a training and an inference loop) each alone three times
# (DUET_SOLO_REPETITIONS), then a budgeted set of their pairs measured once (`duet profile
# --budget`: DUET_BUDGET, default 16, of the 72 settings in time-slicing and MPS at 50%, or the
# whole grid where fewer workloads pass their check; chosen in rounds by the model fitted between
# them, up to 5 of them the uniform audit), written as a duet dataset with its campaign.json and
# a log.
#
#   profiler/scripts/gpu-campaign.sh <duet binary built with --features cuda> <output folder> [gpu label]
#
# Needs an NVIDIA GPU, its driver, the CUDA toolkit's headers and NVRTC (burn-cuda compiles its
# kernels at run time; build duet with CUDARC_CUDA_VERSION matching the driver's CUDA, 13.0 with
# driver 580: an NVRTC newer than the driver fails at kernel load), and python3 with PyTorch
# (CUDA) for the two PyTorch workloads.
#
# Then `duet train --device cuda --final-only` on the dataset with what time is left (model/).
#
# Leaves in <output folder>, whatever happens:
#   campaign.log     everything: nvidia-smi, driver, toolkit, each workload's check, duet
#                    profile's lines (what NVML, GPM and MPS said), the dataset's summary
#   catalog.toml     the workloads measured (those that passed their check)
#   dataset/         the dataset (dataset.json, workloads.parquet, pairs.parquet, samples.parquet)
#   partial/         instead, when the campaign was stopped early: what its journal held
#   journal.jsonl    then also the journal (`duet profile --resume` goes on from it)
#   choices.jsonl    and the rounds' choices recorded before they were measured
#   model/           the model trained on the GPU, when there was time for it
#
# DUET_GROUP_SIZE=3 (or 4) measures groups instead of the budgeted pairs: the first four
# workloads that pass their check, alone, in every pair and in every group of 3 (to 4) jobs,
# time-slicing only, a full grid (4 workloads: 10 pairs, 20 triples, 35 groups of four).
#
# The whole script runs against a deadline (DUET_CAMPAIGN_SECONDS, default 450 s): duet profile
# gets what is left under `timeout --foreground -s INT` (the signal to duet alone: a second
# SIGINT would make it exit at once), which stops it cleanly: it stops its workloads and writes
# the partial dataset; SIGKILL follows 20 s later if it has not ended.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 <duet binary built with --features cuda> <output folder> [gpu label]" >&2
  exit 64
fi
if [ ! -x "$1" ]; then echo "$1: not an executable duet binary" >&2; exit 64; fi
started=$(date +%s)
deadline=$((started + ${DUET_CAMPAIGN_SECONDS:-450}))
left() { echo $((deadline - $(date +%s))); }
duet="$(realpath "$1")"
out="$(realpath -m "$2")"
here="$(cd "$(dirname "$0")" && pwd)"
examples="$(realpath "$here/../examples/pytorch")"
python="${PYTHON:-python3}"
# `cpu` only to dry-run this script on a machine without a GPU (with a stand-in nvidia-smi).
device="${DUET_CAMPAIGN_DEVICE:-cuda}"
mkdir -p "$out"
log="$out/campaign.log"
: > "$log"
say() { echo "# $*" | tee -a "$log" >&2; }

# A short private folder: the MPS control socket lives under the campaign's journal folder and
# its path must stay under 107 bytes.
work="$(mktemp -d /tmp/duet-gpu.XXXXXX)"
copy_back() {
  local rc=$?
  set +e
  if [ -f "$work/ds/dataset.json" ]; then
    mkdir -p "$out/dataset" && cp "$work"/ds/* "$out/dataset/"
  elif [ -d "$work/.ds.campaign" ]; then
    [ -f "$work/.ds.campaign/partial/dataset.json" ] &&
      mkdir -p "$out/partial" && cp "$work"/.ds.campaign/partial/* "$out/partial/"
    [ -f "$work/.ds.campaign/journal.jsonl" ] && cp "$work/.ds.campaign/journal.jsonl" "$out/"
    [ -f "$work/.ds.campaign/choices.jsonl" ] && cp "$work/.ds.campaign/choices.jsonl" "$out/"
    for f in "$work"/.ds.campaign/mps-log/*.log; do
      [ -f "$f" ] && { echo "# MPS $(basename "$f"), last lines:"; tail -n 20 "$f"; } >> "$log"
    done
  fi
  [ -f "$work/catalog.toml" ] && cp "$work/catalog.toml" "$out/"
  say "finished after $(($(date +%s) - started)) s with status $rc; in $out: $(cd "$out" && find . -type f | sort | tr '\n' ' ')"
  rm -rf "$work"
}
trap copy_back EXIT
# Stopped from outside (the device's own limit): still copy back.
trap 'exit 130' INT TERM

say "$(date -u +%FT%TZ) gpu-campaign.sh $*"
say "duet: $duet ($("$duet" --version 2>&1 | head -1 || echo 'does not run'))"

# The driver's own folders (nvidia-smi, nvidia-cuda-mps-control, libcuda) where a container
# mounts them.
[ -d /usr/local/nvidia/bin ] && export PATH="$PATH:/usr/local/nvidia/bin"
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/nvidia/lib64"

# The GPU, first: nothing else is worth doing without one.
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi >> "$log" 2>&1; then
  say "no GPU: nvidia-smi is missing or failed (above); nothing is measured"
  exit 2
fi
nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode,mig.mode.current,memory.total \
  --format=csv >> "$log" 2>&1 || true
say "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}; MPS control: $(command -v nvidia-cuda-mps-control || echo 'not on PATH (duet also looks in /usr/local/nvidia/bin, /usr/local/cuda/bin, /usr/bin)')"
gpu="${3:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | sed 's/^NVIDIA //' | tr 'A-Z ' 'a-z-')}"
gpu="${gpu:-gpu}"

# The CUDA toolkit burn-cuda needs at run time: headers (cubecl-cuda reads CUDA_PATH, else
# /usr/local/cuda, /opt/cuda, or /usr when /usr/bin/nvcc exists, and panics without one) and
# libnvrtc (cudarc panics when none loads).
if [ -z "${CUDA_PATH:-}" ]; then
  for d in /usr/local/cuda /opt/cuda "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/bin/nvcc)")")"; do
    if [ -f "$d/include/cuda.h" ] || [ -f "$d/include/cuda_runtime.h" ]; then export CUDA_PATH="$d"; break; fi
  done
fi
if [ -z "${CUDA_PATH:-}" ]; then
  # PyTorch's wheels carry the runtime headers.
  d="$("$python" -c 'import nvidia.cuda_runtime as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null || true)"
  [ -n "$d" ] && [ -d "$d/include" ] && export CUDA_PATH="$d"
fi
say "CUDA_PATH=${CUDA_PATH:-not found}; nvcc: $(command -v nvcc || echo none) $(nvcc --version 2>/dev/null | tail -1 || true)"
for d in "${CUDA_PATH:-/none}/lib64" "${CUDA_PATH:-/none}/lib" \
  "$("$python" -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null || echo /none)/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset}; libnvrtc: $( (ldconfig -p 2>/dev/null | grep -o 'libnvrtc.so[.0-9]*' | sort -u | tr '\n' ' '; ld="${LD_LIBRARY_PATH:-}"; for d in ${ld//:/ }; do ls "$d" 2>/dev/null | grep '^libnvrtc' ; done) | tr '\n' ' ')"
say "python: $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"

# cubecl's kernel cache on disk (read from cubecl.toml in the working folder, which the
# workload processes inherit): each Burn process otherwise compiles every kernel again.
cat > "$work/cubecl.toml" <<TOML
[compilation]
cache = { file = "$work/cubecl-cache" }

[autotune]
cache = { file = "$work/cubecl-cache" }
TOML
cd "$work"

declare -A block
names=(burn-mlp-train burn-encoder-train burn-decoder-infer burn-conv-train burn-matmul-infer
  burn-stream-infer torch-train torch-infer)
block[burn-mlp-train]='kind = "train"
builtin = "mlp"
batch = 512
width = 2048
depth = 4'
block[burn-encoder-train]='kind = "train"
builtin = "encoder"
batch = 32
width = 512
depth = 4
seq = 128
precision = "bf16"'
block[burn-decoder-infer]='kind = "infer"
builtin = "decoder"
batch = 32
width = 512
depth = 4
seq = 32
precision = "fp16"'
block[burn-conv-train]='kind = "train"
builtin = "conv"
batch = 128
width = 64
depth = 4'
block[burn-matmul-infer]='kind = "infer"
builtin = "matmul"
width = 4096
depth = 4'
block[burn-stream-infer]='kind = "infer"
builtin = "stream"
width = 65536
depth = 8'
block[torch-train]="kind = \"train\"
command = [\"$python\", \"$examples/train_loop.py\", \"--device\", \"$device\", \"--batch\", \"256\", \"--width\", \"4096\", \"--depth\", \"4\"]
progress = \"^step \\\\d+\""
block[torch-infer]="kind = \"infer\"
command = [\"$python\", \"$examples/infer_loop.py\", \"--device\", \"$device\", \"--batch\", \"64\", \"--width\", \"1024\", \"--seq\", \"256\"]
progress = \"^batch \\\\d+\""
catalog_of() {
  for n in "$@"; do printf '[[workload]]\nname = "%s"\n%s\n\n' "$n" "${block[$n]}"; done
}
catalog_of "${names[@]}" > "$work/catalog-all.toml"

# Each workload alone for 3 s (its kernels compiled into the cache): one that fails is dropped
# with its pairs, not the campaign.
kept=()
for n in "${names[@]}"; do
  if [ "$(left)" -lt 120 ]; then say "check $n: skipped, too little time left"; continue; fi
  if timeout -s INT -k 5 45 "$duet" workload run "$n" --catalog "$work/catalog-all.toml" \
    --device "$device" --seconds 3 >> "$log" 2>&1; then
    kept+=("$n"); say "check $n: ok"
  else
    say "check $n: FAILED (status $?, output above); dropped with its pairs"
  fi
done
if [ ${#kept[@]} -eq 0 ]; then say "no workload passed its check; nothing is measured"; exit 3; fi
catalog_of "${kept[@]}" > "$work/catalog.toml"

budget=$(($(left) - 30))
say "duet profile: ${#kept[@]} workloads, $budget s"
status=0
group_size="${DUET_GROUP_SIZE:-2}"
if [ "$group_size" -gt 2 ]; then
  catalog_of "${kept[@]:0:4}" > "$work/catalog.toml"
  plan=(--modes timeslice --group-size "$group_size")
else
  # 16 settings, or the whole grid where fewer workloads passed (MPS only on a GPU); the audit a
  # third of the budget at most.
  n=${#kept[@]}
  settings=$((n * (n + 1) / 2 * $([ "$device" = cpu ] && echo 1 || echo 2)))
  budget_settings=$((settings < ${DUET_BUDGET:-16} ? settings : ${DUET_BUDGET:-16}))
  audit=$((budget_settings / 3 < 5 ? budget_settings / 3 : 5))
  plan=(--modes timeslice,mps --shares 50 --budget "$budget_settings" --audit "$audit"
    --round-size 2 --ensemble 3)
fi
timeout --foreground -s INT -k 20 "$budget" "$duet" profile --catalog "$work/catalog.toml" \
  --device "$device" --gpu "$gpu" --warmup 1 --window 2 \
  --window-max 6 --repetitions 1 --solo-repetitions "${DUET_SOLO_REPETITIONS:-3}" \
  --timeout 45 --sample-ms 100 "${plan[@]}" \
  --out "$work/ds" --name "${gpu}-$(date -u +%F)" \
  2>&1 | tee -a "$log" >&2 || status=$?
say "duet profile ended with status $status$([ "$status" = 124 ] && echo ' (the time limit: stopped early)')"
for d in "$work/ds" "$work/.ds.campaign/partial"; do
  if [ -f "$d/dataset.json" ]; then
    "$duet" dataset validate "$d" >> "$log" 2>&1 || say "$d does not validate"
    "$duet" dataset inspect "$d" >> "$log" 2>&1 || true
  fi
done
# Then `duet train` on the GPU with what time is left (the shipped network alone, one seed: the
# evaluation against the baselines is run afterwards on a CPU), stopped like the campaign.
for d in "$work/ds" "$work/.ds.campaign/partial"; do
  [ -f "$d/dataset.json" ] || continue
  if [ "$(left)" -lt 25 ]; then say "duet train: skipped, $(left) s left"; break; fi
  say "duet train --device $device on $d: $(left) s left"
  tstatus=0
  timeout --foreground -s INT -k 10 "$(($(left) - 5))" "$duet" train --data "$d" \
    --device "$device" --final-only --ensemble 3 --max-epochs 300 \
    --out "$out/model" --name "${gpu}-gpu-trained" 2>&1 | tee -a "$log" >&2 || tstatus=$?
  say "duet train ended with status $tstatus"
  break
done
exit "$status"
