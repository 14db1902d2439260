"""p50 and p90 latency of 10,000-pair prediction requests against a running `duet serve` on
the shipped default model, one after another on one connection (10 warm-up requests, then 50):
by registered id, then with one job of each pair inline.

Usage: python benchmarks/memory/latency.py PORT
"""
import http.client, json, sys, time, statistics
port = int(sys.argv[1])
IDS = ["a3c","cyclegan","resnet-50-bs64","transformer-bs32","lm-bs80","recommendation-bs2048"]
def job(k, inline):
    if inline:
        return {"features": {"solo_throughput": 5.0 + k / 1e4, "model": "LM", "batch_size": 20 + k % 60}}
    return {"workload": IDS[k % 6]}
def req(inline):
    return json.dumps({"gpu": "v100", "pairs": [{"a": job(k, inline), "b": job(k + 1, False), "mode": "space"} for k in range(10000)]}).encode()
c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
for name, body in (("by id", req(False)), ("inline", req(True))):
    t = []
    for i in range(60):
        s = time.perf_counter()
        c.request('POST', '/v1/predict', body, {'Content-Type': 'application/json'})
        r = c.getresponse(); r.read()
        assert r.status == 200
        if i >= 10: t.append((time.perf_counter() - s) * 1000)
    print(name, f"p50 {statistics.median(t):.1f} ms p90 {sorted(t)[int(len(t)*0.9)]:.1f} ms")
