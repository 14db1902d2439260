//! gRPC on loopback, through tonic clients generated from `proto/`: the KServe v2 service
//! answers what `/v2` answers (raw bytes and typed contents), `duet.v1.Predictor` what
//! `/v1/predict` answers, with the same token, limits, errors (the field named) and metrics.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use duet_server::grpc::proto::duet::v1 as duet;
use duet_server::grpc::proto::inference as kserve;
use duet_server::{AppState, Config};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tonic::Code;
use tonic::transport::Channel;

#[path = "support/http.rs"]
mod http;
use http::{app_with, call, model_dir};

use duet::predictor_client::PredictorClient;
use kserve::grpc_inference_service_client::GrpcInferenceServiceClient;

const TOKEN: &str = "grpc-token";

/// The app on `config` (its model loaded) and gRPC on a free loopback port; the app, the
/// state and a channel to the gRPC port.
async fn served(config: Config) -> (axum::Router, Arc<AppState>, Channel) {
    let (app, state, channel, _) = served_at(config).await;
    (app, state, channel)
}

/// `served`, and the gRPC port's address.
async fn served_at(config: Config) -> (axum::Router, Arc<AppState>, Channel, std::net::SocketAddr) {
    let (app, state) = app_with(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("addr");
    let serving = state.clone();
    tokio::spawn(async move {
        duet_server::grpc::serve(serving, listener, std::future::pending())
            .await
            .expect("gRPC serves");
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connected");
    (app, state, channel, addr)
}

/// `message` with the bearer token in its metadata.
fn authorized<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("ascii"),
    );
    request
}

fn assert_status(got: &tonic::Status, code: Code, says: &str) {
    assert_eq!(got.code(), code, "{got:?}");
    assert!(
        got.message().contains(says),
        "`{}` does not say `{says}`",
        got.message()
    );
}

fn values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn infer_request(rows: usize, width: usize, raw: Vec<u8>) -> kserve::ModelInferRequest {
    kserve::ModelInferRequest {
        model_name: "default".into(),
        id: "g1".into(),
        inputs: vec![kserve::model_infer_request::InferInputTensor {
            name: "pairs".into(),
            datatype: "FP32".into(),
            shape: vec![rows as i64, width as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![raw.into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn kserve_over_grpc_answers_what_http_answers() {
    let (app, state, channel) = served(Config {
        token: Some(TOKEN.into()),
        protect_reads: true,
        max_infer_rows: 10,
        ..Config::new(model_dir())
    })
    .await;
    let mut client = GrpcInferenceServiceClient::new(channel);
    let live = client
        .server_live(kserve::ServerLiveRequest {})
        .await
        .expect("live");
    assert!(live.into_inner().live);
    assert!(
        client
            .server_ready(kserve::ServerReadyRequest {})
            .await
            .expect("ready")
            .into_inner()
            .ready
    );
    let ready = client
        .model_ready(kserve::ModelReadyRequest {
            name: "default".into(),
            version: String::new(),
        })
        .await
        .expect("model ready");
    assert!(ready.into_inner().ready);
    let server = client
        .server_metadata(kserve::ServerMetadataRequest {})
        .await
        .expect("server metadata")
        .into_inner();
    assert_eq!(server.name, "duet");
    assert_eq!(server.extensions, ["binary_tensor_data"]);
    // Reads need the token here, as on HTTP.
    let request = kserve::ModelMetadataRequest {
        name: "default".into(),
        version: String::new(),
    };
    let refused = client
        .model_metadata(request.clone())
        .await
        .expect_err("no token");
    assert_status(&refused, Code::Unauthenticated, "Authorization");
    let meta = client
        .model_metadata(authorized(request))
        .await
        .expect("metadata")
        .into_inner();
    let model = state.model().expect("model");
    let width = model.meta.spec.pair_width();
    assert_eq!(meta.inputs[0].name, "pairs");
    assert_eq!(meta.inputs[0].shape, [-1, width as i64]);
    assert_eq!(meta.outputs[0].shape, [-1, 3]);

    // Raw bytes in, raw bytes out: the engine's outputs, and /v2's over HTTP.
    let data: Vec<f32> = (0..3 * width).map(|i| ((i % 7) as f32) / 7.0).collect();
    let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let answer = client
        .model_infer(authorized(infer_request(3, width, raw.clone())))
        .await
        .expect("infer")
        .into_inner();
    assert_eq!(answer.id, "g1");
    assert_eq!(answer.outputs[0].name, "outputs");
    assert_eq!(answer.outputs[0].shape, [3, 3]);
    let outputs = values(&answer.raw_output_contents[0]);
    assert_eq!(outputs, model.engine.run(data.clone()).expect("run"));
    let body = json!({"inputs": [{"name": "pairs", "shape": [3, width], "datatype": "FP32",
                                   "data": data}]});
    let (_, over_http) = http_call(&app, body).await;
    let floats =
        |v: &Value| -> Vec<f32> { serde_json::from_value(v["data"].clone()).expect("floats") };
    assert_eq!(outputs, floats(&over_http["outputs"][0]));
    // Every output where the request names none: the calibrated p10 and each row's class, in
    // raw little-endian bytes as over HTTP in JSON.
    let names: Vec<&str> = answer.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["outputs", "calibrated", "calibration"]);
    assert_eq!(answer.outputs[2].datatype, "INT32");
    assert_eq!(answer.outputs[2].shape, [3, 1]);
    assert_eq!(answer.raw_output_contents.len(), 3);
    assert_eq!(
        values(&answer.raw_output_contents[1]),
        floats(&over_http["outputs"][1])
    );
    let codes: Vec<i64> = answer.raw_output_contents[2]
        .chunks_exact(4)
        .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    let over_http_codes: Vec<i64> =
        serde_json::from_value(over_http["outputs"][2]["data"].clone()).expect("integers");
    assert_eq!(codes, over_http_codes);
    assert_eq!(meta.outputs.len(), 3);
    assert_eq!(meta.outputs[2].datatype, "INT32");
    // Typed contents in: the same.
    let mut typed = infer_request(3, width, Vec::new());
    typed.raw_input_contents.clear();
    typed.inputs[0].contents = Some(kserve::InferTensorContents {
        fp32_contents: data.clone(),
        ..Default::default()
    });
    let answer = client
        .model_infer(authorized(typed))
        .await
        .expect("typed")
        .into_inner();
    assert_eq!(values(&answer.raw_output_contents[0]), outputs);

    // What HTTP refuses, gRPC refuses, naming the field.
    let short = client
        .model_infer(authorized(infer_request(
            3,
            width,
            raw[..raw.len() - 4].to_vec(),
        )))
        .await
        .expect_err("short");
    assert_status(&short, Code::InvalidArgument, "raw_input_contents[0]: ");
    let over = client
        .model_infer(authorized(infer_request(11, width, raw.clone())))
        .await
        .expect_err("11 rows of 10");
    assert_status(&over, Code::ResourceExhausted, "--max-infer-rows");
    let wide = client
        .model_infer(authorized(infer_request(3, width + 1, raw.clone())))
        .await
        .expect_err("wrong width");
    assert_status(&wide, Code::InvalidArgument, "inputs[0].shape: ");
    let mut none = infer_request(3, width, Vec::new());
    none.raw_input_contents.clear();
    let none = client
        .model_infer(authorized(none))
        .await
        .expect_err("no values");
    assert_status(&none, Code::InvalidArgument, "inputs[0].contents: missing");
    let mut other = infer_request(3, width, raw.clone());
    other.model_name = "other".into();
    let other = client
        .model_infer(authorized(other))
        .await
        .expect_err("unknown model");
    assert_status(&other, Code::NotFound, "no model `other`");

    // Counted per method, as HTTP routes are.
    let (_, text) = call(&app, "GET", "/metrics", None, Some(TOKEN)).await;
    let text = text.as_str().expect("text").to_string();
    for (method, status, n) in [
        ("ModelInfer", 200, 2),
        ("ModelInfer", 413, 1),
        ("ModelMetadata", 401, 1),
    ] {
        let route = format!("route=\"/inference.GRPCInferenceService/{method}\"");
        let status = format!("status=\"{status}\"");
        assert!(
            text.lines().any(|l| l.starts_with("duet_requests_total{")
                && l.contains(&route)
                && l.contains(&status)
                && l.ends_with(&format!(" {n}"))),
            "no `duet_requests_total` of {n} for {route}, {status} in\n{text}"
        );
    }
}

async fn http_call(app: &axum::Router, body: Value) -> (axum::http::StatusCode, Value) {
    call(
        app,
        "POST",
        "/v2/models/default/infer",
        Some(body),
        Some(TOKEN),
    )
    .await
}

fn job(id: &str) -> Option<duet::Job> {
    Some(duet::Job {
        job: Some(duet::job::Job::Workload(id.into())),
    })
}

/// Inline features of a job of `model` that runs `solo` iterations a second alone.
fn inline(model: &str, solo: f64) -> Option<duet::Job> {
    let value = |v: duet::feature_value::Value| duet::FeatureValue { value: Some(v) };
    let values = [
        (
            "solo_throughput",
            value(duet::feature_value::Value::Number(solo)),
        ),
        (
            "model",
            value(duet::feature_value::Value::Text(model.into())),
        ),
        ("batch_size", duet::FeatureValue { value: None }),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Some(duet::Job {
        job: Some(duet::job::Job::Features(duet::Features { values })),
    })
}

fn pair(a: Option<duet::Job>, b: Option<duet::Job>) -> duet::Pair {
    duet::Pair {
        a,
        b,
        mode: "space".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn predict_over_grpc_answers_what_v1_predict_answers() {
    let (app, _, channel) = served(Config {
        max_pairs: 4,
        ..Config::new(model_dir())
    })
    .await;
    let mut client = PredictorClient::new(channel);
    let pairs = vec![
        pair(job("resnet-50-bs64"), job("transformer-bs32")),
        pair(inline("ResNet-50", 11.2), job("a3c")),
        pair(job("a3c"), job("cyclegan")),
        pair(inline("Unseen-Net", 11.2), job("a3c")),
    ];
    let answer = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: pairs.clone(),
            ..Default::default()
        })
        .await
        .expect("predict")
        .into_inner();
    let body = json!({"gpu": "v100", "pairs": [
        {"a": {"workload": "resnet-50-bs64"}, "b": {"workload": "transformer-bs32"}, "mode": "space"},
        {"a": {"features": {"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": null}},
         "b": {"workload": "a3c"}, "mode": "space"},
        {"a": {"workload": "a3c"}, "b": {"workload": "cyclegan"}, "mode": "space"},
        {"a": {"features": {"solo_throughput": 11.2, "model": "Unseen-Net", "batch_size": null}},
         "b": {"workload": "a3c"}, "mode": "space"},
    ]});
    let (s, expected) = call(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(s, axum::http::StatusCode::OK, "{expected}");
    assert_eq!(answer.model_version, expected["model_version"]);
    let expected = expected["predictions"].as_array().expect("predictions");
    assert_eq!(answer.predictions.len(), expected.len());
    for (got, want) in answer.predictions.iter().zip(expected) {
        let f = |k: &str| want[k].as_f64().expect(k) as f32;
        assert_eq!(got.feasible, want["feasible"].as_bool().expect("feasible"));
        assert_eq!(got.feasible_probability, f("feasible_probability"));
        assert_eq!(
            (got.speed_a, got.speed_b, got.combined),
            (f("speed_a"), f("speed_b"), f("combined"))
        );
        assert_eq!(
            (got.slowdown_a_p90, got.slowdown_b_p90),
            (f("slowdown_a_p90"), f("slowdown_b_p90"))
        );
        let calibration = match want["calibration"].as_str() {
            Some("known") => duet::Calibration::Known,
            Some("probed") => duet::Calibration::Probed,
            Some("new") => duet::Calibration::New,
            Some("new_family") => duet::Calibration::NewFamily,
            Some("conservative") => duet::Calibration::Conservative,
            other => panic!("calibration {other:?}"),
        };
        assert_eq!(got.calibration(), calibration);
        // The measurements behind each job, as HTTP says them.
        assert_eq!(got.measured_a.map(u64::from), want["measured_a"].as_u64());
        assert_eq!(got.measured_b.map(u64::from), want["measured_b"].as_u64());
    }
    // The shipped model records its workloads' measurements: an inline job has none.
    let measured: Vec<(Option<u32>, Option<u32>)> = answer
        .predictions
        .iter()
        .map(|p| (p.measured_a, p.measured_b))
        .collect();
    assert_eq!(measured[1].0, Some(0));
    assert!(
        measured[2]
            .0
            .is_some_and(|n| n > duet_model::encoding::PROBED_MAX)
    );
    let classes: Vec<duet::Calibration> =
        answer.predictions.iter().map(|p| p.calibration()).collect();
    assert_eq!(
        classes,
        [
            duet::Calibration::Known,
            duet::Calibration::New,
            duet::Calibration::Known,
            duet::Calibration::NewFamily
        ]
    );

    // The same refusals as /v1/predict, naming the field.
    let over = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![pairs[0].clone(); 5],
            ..Default::default()
        })
        .await
        .expect_err("5 pairs of 4");
    assert_status(&over, Code::ResourceExhausted, "--max-pairs");
    let unknown = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![pair(job("nobody"), job("a3c"))],
            ..Default::default()
        })
        .await
        .expect_err("unknown id");
    assert_status(&unknown, Code::NotFound, "pairs[0].a.workload: ");
    let neither = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![pair(None, job("a3c"))],
            ..Default::default()
        })
        .await
        .expect_err("no job a");
    assert_status(
        &neither,
        Code::InvalidArgument,
        "pairs[0].a: give exactly one",
    );
    let mut bad_mode = pair(job("a3c"), job("a3c"));
    bad_mode.mode = "sideways".into();
    let bad_mode = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![bad_mode],
            ..Default::default()
        })
        .await
        .expect_err("unknown mode");
    assert_status(
        &bad_mode,
        Code::InvalidArgument,
        "pairs[0].mode: unknown mode",
    );
    let mut infinite = inline("ResNet-50", 11.2);
    if let Some(duet::Job {
        job: Some(duet::job::Job::Features(f)),
    }) = &mut infinite
    {
        f.values.insert(
            "solo_throughput".into(),
            duet::FeatureValue {
                value: Some(duet::feature_value::Value::Number(f64::INFINITY)),
            },
        );
    }
    // The job first in a pair, second in the second pair, third in a group: named where it is.
    let group = duet::Group {
        jobs: [job("a3c"), job("a3c"), infinite.clone()]
            .into_iter()
            .map(|j| j.expect("a job"))
            .collect(),
        mode: "space".into(),
        ..Default::default()
    };
    for (pairs, groups, path) in [
        (
            vec![pair(infinite.clone(), job("a3c"))],
            vec![],
            "pairs[0].a",
        ),
        (
            vec![
                pair(job("a3c"), job("a3c")),
                pair(job("a3c"), infinite.clone()),
            ],
            vec![],
            "pairs[1].b",
        ),
        (vec![], vec![group], "groups[0].jobs[2]"),
    ] {
        let refused = client
            .predict(duet::PredictRequest {
                gpu: Some("v100".into()),
                pairs,
                groups,
            })
            .await
            .expect_err("infinite feature");
        assert_status(
            &refused,
            Code::InvalidArgument,
            &format!("{path}.features.solo_throughput: inf is not a finite number"),
        );
    }
}

#[tokio::test]
async fn groups_over_grpc_are_answered_as_v1_predict_answers_them() {
    let (app, _, channel) = served(Config {
        max_pairs: 6,
        ..Config::new(model_dir())
    })
    .await;
    let mut client = PredictorClient::new(channel);
    let group = |jobs: &[&str]| duet::Group {
        jobs: jobs.iter().map(|j| job(j).expect("a job")).collect(),
        mode: "space".into(),
        ..Default::default()
    };
    let answer = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            groups: vec![group(&["resnet-50-bs64", "transformer-bs32", "a3c"])],
            ..Default::default()
        })
        .await
        .expect("predict")
        .into_inner();
    let body = json!({"gpu": "v100", "groups": [{"jobs": [
        {"workload": "resnet-50-bs64"}, {"workload": "transformer-bs32"}, {"workload": "a3c"}],
        "mode": "space"}]});
    let (s, expected) = call(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(s, axum::http::StatusCode::OK, "{expected}");
    assert!(answer.predictions.is_empty());
    let (got, want) = (&answer.groups[0], &expected["groups"][0]);
    assert_eq!(got.composition, "excess");
    assert_eq!(got.feasible, want["feasible"].as_bool().expect("feasible"));
    for (k, j) in got.jobs.iter().enumerate() {
        let w = |f: &str| want["jobs"][k][f].as_f64().expect(f) as f32;
        assert_eq!(
            (j.speed, j.slowdown, j.slowdown_p90),
            (w("speed"), w("slowdown"), w("slowdown_p90"))
        );
        assert_eq!(
            j.measured.map(u64::from),
            want["jobs"][k]["measured"].as_u64()
        );
    }
    // Two groups of three are 6 pairs; a third is over --max-pairs 6.
    let three = vec![group(&["a3c", "a3c", "a3c"]); 3];
    let over = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            groups: three,
            ..Default::default()
        })
        .await
        .expect_err("9 pairs of 6");
    assert_status(&over, Code::ResourceExhausted, "--max-pairs");
    let unknown = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            groups: vec![group(&["a3c", "a3c", "nobody"])],
            ..Default::default()
        })
        .await
        .expect_err("unknown id");
    assert_status(&unknown, Code::NotFound, "groups[0].jobs[2].workload: ");
}

#[tokio::test]
async fn a_message_over_the_body_limit_is_refused_before_it_is_read() {
    let (_, _, channel) = served(Config {
        max_body_bytes: 2000,
        ..Config::new(model_dir())
    })
    .await;
    let mut client = PredictorClient::new(channel);
    let many = vec![pair(job("resnet-50-bs64"), job("transformer-bs32")); 100];
    let refused = client
        .predict(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: many,
            ..Default::default()
        })
        .await
        .expect_err("over 2000 bytes");
    // Refused as it arrives, before it is decoded, naming the flag as HTTP does.
    assert_status(
        &refused,
        Code::ResourceExhausted,
        "the server's limit of 2000 bytes (--max-body-bytes)",
    );
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_at_once() {
    let (_, state, channel, addr) = served_at(Config {
        max_connections: 1,
        ..Config::new(model_dir())
    })
    .await;
    // The one place is the channel's: it is served.
    let mut client = PredictorClient::new(channel);
    let answer = client
        .predict(authorized(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![pair(job("resnet-50-bs64"), job("transformer-bs32"))],
            ..Default::default()
        }))
        .await
        .expect("the first connection is served");
    assert_eq!(answer.into_inner().predictions.len(), 1);
    // A second connection is closed before it is read, and counted.
    let refused = state
        .metrics
        .guards
        .connections_refused
        .load(Ordering::Relaxed);
    let mut second = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
        .await
        .expect("closed within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(
        state
            .metrics
            .guards
            .connections_refused
            .load(Ordering::Relaxed),
        refused + 1
    );
}

#[tokio::test]
async fn a_connection_that_sends_no_preface_gives_its_place_back() {
    let (_, state, _channel, addr) = served_at(Config {
        max_connections: 2,
        header_timeout: Duration::from_millis(300),
        ..Config::new(model_dir())
    })
    .await;
    // The channel holds one place; a silent socket holds the other until its time is up.
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(
        state.metrics.guards.header_timeouts.load(Ordering::Relaxed),
        1
    );
    // Its place is free again: a new channel is served.
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connected");
    let answer = PredictorClient::new(channel)
        .predict(authorized(duet::PredictRequest {
            gpu: Some("v100".into()),
            pairs: vec![pair(job("resnet-50-bs64"), job("transformer-bs32"))],
            ..Default::default()
        }))
        .await
        .expect("served");
    assert_eq!(answer.into_inner().predictions.len(), 1);
}
