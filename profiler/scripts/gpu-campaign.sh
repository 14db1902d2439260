#!/usr/bin/env bash
# One GPU campaign in at most 8 minutes: six workloads (Burn on CUDA: MLP, conv net, transformer
# encoder, KV-cache decoder; PyTorch: a training and an inference loop) alone and in every pair under time-slicing, written as a duet dataset with a log.
#
#   profiler/scripts/gpu-campaign.sh <duet binary built with --features cuda> <output folder> [gpu label]
#
# Needs an NVIDIA GPU, its driver, and python3 with PyTorch (CUDA) for the two PyTorch workloads.
# Writes <output folder>/dataset (the dataset), campaign.log, nvidia-smi.txt and catalog.toml.
# Where MPS cannot start, duet profile says so in the log and measures time-slicing only.
set -euo pipefail
duet="$(realpath "$1")"
out="$(realpath -m "$2")"
gpu="${3:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-' || echo gpu)}"
here="$(cd "$(dirname "$0")" && pwd)"
examples="$here/../examples/pytorch"
python="${PYTHON:-python3}"
mkdir -p "$out"
log="$out/campaign.log"
{
  echo "# $(date -u +%FT%TZ) gpu-campaign.sh $*"
  nvidia-smi || echo "nvidia-smi failed"
} > "$out/nvidia-smi.txt" 2>&1

cat > "$out/catalog.toml" <<TOML
[[workload]]
name = "burn-mlp-train"
kind = "train"
builtin = "mlp"
batch = 512
width = 2048
depth = 4

[[workload]]
name = "burn-conv-train"
kind = "train"
builtin = "conv"
batch = 64
width = 64
depth = 3

[[workload]]
name = "burn-encoder-train"
kind = "train"
builtin = "encoder"
batch = 32
width = 512
depth = 4
seq = 128

[[workload]]
name = "burn-decoder-infer"
kind = "infer"
builtin = "decoder"
batch = 32
width = 512
depth = 4
seq = 32

[[workload]]
name = "torch-train"
kind = "train"
command = ["$python", "$examples/train_loop.py", "--device", "cuda", "--batch", "256", "--width", "4096", "--depth", "4"]
progress = "^step \\\\d+"

[[workload]]
name = "torch-infer"
kind = "infer"
command = ["$python", "$examples/infer_loop.py", "--device", "cuda", "--batch", "64", "--width", "1024", "--seq", "256"]
progress = "^batch \\\\d+"
TOML

# 6 alone + 21 pairs x 2 modes, one repetition each, about 6 s per run with process start-up.
"$duet" profile --catalog "$out/catalog.toml" --device cuda --gpu "$gpu" --modes timeslice,mps \
  --shares 50 --warmup 1.5 --window 3 --repetitions 1 --timeout 60 --sample-ms 100 \
  --out "$out/dataset" --name "${gpu}-$(date -u +%F)" 2>&1 | tee -a "$log"
"$duet" dataset inspect "$out/dataset" | tee -a "$log"
