"""A PyTorch batched inference loop on random data, for profiling with duet on a GPU box.

Prints `batch N` after every finished forward pass (the device synchronised first), so a duet
catalog counts iterations with `progress = "^batch \\d+"`. Runs until it is stopped.

    python3 infer_loop.py --device cuda --batch 256 --width 1024 --seq 128
"""
import argparse

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp16")
    a = p.parse_args()
    device = torch.device(a.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    layer = torch.nn.TransformerEncoderLayer(a.width, nhead=8, dim_feedforward=4 * a.width,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=a.layers).to(device=device, dtype=dtype)
    model.eval()
    x = torch.randn(a.batch, a.seq, a.width, device=device, dtype=dtype)
    n = 0
    with torch.inference_mode():
        while True:
            y = model(x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            n += 1
            print(f"batch {n} mean {y.float().mean().item():.4f}", flush=True)


if __name__ == "__main__":
    main()
