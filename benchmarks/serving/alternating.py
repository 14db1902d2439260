"""What the inline latency scripts share (`inline_latency.py` over HTTP, `grpc_inline_latency.py`
over gRPC): the jobs they send, built from a running server's registered workloads, and the
timing of requests that alternate between servers, so that each server's figures are taken under
the same load of the machine.
"""
import http.client
import json
import statistics
import time


def get(port, path):
    """The JSON answer of GET `path` on 127.0.0.1:`port`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, (port, path, r.status, data[:300])
    return json.loads(data)


def inline_jobs(port):
    """(device, mode, features): the server's first device and its model's first mode, and
    `features(k)`, the k-th job's features: a registered profile on that device with its solo
    throughput scaled by 1 + k / 1e7, so that no two jobs of a request are alike."""
    workloads = get(port, "/v1/workloads")
    gpu = sorted(workloads[0]["profiles"])[0]
    profiles = [w["profiles"][gpu] for w in workloads if gpu in w["profiles"]]
    mode = get(port, "/v1/models")[0]["meta"]["spec"]["modes"][0]

    def features(k):
        f = dict(profiles[(k * 7919) % len(profiles)])
        f["solo_throughput"] *= 1 + k / 1e7
        return f

    return gpu, mode, features


def time_alternating(name, size, targets, send, rounds, pause, label):
    """`send(target)` for every target in turn, 5 warm-up rounds then `rounds`, waiting `pause`
    seconds before each; prints each target's p50 and p90 in ms, as `label(target)` names it."""
    times = {t: [] for t in targets}
    for i in range(5 + rounds):
        for target in targets:
            time.sleep(pause)
            s = time.perf_counter()
            send(target)
            if i >= 5:
                times[target].append((time.perf_counter() - s) * 1000)
    for target, t in times.items():
        t.sort()
        print(f"{label(target)}: {name} ({size / 1e6:.1f} MB): p50 {statistics.median(t):.1f} ms, "
              f"p90 {t[int(len(t) * 0.9)]:.1f} ms")
