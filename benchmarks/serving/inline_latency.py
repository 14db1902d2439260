"""p50 and p90 latency of large requests whose jobs are all given by their features, against
running `duet serve`s, one request at a time (5 warm-up requests each, then ROUNDS of each):
10,000 pairs and 10,000 groups of GROUP_SIZE jobs (default 4), every job a registered profile on
the model's first device with its solo throughput scaled by 1 + k / 1e7, so that no two jobs of a
request are alike (as `cargo bench -p duet-server --bench predict`'s inline requests). PAUSE_MS
(default 0) waits between requests, as a pricing loop does between its rounds: what a server
does after an answer is then off the next request's path.

PORTS is one port or several separated by commas (servers of the same model, for example two
builds): the requests alternate between them, and between pairs and groups, so that each
server's figures, and the ratio of groups to pairs it prints, are taken under the same load of
the machine, which on a shared machine moves more between minutes than a change of a few
milliseconds does.

Usage: python benchmarks/serving/inline_latency.py PORTS [GROUP_SIZE] [PAUSE_MS] [ROUNDS]
"""
import http.client
import json
import sys

from alternating import inline_jobs, time_alternating

ports = [int(p) for p in sys.argv[1].split(",")]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 4
pause = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 30
connections = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=120) for p in ports}
gpu, mode, features = inline_jobs(ports[0])


def job(k):
    return {"features": features(k)}


def post(port, body):
    c = connections[port]
    c.request("POST", "/v1/predict", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, (port, r.status, data[:300])


pairs = json.dumps({"gpu": gpu, "pairs": [
    {"a": job(2 * i), "b": job(2 * i + 1), "mode": mode} for i in range(10_000)]}).encode()
groups = json.dumps({"gpu": gpu, "groups": [
    {"jobs": [job(size * g + j) for j in range(size)], "mode": mode} for g in range(10_000)]}).encode()
workloads = [("10,000 inline pairs", pairs), (f"10,000 inline groups of {size}", groups)]
time_alternating(workloads, ports, post, rounds, pause, lambda port: f"port {port}")
