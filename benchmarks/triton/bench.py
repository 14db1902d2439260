"""duet against Triton on the same KServe v2 requests (BENCHMARKS.md, "Against Triton
(issue 24)"); run by benchmarks/triton/run.sh, which starts both servers.

For 1 row and 10,000 rows of `pairs` (FP32 [N, width], a row being one encoded pair; fixed
standard-normal values, seed 24), in three encodings:
- JSON: `{"inputs": [{"name": "pairs", "shape": [N, width], "datatype": "FP32", "data": [...]}]}`,
  the values written as tritonclient.http writes them with binary_data=False (float32 widened to
  Python floats), answered in JSON;
- binary: the binary tensor data extension as tritonclient.http sends it by default (a JSON header
  of `Inference-Header-Content-Length` bytes with `binary_data_size`, then the raw little-endian
  values), asking for binary outputs (`binary_data_output`);
- gRPC: `inference.GRPCInferenceService/ModelInfer` with `raw_input_contents`, as
  tritonclient.grpc sends it by default.

First every body is sent once to each server with a client that checks the answer (HTTP status,
gRPC status, an `outputs` tensor of [N, 3] within 1e-4 of ONNX Runtime in this process); an
encoding a server does not offer is skipped with a line saying so. Then h2load (nghttp2), the
same load generator for both servers and all three encodings (HTTP/1.1 with keep-alive for JSON
and binary, HTTP/2 for gRPC), sends the body back to back from one client thread: 32
connections for 1 row, 1 connection for 10,000 rows, a warm-up and then SECONDS measured; RUNS
runs, the servers taking turns within each run. Throughput is h2load's requests/s over the
measured time; p50 and p99 come from its per-request log. A run with any failed request or a
status other than 2xx fails the case. Prints the medians of the runs as a Markdown table, the
ratios against the issue's targets, and ONNX Runtime's own time for the forward pass (the
servers' overhead being the difference), and writes every figure to WORK/results.json.

Usage: bench.py --model models/default --work DIR --duet-http H:P [--duet-grpc H:P]
                --triton-http H:P --triton-grpc H:P [--seconds 10] [--warmup 2] [--runs 3]
                [--sizes 1,10000]
"""

import argparse
import http.client
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_triton import INPUT, OUTPUT, OUTPUTS, Forward  # noqa: E402

INFER_GRPC = "/inference.GRPCInferenceService/ModelInfer"
SIZES = (1, 10_000)
ENCODINGS = ("JSON", "binary", "gRPC")
CONNECTIONS = {1: 32, 10_000: 1}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=pathlib.Path, required=True)
    p.add_argument("--work", type=pathlib.Path, required=True)
    p.add_argument("--duet-http", required=True)
    p.add_argument("--duet-grpc", default="")
    p.add_argument("--triton-http", required=True)
    p.add_argument("--triton-grpc", required=True)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", default="1,10000",
                   help="the requests' rows to time, among 1 and 10000 (default both)")
    args = p.parse_args()
    try:
        args.sizes = tuple(int(n) for n in args.sizes.split(","))
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: a comma-separated list of 1 and 10000")
    if not args.sizes or any(n not in SIZES for n in args.sizes):
        p.error(f"--sizes {args.sizes}: each one of {', '.join(map(str, SIZES))}")
    return args


# The requests ---------------------------------------------------------------------------------

def bodies(name: str, rows: np.ndarray, work: pathlib.Path) -> dict:
    """The three encodings' bodies of one request, each written to a file for h2load."""
    tensor = {"name": INPUT, "shape": list(rows.shape), "datatype": "FP32"}
    # The one output both servers have (duet also answers `calibrated` and `calibration`
    # where a request names none): the same work and bytes on both sides.
    wanted = [{"name": OUTPUT}]
    as_json = json.dumps({"inputs": [{**tensor, "data": rows.ravel().tolist()}],
                          "outputs": wanted}).encode()
    header = json.dumps({
        "inputs": [{**tensor, "parameters": {"binary_data_size": rows.nbytes}}],
        "outputs": wanted,
        "parameters": {"binary_data_output": True},
    }).encode()
    request = service_pb2.ModelInferRequest(
        model_name=name,
        inputs=[service_pb2.ModelInferRequest.InferInputTensor(
            name=INPUT, datatype="FP32", shape=list(rows.shape))],
        outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=OUTPUT)],
        raw_input_contents=[rows.tobytes()],
    ).SerializeToString()
    made = {
        "JSON": {"body": as_json, "headers": {"Content-Type": "application/json"}},
        "binary": {"body": header + rows.tobytes(), "headers": {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header))}},
        # h2load sends the gRPC message itself: the 5-byte frame (not compressed, length).
        "gRPC": {"body": struct.pack(">BI", 0, len(request)) + request, "message": request,
                 "headers": {"content-type": "application/grpc", "te": "trailers"}},
    }
    for encoding, case in made.items():
        path = work / f"body-{rows.shape[0]}-{encoding}"
        path.write_bytes(case["body"])
        case["file"] = path
    return made


# The checked single request -------------------------------------------------------------------

def outputs_of_json(answer: dict, rows: int) -> np.ndarray:
    tensor = next(t for t in answer["outputs"] if t["name"] == OUTPUT)
    assert tensor["shape"] == [rows, OUTPUTS], tensor["shape"]
    return np.asarray(tensor["data"], dtype=np.float32).reshape(rows, OUTPUTS)


def send_http(addr: str, name: str, case: dict, rows: int) -> np.ndarray:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", f"/v2/models/{name}/infer", body=case["body"], headers=case["headers"])
        response = conn.getresponse()
        answer = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {answer[:300]!r}")
    length = response.getheader("Inference-Header-Content-Length")
    if length is None:
        return outputs_of_json(json.loads(answer), rows)
    header = json.loads(answer[:int(length)])
    tensor = next(t for t in header["outputs"] if t["name"] == OUTPUT)
    size = tensor.get("parameters", {}).get("binary_data_size")
    if size is None:
        return outputs_of_json(header, rows)
    values = np.frombuffer(answer[int(length):int(length) + size], dtype="<f4")
    assert tensor["shape"] == [rows, OUTPUTS], tensor["shape"]
    return values.reshape(rows, OUTPUTS)


def send_grpc(addr: str, case: dict, rows: int) -> np.ndarray:
    with grpc.insecure_channel(addr, options=[
            ("grpc.max_receive_message_length", 1 << 30),
            ("grpc.max_send_message_length", 1 << 30)]) as channel:
        call = channel.unary_unary(INFER_GRPC, request_serializer=None,
                                   response_deserializer=service_pb2.ModelInferResponse.FromString)
        answer = call(case["message"], timeout=120)
    index = [t.name for t in answer.outputs].index(OUTPUT)
    assert list(answer.outputs[index].shape) == [rows, OUTPUTS], answer.outputs[index].shape
    return np.frombuffer(answer.raw_output_contents[index], dtype="<f4").reshape(rows, OUTPUTS)


# h2load ---------------------------------------------------------------------------------------

def h2load(url: str, case: dict, connections: int, seconds: int, warmup: int, log: pathlib.Path,
           h1: bool) -> dict:
    command = ["h2load", "-t", "1", "-c", str(connections), "-m", "1", "-D", str(seconds),
               "--warm-up-time", str(warmup), "-d", str(case["file"]), "--log-file", str(log)]
    if h1:
        command.append("--h1")
    for key, value in case["headers"].items():
        command += ["-H", f"{key}: {value}"]
    command.append(url)
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + warmup + 120)
    text = out.stdout + out.stderr
    figures = {}
    for line in text.splitlines():
        if line.startswith("finished in"):
            figures["rps"] = float(line.split(",")[1].split()[0])
        elif line.startswith("requests:"):
            words = line.replace(",", "").split()
            figures["done"] = int(words[words.index("done") - 1])
            figures["failed"] = int(words[words.index("failed") - 1])
            figures["errored"] = int(words[words.index("errored") - 1])
        elif line.startswith("status codes:"):
            words = line.replace(",", "").split()
            figures["2xx"] = int(words[words.index("2xx") - 1])
    if out.returncode != 0 or "rps" not in figures:
        raise RuntimeError(f"h2load failed ({out.returncode}): {text[-600:]}")
    times = sorted(int(line.split("\t")[2]) / 1000 for line in log.read_text().splitlines()
                   if line.strip())
    bad = figures["failed"] + figures["errored"] + (figures["done"] - figures["2xx"])
    if bad or not times:
        codes = next((line for line in text.splitlines() if line.startswith("status codes:")), "")
        raise RuntimeError(f"{bad} of {figures['done']} requests failed ({codes})")

    def pct(q: float) -> float:
        return times[min(len(times) - 1, int(q * len(times)))]

    return {"rps": figures["rps"], "p50": pct(0.50), "p99": pct(0.99), "requests": len(times)}


# ----------------------------------------------------------------------------------------------

def forward_times(onnx: bytes, rows: np.ndarray) -> dict:
    """ONNX Runtime alone on the 10,000 rows, as duet's engine (and serve_triton.py by default)
    runs it, and on one session: median of 30."""
    cores = os.cpu_count() or 1
    split = Forward(onnx, cores)
    single = Forward(onnx, 1)
    figures = {}
    for label, forward in (("split", split), ("one_session", single)):
        for _ in range(5):
            forward(rows)
        times = []
        for _ in range(30):
            start = time.perf_counter()
            forward(rows)
            times.append((time.perf_counter() - start) * 1000)
        figures[label] = statistics.median(times)
    figures["cores"] = cores
    return figures


def main() -> int:
    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    name = json.loads((args.model / "model.json").read_text())["name"]
    onnx = (args.model / "model.onnx").read_bytes()
    reference = Forward(onnx, os.cpu_count() or 1)
    width = reference.sessions[0].get_inputs()[0].shape[1]
    rng = np.random.default_rng(24)
    requests = {}
    for n in SIZES:
        rows = rng.standard_normal((n, width)).astype(np.float32)
        requests[n] = {"rows": rows, "want": reference(rows), "bodies": bodies(name, rows, args.work)}
        sizes = ", ".join(f"{e} {len(c['body']) / 1e6:.3f} MB"
                          for e, c in requests[n]["bodies"].items())
        print(f"bench: {n:,} row(s) of {width}: {sizes}", flush=True)

    # Triton's configuration of the model as it runs it (instances, batching, backend).
    host, port = args.triton_http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", f"/v2/models/{name}/config")
    triton_config = json.loads(conn.getresponse().read())
    conn.close()
    groups = [(g.get("count"), g.get("kind")) for g in triton_config.get("instance_group", [])]
    print(f"bench: Triton's model config: backend {triton_config.get('backend')}, "
          f"instance_group {groups}, max_batch_size {triton_config.get('max_batch_size')}, "
          f"dynamic_batching {'dynamic_batching' in triton_config}", flush=True)

    servers = {
        "duet": {"http": args.duet_http, "grpc": args.duet_grpc},
        "Triton": {"http": args.triton_http, "grpc": args.triton_grpc},
    }
    offered = {}
    for server, addr in servers.items():
        for encoding in ENCODINGS:
            key = (server, encoding)
            if encoding == "gRPC" and not addr["grpc"]:
                offered[key] = f"{server} serves no gRPC (this `duet serve` has no --grpc-addr)"
                continue
            try:
                worst = 0.0
                for n in SIZES:
                    case = requests[n]["bodies"][encoding]
                    got = (send_grpc(addr["grpc"], case, n) if encoding == "gRPC"
                           else send_http(addr["http"], name, case, n))
                    worst = max(worst, float(np.max(np.abs(got - requests[n]["want"]))))
                if worst > 1e-4:
                    raise RuntimeError(f"outputs differ from ONNX Runtime's by up to {worst:.2e}")
                offered[key] = None
                print(f"bench: {server} {encoding}: answers match ONNX Runtime in process "
                      f"(largest difference {worst:.1e})", flush=True)
            except Exception as e:  # noqa: BLE001 - any failure means: not offered, say why
                offered[key] = f"{server} refuses the {encoding} request: {e}"[:400]
            if offered[key]:
                print(f"bench: SKIPPED {server} {encoding}: {offered[key]}", flush=True)

    forward = forward_times(onnx, requests[10_000]["rows"])
    print(f"bench: ONNX Runtime alone, 10,000 rows: {forward['split']:.1f} ms split over "
          f"{forward['cores']} single-threaded sessions (duet's engine), "
          f"{forward['one_session']:.1f} ms on one session (median of 30)", flush=True)

    results = {}
    load = {"before": os.getloadavg()}
    print(f"bench: load average before the runs {load['before'][0]:.2f} (1 min), "
          f"{load['before'][1]:.2f} (5 min) on {os.cpu_count()} cores", flush=True)
    for run in range(1, args.runs + 1):
        for n in args.sizes:
            for encoding in ENCODINGS:
                for server, addr in servers.items():
                    if offered[(server, encoding)]:
                        continue
                    case = requests[n]["bodies"][encoding]
                    if encoding == "gRPC":
                        url, h1 = f"http://{addr['grpc']}{INFER_GRPC}", False
                    else:
                        url, h1 = f"http://{addr['http']}/v2/models/{name}/infer", True
                    log = args.work / f"log-{server}-{n}-{encoding}-{run}"
                    try:
                        got = h2load(url, case, CONNECTIONS[n], args.seconds, args.warmup, log, h1)
                    except Exception as e:  # noqa: BLE001 - recorded and reported
                        got = {"error": str(e)[:400]}
                        print(f"bench: run {run} {server} {n:,} row(s) {encoding}: FAILED {e}",
                              flush=True)
                    else:
                        print(f"bench: run {run} {server} {n:,} row(s) {encoding}: "
                              f"{got['rps']:.1f} requests/s, p50 {got['p50']:.2f} ms, "
                              f"p99 {got['p99']:.2f} ms ({got['requests']} requests)", flush=True)
                    results.setdefault(f"{server}|{n}|{encoding}", []).append(got)

    load["after"] = os.getloadavg()
    print(f"bench: load average after the runs {load['after'][0]:.2f} (1 min), "
          f"{load['after'][1]:.2f} (5 min)", flush=True)

    def median(server, n, encoding):
        runs = [r for r in results.get(f"{server}|{n}|{encoding}", []) if "error" not in r]
        if len(runs) < args.runs:
            return None
        return {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99")}

    print(f"\nMedian of {args.runs} runs of {args.seconds} s (after {args.warmup} s of warm-up), "
          f"h2load from one thread, {CONNECTIONS[1]} connections for 1 row, "
          f"{CONNECTIONS[10_000]} for 10,000 rows\n")
    print("| request | encoding | duet requests/s | duet p50 / p99 ms | Triton requests/s "
          "| Triton p50 / p99 ms | duet / Triton throughput | target | met |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for n in args.sizes:
        plural = "s" if n > 1 else ""
        for encoding in ENCODINGS:
            d, t = median("duet", n, encoding), median("Triton", n, encoding)
            target = 10.0 if n == 1 else (3.0 if encoding == "JSON" else 1.0)
            label = f">= {target:g}x" if target > 1 else "> 1x (ahead)"
            if d is None or t is None:
                why = "; ".join(filter(None, [offered.get(("duet", encoding)),
                                              offered.get(("Triton", encoding))])) or "a run failed"
                print(f"| {n:,} row{plural} | {encoding} | not measured: {why} | | | | "
                      f"| {label} | - |")
                summary[f"{n}|{encoding}"] = {"skipped": why}
                continue
            ratio = d["rps"] / t["rps"]
            met = ratio >= target if target > 1 else ratio > 1
            summary[f"{n}|{encoding}"] = {"duet": d, "Triton": t, "ratio": ratio, "met": met}
            print(f"| {n:,} row{plural} | {encoding} | {d['rps']:,.1f} | {d['p50']:.2f} / {d['p99']:.2f} "
                  f"| {t['rps']:,.1f} | {t['p50']:.2f} / {t['p99']:.2f} | {ratio:.2f}x | {label} "
                  f"| {'yes' if met else 'NO'} |")
    print(f"\nONNX Runtime alone on the 10,000 rows (median of 30, in this process): "
          f"{forward['split']:.1f} ms as duet's engine runs it ({forward['cores']} single-threaded "
          f"sessions, one slice each), {forward['one_session']:.1f} ms on one session")
    out = args.work / "results.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"runs": results, "medians": summary, "forward_ms": forward, "load_average": load,
                               "triton_config": triton_config,
                               "offered": {f"{s}|{e}": why for (s, e), why in offered.items()}},
                              indent=1))
    tmp.rename(out)
    print(f"bench: every figure in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
