"""Drives a running `duet serve` with clients nobody in duet wrote, and checks every answer
against /v1/predict for the same pairs:

- tritonclient.http with its defaults (the binary tensor data extension, in and out) and with
  `binary_data=False` (JSON both ways), the server's metadata, and the model by its version;
- tritonclient.grpc (raw_input_contents, its default) where --grpc is given;
- a client generated from proto/duet.proto by grpcio-tools (into --work) where --grpc is given.

The KServe tensor is the model's encoding of each pair, rows (a, b) then (b, a), built from the
`spec` in model.json by scripts/encoding.py as duet's encoder builds it; its outputs are, per
row, ln speed, ln p10 speed and the feasibility logit. So `speed_a` of /v1/predict is exp of the first row's
first output, `speed_b` of the second row's, and `feasible_probability` the logistic of the two
rows' mean logit; the `calibrated` output is -ln of the p90 slowdowns, `calibration` the class.

Prints one line per check and a closing 'N passed, N failed'; exits non-zero on any failure.

Usage: check-clients.py --http HOST:PORT [--grpc HOST:PORT] --token TOKEN --model DIR --work DIR
"""

import argparse
import json
import math
import sys
import traceback
import urllib.request

import numpy as np
from encoding import encode_pair

parser = argparse.ArgumentParser()
parser.add_argument("--http", required=True)
parser.add_argument("--grpc")
parser.add_argument("--token", required=True)
parser.add_argument("--model", required=True)
parser.add_argument("--work", required=True)
args = parser.parse_args()

results = []


def check(name):
    """Runs the decorated function at once as one named check."""

    def run(fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            results.append(False)
            print(f"FAIL {name}")
            traceback.print_exc()
        else:
            results.append(True)
            print(f"ok   {name}")
        return fn

    return run


with open(f"{args.model}/model.json", encoding="utf-8") as f:
    model_json = json.load(f)
spec = model_json["spec"]
MODEL = model_json["name"]
# tritonclient adds its own headers to the dict it is given (Inference-Header-Content-Length of
# a binary request): every call gets a copy.
AUTH = {"Authorization": f"Bearer {args.token}"}


def features(solo, model, batch):
    return {"solo_throughput": solo, "model": model, "batch_size": batch}


GPU = "v100"
PAIRS = [
    (features(11.2, "ResNet-50", 64), features(3.1, "Transformer", 32)),
    (features(250.0, "A3C", 4), features(0.8, "CycleGAN", 1)),
    (features(40.0, "LM", 20), features(7.5, "Recommendation", 2048)),
    # A model the encoder never saw, and a batch size not measured.
    (features(5.0, "VGG-16", None), features(120.0, "ResNet-18", 128)),
    (features(0.5, "Transformer", 256), features(0.5, "Transformer", 256)),
]


def tensor(pairs):
    rows = []
    for a, b in pairs:
        rows += encode_pair(spec, (a, None), (b, None), GPU, "space")
    return np.array(rows, dtype=np.float64).astype(np.float32)


INPUTS = tensor(PAIRS)


def post_json(path, body):
    request = urllib.request.Request(
        f"http://{args.http}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **AUTH},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)


PREDICTED = post_json(
    "/v1/predict",
    {
        "gpu": GPU,
        "pairs": [{"a": {"features": a}, "b": {"features": b}, "mode": "space"} for a, b in PAIRS],
    },
)["predictions"]


def same_as_predict(outputs, what):
    """The KServe outputs of INPUTS against /v1/predict's answer for PAIRS, value by value. The
    raw `outputs` are the network's: /v1/predict weighs a new family's speeds with the model's
    effects prior (a `new_family` or `conservative` pair), so only their feasibility is
    compared here; their p90s are, through `calibrated` (`calibration_as_predict`)."""
    outputs = np.asarray(outputs)
    assert outputs.dtype == np.float32, f"{what}: {outputs.dtype}"
    assert outputs.shape == (2 * len(PAIRS), 3), f"{what}: shape {outputs.shape}"
    assert any(p["calibration"] in ("known", "new") for p in PREDICTED), "no pair of the network alone"
    for i, p in enumerate(PREDICTED):
        ab, ba = outputs[2 * i].astype(np.float64), outputs[2 * i + 1].astype(np.float64)
        logit = (ab[2] + ba[2]) / 2.0
        expected = {"feasible_probability": 1.0 / (1.0 + math.exp(-logit))}
        if p["calibration"] in ("known", "new"):
            expected["speed_a"] = math.exp(ab[0])
            expected["speed_b"] = math.exp(ba[0])
        for key, value in expected.items():
            # /v1/predict answers in single precision: compare there.
            got, want = np.float32(p[key]), np.float32(value)
            assert abs(got - want) <= 2e-6 * abs(want), f"{what}: pair {i} {key} {got} != {want}"


# KServe `calibration` codes: the index in duet's Calibration::ALL (a class added later appended).
CLASSES = ["known", "new", "new_family", "conservative", "probed"]


def calibration_as_predict(calibrated, classes, what):
    """The KServe `calibrated` and `calibration` outputs of INPUTS against /v1/predict's p90
    slowdowns and classes for PAIRS: row (a, b) of a pair carries slowdown_a_p90, (b, a)
    slowdown_b_p90, both rows the pair's class."""
    calibrated, classes = np.asarray(calibrated), np.asarray(classes)
    assert calibrated.dtype == np.float32 and classes.dtype == np.int32, f"{what}: dtypes"
    assert calibrated.shape == classes.shape == (2 * len(PAIRS), 1), f"{what}: shapes"
    for i, p in enumerate(PREDICTED):
        for row, key in ((2 * i, "slowdown_a_p90"), (2 * i + 1, "slowdown_b_p90")):
            got, want = math.exp(-float(calibrated[row, 0])), p[key]
            assert abs(got - want) <= 1e-5 * want, f"{what}: pair {i} {key} {got} != {want}"
            assert CLASSES[classes[row, 0]] == p["calibration"], f"{what}: pair {i} class"


# tritonclient over HTTP ------------------------------------------------------------------------
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

http = httpclient.InferenceServerClient(url=args.http)


@check("tritonclient.http: live, ready, model ready, server and model metadata, by version too")
def _():
    assert http.is_server_live()
    assert http.is_server_ready()
    assert http.is_model_ready(MODEL, headers=dict(AUTH))
    server = http.get_server_metadata()
    assert server["name"] == "duet" and "binary_tensor_data" in server["extensions"], server
    meta = http.get_model_metadata(MODEL, headers=dict(AUTH))
    assert meta["inputs"][0]["name"] == "pairs", meta
    assert meta["inputs"][0]["shape"] == [-1, INPUTS.shape[1]], meta
    assert meta["outputs"] == [
        {"name": "outputs", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "calibrated", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "calibration", "datatype": "INT32", "shape": [-1, 1]},
    ], meta
    version = meta["versions"][0]
    assert http.is_model_ready(MODEL, model_version=version, headers=dict(AUTH))
    assert http.get_model_metadata(MODEL, model_version=version, headers=dict(AUTH)) == meta
    assert not http.is_model_ready(MODEL, model_version="0", headers=dict(AUTH))


def http_infer(binary, version=""):
    tensor = httpclient.InferInput("pairs", list(INPUTS.shape), "FP32")
    tensor.set_data_from_numpy(INPUTS, binary_data=binary)
    outputs = None if binary else [
        httpclient.InferRequestedOutput(name, binary_data=False)
        for name in ("outputs", "calibrated", "calibration")
    ]
    return http.infer(MODEL, [tensor], model_version=version, outputs=outputs, request_id="c1",
                      headers=dict(AUTH))


HTTP_OUTPUTS = {}


@check("tritonclient.http, its defaults (binary tensors in and out) = /v1/predict")
def _():
    result = http_infer(binary=True)
    header = result.get_response()
    assert header["id"] == "c1", header
    output = header["outputs"][0]
    assert output["parameters"]["binary_data_size"] == INPUTS.shape[0] * 3 * 4, output
    assert "data" not in output, output
    HTTP_OUTPUTS["binary"] = result.as_numpy("outputs")
    same_as_predict(HTTP_OUTPUTS["binary"], "http binary")
    calibration_as_predict(result.as_numpy("calibrated"), result.as_numpy("calibration"),
                           "http binary")
    assert {p["calibration"] for p in PREDICTED} >= {"new", "new_family"}, PREDICTED


@check("tritonclient.http, binary_data=False (JSON in and out) = binary = /v1/predict")
def _():
    result = http_infer(binary=False)
    assert "data" in result.get_response()["outputs"][0]
    HTTP_OUTPUTS["json"] = result.as_numpy("outputs")
    same_as_predict(HTTP_OUTPUTS["json"], "http json")
    calibration_as_predict(result.as_numpy("calibrated"), result.as_numpy("calibration"),
                           "http json")
    assert np.array_equal(HTTP_OUTPUTS["json"], HTTP_OUTPUTS["binary"])


@check("tritonclient.http, the model's version named (model_version) = unnamed; another refused")
def _():
    version = http.get_model_metadata(MODEL, headers=dict(AUTH))["versions"][0]
    for binary in (True, False):
        result = http_infer(binary=binary, version=version)
        assert result.get_response()["model_version"] == version
        assert np.array_equal(result.as_numpy("outputs"), HTTP_OUTPUTS["binary"])
    try:
        http_infer(binary=True, version="0")
        raise AssertionError("answered for a version this server does not serve")
    except InferenceServerException as e:
        assert "no version `0`" in str(e), str(e)


@check("tritonclient.http: a wrong tensor and a missing token are refused, naming why")
def _():
    wrong = httpclient.InferInput("pairs", [2, INPUTS.shape[1] - 1], "FP32")
    wrong.set_data_from_numpy(INPUTS[:2, :-1])
    try:
        http.infer(MODEL, [wrong], headers=dict(AUTH))
        raise AssertionError("a tensor of the wrong width was answered")
    except InferenceServerException as e:
        assert "inputs[0].shape" in str(e) or "shape is [rows" in str(e), str(e)
    right = httpclient.InferInput("pairs", list(INPUTS.shape), "FP32")
    right.set_data_from_numpy(INPUTS)
    try:
        http.infer(MODEL, [right])
        raise AssertionError("answered without the token")
    except InferenceServerException as e:
        assert "Bearer" in str(e), str(e)


# tritonclient over gRPC --------------------------------------------------------------------------
if args.grpc:
    import grpc
    import tritonclient.grpc as grpcclient

    triton = grpcclient.InferenceServerClient(url=args.grpc)
    METADATA = {"authorization": f"Bearer {args.token}"}

    @check("tritonclient.grpc: live, ready, model ready, server and model metadata")
    def _():
        assert triton.is_server_live()
        assert triton.is_server_ready()
        assert triton.is_model_ready(MODEL)
        server = triton.get_server_metadata()
        assert server.name == "duet" and "binary_tensor_data" in server.extensions, server
        meta = triton.get_model_metadata(MODEL, headers=dict(METADATA))
        assert meta.inputs[0].name == "pairs", meta
        assert list(meta.inputs[0].shape) == [-1, INPUTS.shape[1]], meta
        assert list(meta.outputs[0].shape) == [-1, 3], meta

    @check("tritonclient.grpc, its defaults (raw_input_contents) = HTTP = /v1/predict")
    def _():
        tensor = grpcclient.InferInput("pairs", list(INPUTS.shape), "FP32")
        tensor.set_data_from_numpy(INPUTS)
        result = triton.infer(MODEL, [tensor], request_id="g1", headers=dict(METADATA))
        assert result.get_response().id == "g1"
        outputs = result.as_numpy("outputs")
        same_as_predict(outputs, "grpc")
        calibration_as_predict(result.as_numpy("calibrated"), result.as_numpy("calibration"),
                               "grpc")
        assert "binary" not in HTTP_OUTPUTS or np.array_equal(outputs, HTTP_OUTPUTS["binary"])
        version = result.get_response().model_version
        named = triton.infer(MODEL, [tensor], model_version=version, headers=dict(METADATA))
        assert np.array_equal(named.as_numpy("outputs"), outputs)

    @check("tritonclient.grpc: a wrong tensor and a missing token are refused, naming why")
    def _():
        wrong = grpcclient.InferInput("pairs", [2, INPUTS.shape[1] - 1], "FP32")
        wrong.set_data_from_numpy(INPUTS[:2, :-1])
        try:
            triton.infer(MODEL, [wrong], headers=dict(METADATA))
            raise AssertionError("a tensor of the wrong width was answered")
        except InferenceServerException as e:
            assert "INVALID_ARGUMENT" in str(e.status()), e.status()
            assert "inputs[0].shape" in e.message(), e.message()
        right = grpcclient.InferInput("pairs", list(INPUTS.shape), "FP32")
        right.set_data_from_numpy(INPUTS)
        try:
            triton.infer(MODEL, [right])
            raise AssertionError("answered without the token")
        except InferenceServerException as e:
            assert "UNAUTHENTICATED" in str(e.status()), e.status()

    # A client generated from proto/duet.proto ----------------------------------------------------
    import os

    from grpc_tools import protoc

    generated = os.path.join(args.work, "generated")
    os.makedirs(generated, exist_ok=True)
    protos = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{protos}",
            f"--python_out={generated}",
            f"--grpc_python_out={generated}",
            os.path.join(protos, "duet.proto"),
        ]
    )
    assert status == 0, f"grpc_tools.protoc exited {status}"
    sys.path.insert(0, generated)
    import duet_pb2
    import duet_pb2_grpc

    stub = duet_pb2_grpc.PredictorStub(grpc.insecure_channel(args.grpc))
    CALL = [("authorization", f"Bearer {args.token}")]

    def job(spec):
        if isinstance(spec, str):
            return duet_pb2.Job(workload=spec)
        values = {}
        for name, v in spec.items():
            if isinstance(v, str):
                values[name] = duet_pb2.FeatureValue(text=v)
            elif v is None:
                values[name] = duet_pb2.FeatureValue()
            else:
                values[name] = duet_pb2.FeatureValue(number=v)
        return duet_pb2.Job(features=duet_pb2.Features(values=values))

    def json_job(spec):
        return {"workload": spec} if isinstance(spec, str) else {"features": spec}

    MIXED = PAIRS + [
        ("resnet-50-bs64", "transformer-bs32"),
        (features(11.2, "ResNet-50", 64), "a3c"),
        ("a3c", "cyclegan"),
    ]

    @check("duet.v1.Predictor from grpcio-tools = /v1/predict, by id and inline")
    def _():
        request = duet_pb2.PredictRequest(
            gpu=GPU,
            pairs=[duet_pb2.Pair(a=job(a), b=job(b), mode="space") for a, b in MIXED],
        )
        answer = stub.Predict(request, metadata=CALL)
        expected = post_json(
            "/v1/predict",
            {
                "gpu": GPU,
                "pairs": [
                    {"a": json_job(a), "b": json_job(b), "mode": "space"} for a, b in MIXED
                ],
            },
        )
        assert answer.model_version == expected["model_version"], answer.model_version
        assert len(answer.predictions) == len(MIXED)
        for got, want in zip(answer.predictions, expected["predictions"]):
            for key in ("feasible_probability", "speed_a", "speed_b", "slowdown_a",
                        "slowdown_b", "slowdown_a_p90", "slowdown_b_p90", "combined"):
                # Both are the server's single-precision value.
                assert np.float32(getattr(got, key)) == np.float32(want[key]), (key, got, want)
            assert got.feasible == want["feasible"]
            calibration = duet_pb2.Calibration.Name(got.calibration)
            assert calibration == f"CALIBRATION_{want['calibration'].upper()}", calibration
            # The measurements behind each job: unset in proto3 where JSON omits them.
            for key in ("measured_a", "measured_b"):
                has = got.HasField(key)
                assert has == (key in want), (key, got, want)
                assert not has or getattr(got, key) == want[key], (key, got, want)

    @check("duet.v1.Predictor groups from grpcio-tools = /v1/predict groups")
    def _():
        jobs = ["resnet-50-bs64", features(11.2, "ResNet-50", 64), "a3c", "a3c"]
        request = duet_pb2.PredictRequest(
            gpu=GPU, groups=[duet_pb2.Group(jobs=[job(j) for j in jobs], mode="space")]
        )
        answer = stub.Predict(request, metadata=CALL)
        expected = post_json(
            "/v1/predict",
            {"gpu": GPU, "groups": [{"jobs": [json_job(j) for j in jobs], "mode": "space"}]},
        )
        assert len(answer.predictions) == 0 and len(answer.groups) == 1, answer
        got, want = answer.groups[0], expected["groups"][0]
        assert got.composition == want["composition"] == "excess", got
        assert len(got.jobs) == len(want["jobs"]) == 4
        for g, w in zip(got.jobs, want["jobs"]):
            for key in ("speed", "slowdown", "slowdown_p90"):
                assert np.float32(getattr(g, key)) == np.float32(w[key]), (key, g, w)

    @check("duet.v1.Predictor: an unknown workload and a missing token are refused, naming why")
    def _():
        bad = duet_pb2.PredictRequest(
            gpu=GPU, pairs=[duet_pb2.Pair(a=job("nobody"), b=job("a3c"), mode="space")]
        )
        try:
            stub.Predict(bad, metadata=CALL)
            raise AssertionError("an unknown workload was answered")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
            assert "pairs[0].a.workload" in e.details(), e.details()
        try:
            stub.Predict(bad)
            raise AssertionError("answered without the token")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e.code()


passed, failed = results.count(True), results.count(False)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
