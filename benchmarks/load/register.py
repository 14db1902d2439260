"""Registers N synthetic workloads (one V100 profile each) with a running duet server over one
keep-alive connection. Usage: register.py HOST:PORT N"""
import http.client
import json
import random
import sys

host, n = sys.argv[1], int(sys.argv[2])
models = ["A3C", "CycleGAN", "LM", "Recommendation", "ResNet-18", "ResNet-50", "Transformer"]
rng = random.Random(11)
conn = http.client.HTTPConnection(host)
for i in range(n):
    body = {
        "kind": rng.choice(["train", "infer"]),
        "profiles": {"v100": {
            "solo_throughput": round(rng.uniform(0.5, 200.0), 3),
            "model": rng.choice(models),
            "batch_size": rng.choice([None, 16, 32, 64, 128, 256]),
        }},
    }
    conn.request("PUT", f"/v1/workloads/job-{i:05d}", json.dumps(body),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status not in (200, 201):
        sys.exit(f"PUT job-{i:05d}: {r.status}")
print(f"registered {n} workloads")
