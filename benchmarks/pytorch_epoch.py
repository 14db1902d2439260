"""One training epoch of duet's MLP with PyTorch on the CPU, on the batch duet trains on.

The batch comes from `cargo run --example export_batch -p duet-trainer -- <dir>`; the network,
loss and optimiser mirror duet-trainer's: inputs -> 64 -> ReLU -> 64 -> ReLU -> 3, absolute error
of ln(speed) and pinball loss (q = 0.1) on feasible rows plus 0.1 x feasibility cross-entropy,
full-batch Adam (learning rate 0.01, L2 weight decay 1e-4). PyTorch is not a dependency of duet:
install it in a separate environment (see BENCHMARKS.md).

Usage: python benchmarks/pytorch_epoch.py <dir> [--threads 2]
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("dir", type=Path)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--samples", type=int, default=10)
args = parser.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(7)
shape = json.loads((args.dir / "shape.json").read_text())
rows, width = shape["rows"], shape["width"]
x = torch.from_numpy(np.fromfile(args.dir / "inputs.f32", dtype="<f4").reshape(rows, width))
y = torch.from_numpy(np.fromfile(args.dir / "log_speed.f32", dtype="<f4").reshape(rows, 1))
m = torch.from_numpy(np.fromfile(args.dir / "feasible.f32", dtype="<f4").reshape(rows, 1))
count = m.sum().clamp(min=1.0)


def make():
    return torch.nn.Sequential(
        torch.nn.Linear(width, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 3),
    )


def loss_of(out):
    point, p10, logit = out[:, 0:1], out[:, 1:2], out[:, 2:3]
    absolute = ((y - point).abs() * m).sum() / count
    e = y - p10
    pinball = ((0.1 * e + torch.relu(-e)) * m).sum() / count
    bce = -(torch.nn.functional.logsigmoid(logit) * m
            + torch.nn.functional.logsigmoid(-logit) * (1 - m)).mean()
    return absolute + pinball + 0.1 * bce


def run(epochs):
    net = make()
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=1e-4, eps=1e-5)
    for _ in range(epochs):
        opt.zero_grad()
        loss = loss_of(net(x))
        loss.backward()
        opt.step()
    return float(loss.detach())


run(args.epochs)  # warm-up
times = []
for _ in range(args.samples):
    start = time.perf_counter()
    run(args.epochs)
    times.append(time.perf_counter() - start)
median = statistics.median(times)
print(f"pytorch {torch.__version__}, {args.threads} threads: {args.epochs} epochs, "
      f"{rows} rows x {width} inputs: median {median * 1000:.1f} ms "
      f"({median / args.epochs * 1000:.2f} ms per epoch, min {min(times) * 1000:.1f} ms)")
