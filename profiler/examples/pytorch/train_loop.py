"""A PyTorch training loop on random data, for profiling with duet on a GPU box.

Prints `step N` after every finished optimiser step (the device synchronised first), so a duet
catalog counts iterations with `progress = "^step \\d+"`. Runs until it is stopped.

    python3 train_loop.py --device cuda --batch 64 --width 2048 --depth 4
"""
import argparse

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    a = p.parse_args()
    device = torch.device(a.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    layers = []
    for _ in range(a.depth):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device=device, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.width, device=device, dtype=dtype)
    step = 0
    while True:
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step += 1
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
