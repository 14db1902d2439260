"""Calls a running duet server through a Python client generated from its /openapi.json
(openapi-python-client): predict (pairs and a group), register, get, list and delete, report
observations and read the drift, each checked. If the document
misnamed a route, a parameter or a body, the generated client would fail here.

Usage: check-generated-client.py <folder holding the generated duet_client package> <base URL> <token>
"""

import sys

sys.path.insert(0, sys.argv[1])
base, token = sys.argv[2], sys.argv[3]

from duet_client import AuthenticatedClient  # noqa: E402
from duet_client.api.predict import predict_route  # noqa: E402
from duet_client.api.workloads import (  # noqa: E402
    delete_workload,
    get_workload,
    list_workloads,
    put_workload,
)
from duet_client.api.observations import drift, post_observations  # noqa: E402
from duet_client.models import (  # noqa: E402
    DriftReport,
    ObservationBatch,
    ObservationsAnswer,
    PredictRequest,
    PredictResponse,
    RegisteredWorkload,
    WorkloadBody,
)

client = AuthenticatedClient(base_url=base, token=token)


def expect(response, status, what):
    if response.status_code != status:
        sys.exit(f"{what}: expected {status}, got {response.status_code}: {response.content!r}")
    return response.parsed


features = {"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": 64}
body = WorkloadBody.from_dict({"kind": "infer", "profiles": {"v100": features}})
put = expect(put_workload.sync_detailed(id="generated-client-job", client=client, body=body), 201, "put")
assert isinstance(put, RegisteredWorkload) and put.workload == "generated-client-job", put
got = expect(get_workload.sync_detailed(id="generated-client-job", client=client), 200, "get")
assert got.source == "client", got
listed = expect(list_workloads.sync_detailed(client=client), 200, "list")
assert "generated-client-job" in [w.workload for w in listed], listed
request = PredictRequest.from_dict(
    {
        "gpu": "v100",
        "pairs": [
            {"a": {"workload": "generated-client-job"}, "b": {"workload": "a3c"}, "mode": "space"},
            {"a": {"features": features}, "b": {"workload": "a3c"}, "mode": "space"},
        ],
        "groups": [
            {
                "jobs": [
                    {"workload": "generated-client-job"},
                    {"workload": "a3c"},
                    {"workload": "cyclegan"},
                ],
                "mode": "space",
            }
        ],
    }
)
answer = expect(predict_route.sync_detailed(client=client, body=request), 200, "predict")
assert isinstance(answer, PredictResponse) and len(answer.predictions) == 2, answer
assert len(answer.groups) == 1 and len(answer.groups[0].jobs) == 3, answer
assert answer.groups[0].composition == "excess" and answer.groups[0].p90_groups == 0, answer
first, second = answer.predictions
# A registered workload predicts like its features inline.
assert abs(first.speed_a - second.speed_a) < 1e-6, (first, second)
assert first.speed_a > 0 and first.slowdown_a_p90 > 0, first
# How many measurements back each job: the registered-only job none, a3c those of the model.
assert first.measured_a == 0 and first.measured_b > 0, first
assert answer.groups[0].jobs[0].measured == 0, answer.groups[0]
observed = ObservationBatch.from_dict(
    {
        "observations": [
            {
                "id": "generated-client-observation",
                "gpu": "v100",
                "mode": "space",
                "a": {"workload": "generated-client-job"},
                "b": {"workload": "a3c"},
                "throughput_a": 0.8 * first.speed_a * 11.2,
                "throughput_b": 5.0,
                "window_s": 10,
                "observed_at": "2026-12-01T12:00:00Z",
            },
            {
                # The group asked above, cyclegan observed at half its predicted speed.
                "id": "generated-client-group",
                "gpu": "v100",
                "mode": "space",
                "a": {"workload": "generated-client-job"},
                "b": {"workload": "a3c"},
                "others": [
                    {
                        "job": {"workload": "cyclegan"},
                        "throughput": 0.5 * answer.groups[0].jobs[2].speed * 10.0,
                        "solo_throughput": 10.0,
                    }
                ],
                "throughput_a": answer.groups[0].jobs[0].speed * 11.2,
                "throughput_b": answer.groups[0].jobs[1].speed * 5.0,
                "solo_throughput_b": 5.0,
                "window_s": 10,
                "observed_at": "2026-12-01T12:00:00Z",
            },
        ]
    }
)
stored = expect(post_observations.sync_detailed(client=client, body=observed), 200, "observations")
ids = ["generated-client-observation", "generated-client-group"]
assert isinstance(stored, ObservationsAnswer) and stored.stored == ids, stored
again = expect(post_observations.sync_detailed(client=client, body=observed), 200, "observations again")
assert again.duplicates == ids and not again.stored, again
report = expect(drift.sync_detailed(client=client), 200, "drift")
assert isinstance(report, DriftReport) and report.pairs >= 2, report
job = [w for w in report.workloads if w.key == "generated-client-job"]
# Observed at 80% of the predicted speed in the pair, at it in the group: 12.5% too optimistic.
assert job and abs(job[0].bias - 0.125) < 1e-3, job
# cyclegan, only in the group, at half its predicted speed: 100% too optimistic.
cyclegan = [w for w in report.workloads if w.key == "cyclegan"]
assert cyclegan and abs(cyclegan[0].bias - 1.0) < 1e-3, cyclegan
assert {"2", "3"} <= {s.key for s in report.sizes}, report.sizes
expect(delete_workload.sync_detailed(id="generated-client-job", client=client), 204, "delete")
expect(get_workload.sync_detailed(id="generated-client-job", client=client), 404, "get after delete")
print(
    "generated client: predict, put, get, list, delete, observations (a pair and a group) and "
    "drift answered as documented"
)
