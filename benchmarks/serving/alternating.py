"""What the inline latency scripts share (`inline_latency.py` over HTTP, `grpc_inline_latency.py`
over gRPC): the jobs they send, built from a running server's registered workloads, and the
timing of requests that alternate between servers and between workloads, so that each server's
figures, and the ratio of two workloads, are taken under the same load of the machine.
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


def time_alternating(workloads, targets, send, rounds, pause, label):
    """Each of `workloads` ((name, body) pairs) sent to each target in turn (`send(target,
    body)`), 5 warm-up rounds then `rounds`, waiting `pause` seconds before each request: the
    workloads alternate as the targets do, so that a ratio between two workloads is taken under
    the same load of the machine too. Prints each target's p50 and p90 in ms for each workload,
    as `label(target)` names it, then, for two workloads, each target's ratio of their p50s."""
    times = {(t, w): [] for w in range(len(workloads)) for t in targets}
    for i in range(5 + rounds):
        for target in targets:
            for w, (_, body) in enumerate(workloads):
                time.sleep(pause)
                s = time.perf_counter()
                send(target, body)
                if i >= 5:
                    times[(target, w)].append((time.perf_counter() - s) * 1000)
    p50 = {}
    for (target, w), t in times.items():
        t.sort()
        name, body = workloads[w]
        p50[(target, w)] = statistics.median(t)
        print(f"{label(target)}: {name} ({len(body) / 1e6:.1f} MB): p50 {p50[(target, w)]:.1f} ms, "
              f"p90 {t[int(len(t) * 0.9)]:.1f} ms")
    if len(workloads) == 2:
        for target in targets:
            print(f"{label(target)}: {workloads[1][0]} over {workloads[0][0]}: "
                  f"{p50[(target, 1)] / p50[(target, 0)]:.2f}x of the p50")
