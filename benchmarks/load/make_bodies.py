"""Writes the load test's request bodies: one request of N pairs of the default model's
workloads by id, and a single-pair request. Usage: make_bodies.py OUT_DIR [N]"""
import json
import random
import sys

IDS = [
    "a3c", "cyclegan", "lm-bs5", "lm-bs10", "lm-bs20", "lm-bs40", "lm-bs80",
    "recommendation-bs512", "recommendation-bs1024", "recommendation-bs2048",
    "recommendation-bs4096", "recommendation-bs8192", "resnet-18-bs16", "resnet-18-bs32",
    "resnet-18-bs64", "resnet-18-bs128", "resnet-18-bs256", "resnet-50-bs16", "resnet-50-bs32",
    "resnet-50-bs64", "resnet-50-bs128", "transformer-bs16", "transformer-bs32",
    "transformer-bs64", "transformer-bs128", "transformer-bs256",
]

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
rng = random.Random(7)


def pair(a, b):
    return {"a": {"workload": a}, "b": {"workload": b}, "mode": "space"}


big = {"gpu": "v100", "pairs": [pair(rng.choice(IDS), rng.choice(IDS)) for _ in range(n)]}
with open(f"{out}/pairs-{n}.json", "w") as f:
    json.dump(big, f)
with open(f"{out}/pairs-1.json", "w") as f:
    json.dump({"gpu": "v100", "pairs": [pair("resnet-50-bs64", "transformer-bs32")]}, f)
