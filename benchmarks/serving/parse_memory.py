"""Peak resident memory of a running `duet serve` over one prediction request: what the request's
JSON parses into, against its bytes. Each kind of request goes to a fresh server (started here
from the `duet` binary given, on the model given, with its default flags), and its `VmHWM`
before and after the request is read from /proc:

- `pairs`: 10,000 inline pairs, every job a registered profile (as `inline_latency.py` sends);
- `groups`: 10,000 inline groups of four, the same;
- `one`: 99,000 pairs whose jobs give one feature each (the least JSON for a feature map);
- `many`: pairs whose jobs give 400 features each, up to 25 MB of body.

Usage: python benchmarks/serving/parse_memory.py DUET_BINARY MODEL_DIR [PORT]
(ONNX Runtime's library in ORT_DYLIB_PATH where the model runs on it.)
"""
import http.client
import json
import subprocess
import sys
import time

from alternating import inline_jobs

binary, model = sys.argv[1], sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 18300


def memory(pid):
    """(VmRSS, VmHWM) of `pid`, MiB."""
    status = {line.split(":")[0]: line.split()[1]
              for line in open(f"/proc/{pid}/status") if line.startswith("Vm")}
    return int(status["VmRSS"]) // 1024, int(status["VmHWM"]) // 1024


def body(kind):
    gpu, mode, features = inline_jobs(port)

    def job(k):
        return {"features": features(k)}

    if kind == "pairs":
        request = {"gpu": gpu, "pairs": [
            {"a": job(2 * i), "b": job(2 * i + 1), "mode": mode} for i in range(10_000)]}
    elif kind == "groups":
        request = {"gpu": gpu, "groups": [
            {"jobs": [job(4 * g + j) for j in range(4)], "mode": mode} for g in range(10_000)]}
    elif kind == "one":
        one = {"features": {"x": 1}}
        request = {"gpu": gpu, "pairs": [{"a": one, "b": one, "mode": mode}] * 99_000}
    else:
        many = {"features": {f"f{k}": 1 for k in range(400)}}
        pair = {"a": many, "b": many, "mode": mode}
        n = 25_000_000 // len(json.dumps(pair, separators=(",", ":")))
        request = {"gpu": gpu, "pairs": [pair] * n}
    return json.dumps(request, separators=(",", ":")).encode()


for kind in ("pairs", "groups", "one", "many"):
    server = subprocess.Popen([binary, "serve", "--model", model, "--addr", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                ready = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                ready.request("GET", "/readyz")
                if ready.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        data = body(kind)
        before = memory(server.pid)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", "/v1/predict", data, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        time.sleep(0.5)
        rss, peak = memory(server.pid)
        print(f"{kind}: body {len(data) / 1e6:.1f} MB, answered {r.status}, resident {before[0]} MiB "
              f"before, peak {peak} MiB (+{peak - before[0]}: {(peak - before[0]) * 1.048576e6 / len(data):.1f}x "
              f"the body), {rss} MiB after")
    finally:
        server.terminate()
        server.wait()
