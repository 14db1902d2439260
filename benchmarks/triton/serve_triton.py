"""Serves duet's model.onnx with the Triton Inference Server (2.51, from nvidia-pytriton 0.7.0)
under the name and tensors duet's KServe v2 endpoints use, configured like `duet serve --engine
onnx` (BENCHMARKS.md, "Against Triton (issue 24)"):

- the model: the artifact's `model.onnx`, named as its `model.json` names it (`default`), input
  `pairs` FP32 [-1, width], output `outputs` FP32 [-1, 3], no batching dimension of Triton's own
  (`batching=False`, so no dynamic batcher and no max batch size: a request of any number of
  rows runs as it came, as in duet);
- one model instance (one inference callable), holding one ONNX Runtime session per core, each
  with one intra-op thread and intra-op spinning off (duet's `OnnxEngine`): a request of up to
  256 rows runs on one session, a larger one is split into one slice of rows per core, the
  slices run side by side on their own sessions and joined in order (ONNX Runtime lets go of
  the GIL while it runs);
- HTTP, gRPC and metrics on 127.0.0.1 only.

`--instances N --cores C` runs N model instances of C sessions each instead (Triton's own way to
serve requests side by side), for a comparison beyond the like-for-like one.

Triton's Python backend runs the callable in this process: the Triton server and its backend
stub are pytriton's child processes, and the tensors cross to this process through shared
memory. That is how pytriton serves a Python model; it is the Triton front end duet is compared
with. Runs until interrupted (SIGINT or SIGTERM).

Usage: serve_triton.py --model models/default --http-port P --grpc-port Q --metrics-port R
                       [--instances 1] [--cores CORES]
"""

import argparse
import json
import os
import pathlib
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

# duet's OnnxEngine: batches up to this many rows run on one session.
SMALL_BATCH_ROWS = 256
INPUT = "pairs"
OUTPUT = "outputs"
OUTPUTS = 3


def sessions(onnx: bytes, cores: int) -> list:
    """One single-threaded session per core, as duet's OnnxEngine makes them."""
    made = []
    for _ in range(cores):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        made.append(ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"]))
    return made


class Forward:
    """duet's OnnxEngine::run in Python: one session for a small batch, one slice per core for
    a large one."""

    def __init__(self, onnx: bytes, cores: int):
        self.sessions = sessions(onnx, cores)
        self.pool = ThreadPoolExecutor(max_workers=cores)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        n = rows.shape[0]
        cores = len(self.sessions)
        if n <= SMALL_BATCH_ROWS or cores < 2:
            return self.sessions[0].run([OUTPUT], {INPUT: rows})[0]
        chunk = -(-n // cores)
        slices = [rows[i:i + chunk] for i in range(0, n, chunk)]
        parts = self.pool.map(
            lambda job: job[0].run([OUTPUT], {INPUT: job[1]})[0], zip(self.sessions, slices))
        return np.concatenate(list(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=pathlib.Path, default=pathlib.Path("models/default"))
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="ONNX Runtime sessions of an instance (duet: one per core; "
                             "default: the cores)")
    parser.add_argument("--instances", type=int, default=1,
                        help="model instances (default 1, as duet's one engine)")
    args = parser.parse_args()

    meta_path = args.model / "model.json"
    onnx_path = args.model / "model.onnx"
    try:
        name = json.loads(meta_path.read_text())["name"]
        onnx = onnx_path.read_bytes()
    except (OSError, KeyError, ValueError) as e:
        print(f"serve_triton: cannot read the model folder {args.model}: {e}", file=sys.stderr)
        return 2
    if args.cores < 1 or args.instances < 1:
        print("serve_triton: --cores and --instances must be at least 1", file=sys.stderr)
        return 2
    forwards = [Forward(onnx, args.cores) for _ in range(args.instances)]
    width = forwards[0].sessions[0].get_inputs()[0].shape[1]
    if not isinstance(width, int):
        print(f"serve_triton: {onnx_path}: input `{INPUT}` has no fixed width", file=sys.stderr)
        return 2

    def instance(forward):
        def infer(requests):
            return [{OUTPUT: forward(request[INPUT])} for request in requests]
        return infer

    config = TritonConfig(
        http_address="127.0.0.1", http_port=args.http_port,
        grpc_address="127.0.0.1", grpc_port=args.grpc_port,
        metrics_address="127.0.0.1", metrics_port=args.metrics_port,
        allow_gpu_metrics=False,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=name,
            infer_func=[instance(forward) for forward in forwards],
            inputs=[Tensor(name=INPUT, dtype=np.float32, shape=(-1, width))],
            outputs=[Tensor(name=OUTPUT, dtype=np.float32, shape=(-1, OUTPUTS))],
            config=ModelConfig(batching=False),
            strict=True,
        )
        signal.signal(signal.SIGTERM, lambda *_: triton.stop())
        print(f"serve_triton: model `{name}` ({INPUT} FP32 [-1, {width}]) on "
              f"127.0.0.1:{args.http_port} (HTTP), :{args.grpc_port} (gRPC); "
              f"{args.instances} instance(s) of {args.cores} ONNX Runtime sessions of 1 thread",
              flush=True)
        triton.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
