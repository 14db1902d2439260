"""The 10,000-pair request, back to back on one connection, over each transport of a running
`duet serve --grpc-addr`: /v1/predict (JSON), duet.v1.Predictor/Predict (gRPC), /v2 infer in
JSON and in binary (the binary tensor data extension, binary outputs), and KServe ModelInfer
(gRPC, raw contents), the KServe tensor being the same pairs' encoding. Every body is built
once beforehand and every answer read as bytes, not parsed, so the client's time is sending and
receiving only. Three warm-up requests each, then
REQUESTS timed ones; prints the latency percentiles and the request and answer sizes.

Usage: bench.py HTTP_HOST:PORT GRPC_HOST:PORT REQUESTS WORK_DIR
"""

import http.client
import json
import os
import random
import statistics
import sys
import time

import grpc
import numpy as np
from grpc_tools import protoc

http_addr, grpc_addr, requests, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host, port = http_addr.split(":")
here = os.path.dirname(os.path.abspath(__file__))
protos = os.path.join(here, "..", "..", "proto")
assert protoc.main([
    "protoc", f"-I{protos}", f"--python_out={work}",
    os.path.join(protos, "duet.proto"), os.path.join(protos, "inference.proto"),
]) == 0
sys.path.insert(0, work)
sys.path.insert(0, os.path.join(here, "..", "..", "scripts"))
import duet_pb2
import inference_pb2
from encoding import encode_pair

# The load test's 10,000 pairs of the default model's workloads by id (benchmarks/load).
IDS = [
    "a3c", "cyclegan", "lm-bs5", "lm-bs10", "lm-bs20", "lm-bs40", "lm-bs80",
    "recommendation-bs512", "recommendation-bs1024", "recommendation-bs2048",
    "recommendation-bs4096", "recommendation-bs8192", "resnet-18-bs16", "resnet-18-bs32",
    "resnet-18-bs64", "resnet-18-bs128", "resnet-18-bs256", "resnet-50-bs16", "resnet-50-bs32",
    "resnet-50-bs64", "resnet-50-bs128", "transformer-bs16", "transformer-bs32",
    "transformer-bs64", "transformer-bs128", "transformer-bs256",
]
rng = random.Random(7)
pairs = [(rng.choice(IDS), rng.choice(IDS)) for _ in range(10_000)]
predict_json = json.dumps({
    "gpu": "v100",
    "pairs": [{"a": {"workload": a}, "b": {"workload": b}, "mode": "space"} for a, b in pairs],
}).encode()
predict_grpc = duet_pb2.PredictRequest(
    gpu="v100",
    pairs=[duet_pb2.Pair(a=duet_pb2.Job(workload=a), b=duet_pb2.Job(workload=b), mode="space")
           for a, b in pairs],
).SerializeToString()

# The KServe request of the same pairs: their 20,000 encoded rows (a pair is two), each
# workload encoded from its registered profile on V100 as the server encodes it.
conn = http.client.HTTPConnection(host, int(port))
conn.request("GET", "/v1/workloads")
profiles = {w["workload"]: w["profiles"]["v100"] for w in json.loads(conn.getresponse().read())}
with open(os.path.join(here, "..", "..", "models", "default", "model.json")) as f:
    spec = json.load(f)["spec"]
rows = np.array(
    [row for a, b in pairs
     for row in encode_pair(spec, (profiles[a], a), (profiles[b], b), "v100", "space")],
    dtype=np.float64,
).astype(np.float32)
width = rows.shape[1]
tensor = {"name": "pairs", "shape": list(rows.shape), "datatype": "FP32"}
# The raw network output alone, as these figures were first measured (a request naming no
# output also gets `calibrated` and `calibration`).
wanted = [{"name": "outputs"}]
v2_json = json.dumps({"inputs": [{**tensor, "data": rows.ravel().tolist()}],
                      "outputs": wanted}).encode()
header = json.dumps({
    "inputs": [{**tensor, "parameters": {"binary_data_size": rows.nbytes}}],
    "outputs": wanted,
    "parameters": {"binary_data_output": True},
}).encode()
v2_binary = header + rows.tobytes()
infer_grpc = inference_pb2.ModelInferRequest(
    model_name="default",
    inputs=[inference_pb2.ModelInferRequest.InferInputTensor(
        name="pairs", datatype="FP32", shape=list(rows.shape))],
    outputs=[inference_pb2.ModelInferRequest.InferRequestedOutputTensor(name="outputs")],
    raw_input_contents=[rows.tobytes()],
).SerializeToString()


def post(path, body, headers):
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    answer = response.read()
    assert response.status == 200, (path, response.status, answer[:300])
    return len(answer)


channel = grpc.insecure_channel(grpc_addr, options=[
    ("grpc.max_receive_message_length", 1 << 30), ("grpc.max_send_message_length", 1 << 30)])
raw = {"request_serializer": None, "response_deserializer": None}
grpc_predict = channel.unary_unary("/duet.v1.Predictor/Predict", **raw)
grpc_infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", **raw)

cases = [
    ("/v1/predict, JSON", len(predict_json),
     lambda: post("/v1/predict", predict_json, {"Content-Type": "application/json"})),
    ("duet.v1.Predictor/Predict, gRPC", len(predict_grpc),
     lambda: len(grpc_predict(predict_grpc))),
    ("/v2 infer, JSON", len(v2_json),
     lambda: post("/v2/models/default/infer", v2_json, {"Content-Type": "application/json"})),
    ("/v2 infer, binary", len(v2_binary),
     lambda: post("/v2/models/default/infer", v2_binary, {
         "Content-Type": "application/octet-stream",
         "Inference-Header-Content-Length": str(len(header))})),
    ("KServe ModelInfer, gRPC", len(infer_grpc), lambda: len(grpc_infer(infer_grpc))),
]
print(f"10,000 pairs (KServe: 20,000 rows of {width}), {requests} requests each after 3 warm-ups")
print("| transport | request | answer | p50 ms | p90 ms | max ms | mean ms |")
print("|---|---|---|---|---|---|---|")
for name, size, send in cases:
    for _ in range(3):
        send()
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        answer = send()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p50, p90 = (times[min(len(times) - 1, int(q * len(times)))] for q in (0.5, 0.9))
    print(f"| {name} | {size / 1e6:.2f} MB | {answer / 1e6:.2f} MB | {p50:.1f} | "
          f"{p90:.1f} | {times[-1]:.1f} | {statistics.mean(times):.1f} |")
