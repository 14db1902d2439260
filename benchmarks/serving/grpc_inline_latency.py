"""p50 and p90 latency of large `duet.v1.Predictor/Predict` calls whose jobs are all given by
their features, against running `duet serve --grpc-addr`s, one call at a time (5 warm-up calls
each, then ROUNDS of each): 10,000 pairs and 10,000 groups of GROUP_SIZE jobs (default 4), every
job a registered profile on the model's first device with its solo throughput scaled by
1 + k / 1e7, so that no two jobs of a call are alike (as `inline_latency.py` asks over HTTP).
PAUSE_MS (default 0) waits between calls, as a pricing loop does between its rounds.

SERVERS is one `HTTP_PORT:GRPC_PORT` or several separated by commas (servers of the same model,
for example two builds): the calls alternate between them, and between pairs and groups, so that
each server's figures, and the ratio of groups to pairs, are taken under the same load of the
machine. The HTTP port serves the workloads and the model's modes the calls are built from.

Usage: python benchmarks/serving/grpc_inline_latency.py SERVERS [GROUP_SIZE] [PAUSE_MS] [ROUNDS]
"""
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

from alternating import inline_jobs, time_alternating

servers = [tuple(int(p) for p in s.split(":")) for s in sys.argv[1].split(",")]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 4
pause = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 30

work = tempfile.mkdtemp()
protos = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")
assert protoc.main([
    "protoc", f"-I{protos}", f"--python_out={work}", os.path.join(protos, "duet.proto"),
]) == 0
sys.path.insert(0, work)
import duet_pb2  # noqa: E402

gpu, mode, features = inline_jobs(servers[0][0])


def job(k):
    values = {}
    for name, value in features(k).items():
        if value is None:
            values[name] = duet_pb2.FeatureValue()
        elif isinstance(value, str):
            values[name] = duet_pb2.FeatureValue(text=value)
        else:
            values[name] = duet_pb2.FeatureValue(number=float(value))
    return duet_pb2.Job(features=duet_pb2.Features(values=values))


pairs = duet_pb2.PredictRequest(gpu=gpu, pairs=[
    duet_pb2.Pair(a=job(2 * i), b=job(2 * i + 1), mode=mode) for i in range(10_000)
]).SerializeToString()
groups = duet_pb2.PredictRequest(gpu=gpu, groups=[
    duet_pb2.Group(jobs=[job(size * g + j) for j in range(size)], mode=mode) for g in range(10_000)
]).SerializeToString()

options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
calls = {}
for _, grpc_port in servers:
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}", options=options)
    calls[grpc_port] = channel.unary_unary(
        "/duet.v1.Predictor/Predict",
        request_serializer=lambda body: body,
        response_deserializer=lambda body: body,
    )

grpc_ports = [p for _, p in servers]
workloads = [("10,000 inline pairs", pairs), (f"10,000 inline groups of {size}", groups)]
time_alternating(workloads, grpc_ports, lambda port, body: calls[port](body, timeout=120), rounds,
                 pause, lambda port: f"gRPC port {port}")
