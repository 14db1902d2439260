//! Properties of every parser of client bytes, over thousands of inputs drawn from valid
//! requests and mutated (bytes flipped, cut, repeated, JSON tokens and huge numbers spliced in),
//! with a fixed seed (`duet_core::rng`) so that a failure reproduces:
//! - no body to any route is answered 5xx (a panic, a failed parse passed on as the server's
//!   fault): `/v1/predict`, KServe `infer` in JSON and with binary tensors (the JSON header's
//!   length included), `/v1/observations`, a workload registration;
//! - the bounded predict parser never holds more pairs than its limit;
//! - the KServe JSON reader's fast path (`tensor_json`, a tensor's numbers read from the bytes)
//!   reads exactly what serde reads, or steps aside;
//! - the gRPC walker (`grpc::scan`) accepts every message prost decodes and counts its entries
//!   as prost does, so a client is refused only for what it sent, and its bound on what the
//!   message decodes into is at least what prost's decoding holds (`support/counting.rs`).

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use duet_core::rng::Rng;
use duet_server::Config;
use duet_server::grpc::proto::duet::v1::{Group, Job, Pair, PredictRequest, job};
use duet_server::grpc::scan::{PREDICT_REQUEST, scan};
use prost::Message;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "support/counting.rs"]
mod counting;
#[path = "support/http.rs"]
mod http;
use http::{app_with, model_dir};

const TOKEN: &str = "property-token";

/// Tokens a mutation splices in: what breaks a JSON parser, and numbers at the edges of f32
/// and f64.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "-",
    "0",
    "1e39",
    "-1e39",
    "1e400",
    "3.4028236e38",
    "1.4e-46",
    "-0",
    "NaN",
    "\\u0000",
    "\u{1F600}",
    "0x10",
    "1.",
    ".5",
    "1e",
    "[[[[[[[[[[",
    "\"pairs\"",
    "\"data\"",
    "\"shape\"",
    " ",
    "\n",
];

/// One mutation of `bytes`, one to four edits.
fn mutate(draw: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..=draw.below(4) {
        let at = draw.below(out.len() + 1);
        match draw.below(6) {
            0 if !out.is_empty() => {
                let i = draw.below(out.len());
                out[i] ^= 1 << draw.below(8);
            }
            1 => out.truncate(at),
            2 => {
                let end = (at + draw.below(16)).min(out.len());
                out.drain(at..end);
            }
            3 => {
                let end = (at + draw.below(64)).min(out.len());
                let copy = out[at..end].to_vec();
                out.splice(at..at, copy);
            }
            _ => {
                let token = TOKENS[draw.below(TOKENS.len())].as_bytes();
                out.splice(at..at, token.iter().copied());
            }
        }
    }
    out
}

async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> StatusCode {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("Authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(Body::from(body)).expect("request");
    app.clone()
        .oneshot(request)
        .await
        .expect("response")
        .status()
}

fn predict_body() -> Value {
    json!({"gpu": "v100", "pairs": [
        {"a": {"workload": "a3c"}, "b": {"workload": "cyclegan"}, "mode": "space"},
        {"a": {"features": {"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": 64}},
         "b": {"workload": "a3c"}, "mode": "space"}]})
}

fn observations_body() -> Value {
    json!({"observations": [{"id": "o1", "gpu": "v100", "mode": "space",
        "a": {"workload": "a3c"}, "b": {"workload": "cyclegan"},
        "throughput_a": 8.0, "throughput_b": 14.0, "solo_throughput_a": 10.0,
        "solo_throughput_b": 20.0, "window_s": 10.0, "observed_at": "2026-12-01T12:00:00Z"}]})
}

fn workload_body() -> Value {
    json!({"kind": "train", "profiles": {"v100":
        {"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": 64}}})
}

fn infer_body(width: usize) -> Value {
    let data: Vec<f32> = (0..2 * width).map(|i| (i % 7) as f32 / 7.0).collect();
    json!({"id": "r", "inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32",
        "data": data}]})
}

#[tokio::test]
async fn no_mutated_body_is_answered_5xx() {
    let (app, state) = app_with(Config {
        token: Some(TOKEN.into()),
        max_pairs: 64,
        max_body_bytes: 64 * 1024,
        max_observations: 16,
        ..Config::new(model_dir())
    });
    let width = state.model().expect("model").meta.spec.pair_width();
    let binary_header = json!({"inputs": [{"name": "pairs", "shape": [2, width],
        "datatype": "FP32", "parameters": {"binary_data_size": 8 * width}}]})
    .to_string();
    let mut binary = binary_header.clone().into_bytes();
    for i in 0..2 * width {
        binary.extend_from_slice(&((i % 5) as f32).to_le_bytes());
    }
    let json_routes: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "POST",
            "/v1/predict",
            predict_body().to_string().into_bytes(),
        ),
        (
            "POST",
            "/v2/models/default/infer",
            infer_body(width).to_string().into_bytes(),
        ),
        (
            "POST",
            "/v1/observations",
            observations_body().to_string().into_bytes(),
        ),
        (
            "PUT",
            "/v1/workloads/property",
            workload_body().to_string().into_bytes(),
        ),
    ];
    let mut draw = Rng::new(36);
    let mut answered = [0usize; 6];
    for round in 0..1_500 {
        let (method, uri, base) = &json_routes[round % json_routes.len()];
        let body = mutate(&mut draw, base);
        let status = send(
            &app,
            method,
            uri,
            &[("content-type", "application/json".into())],
            body.clone(),
        )
        .await;
        assert!(
            !status.is_server_error(),
            "{method} {uri} answered {status} to {:?}",
            String::from_utf8_lossy(&body)
        );
        answered[usize::from(status.as_u16() / 100)] += 1;
        // The binary extension: a mutated body, and a header length drawn near the JSON's.
        let body = mutate(&mut draw, &binary);
        let length = binary_header.len() + draw.below(9) - 4;
        let length = if draw.below(8) == 0 {
            draw.below(body.len() + 2)
        } else {
            length
        };
        let status = send(
            &app,
            "POST",
            "/v2/models/default/infer",
            &[
                ("content-type", "application/octet-stream".into()),
                ("inference-header-content-length", length.to_string()),
            ],
            body,
        )
        .await;
        assert!(!status.is_server_error(), "binary infer answered {status}");
        answered[usize::from(status.as_u16() / 100)] += 1;
    }
    eprintln!(
        "3,000 mutated bodies: {} 2xx, {} 4xx",
        answered[2], answered[4]
    );
    assert!(answered[2] > 0 && answered[4] > 0, "{answered:?}");
}

#[test]
fn the_predict_parser_never_holds_more_pairs_than_its_limit() {
    let mut draw = Rng::new(7);
    let mut pairs = Vec::new();
    for i in 0..40 {
        pairs.push(
            json!({"a": {"workload": format!("w{i}")}, "b": {"workload": "a3c"}, "mode": "space"}),
        );
    }
    let base = json!({"gpu": "v100", "pairs": pairs})
        .to_string()
        .into_bytes();
    let mut parsed = 0;
    for _ in 0..3_000 {
        let body = mutate(&mut draw, &base);
        let limit = 1 + draw.below(50);
        match duet_server::routes::predict::parse_request(&body, limit) {
            Ok(request) => {
                parsed += 1;
                assert!(
                    request.pairs.len() <= limit,
                    "{} pairs past {limit}",
                    request.pairs.len()
                );
            }
            Err(failure) => assert!(failure.status.is_client_error(), "{failure:?}"),
        }
    }
    assert!(parsed > 0);
}

#[test]
fn the_tensor_fast_path_reads_what_serde_reads() {
    use duet_server::bounded::{Refused, parse};
    use duet_server::routes::kserve::{InferRequest, parse_request};
    let mut draw = Rng::new(11);
    // Over `tensor_json::SPLIT_BYTES`, so that the array is read on every core.
    let width = 600;
    let data: Vec<String> = (0..100 * width)
        .map(|i| match i % 5 {
            0 => format!("{}", i as f32 / 3.0),
            1 => format!("-{}e-3", i),
            2 => "0".to_string(),
            3 => format!("{}.25", i % 1000),
            _ => "1e2".to_string(),
        })
        .collect();
    let base = format!(
        r#"{{"id":"r","inputs":[{{"name":"pairs","shape":[100,{width}],"datatype":"FP32","data":[{}]}}]}}"#,
        data.join(",")
    )
    .into_bytes();
    assert!(base.len() > duet_server::tensor_json::SPLIT_BYTES);
    let as_json = |r: Result<InferRequest, Refused>| match r {
        Ok(request) => Ok(serde_json::to_value(&request).expect("serialises")),
        Err(_) => Err(()),
    };
    let mut agreed_ok = 0;
    for round in 0..300 {
        let body = if round == 0 {
            base.clone()
        } else {
            mutate(&mut draw, &base)
        };
        let fast = as_json(parse_request(&body, 1 << 20));
        let plain = as_json(parse::<InferRequest>(&body, 1 << 20));
        assert_eq!(
            fast,
            plain,
            "the fast path disagrees on {:?}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
        agreed_ok += usize::from(fast.is_ok());
    }
    assert!(agreed_ok > 0);
}

/// A drawn message as protobuf: as prost encodes it every fourth round, else mutated.
fn encoded_or_mutated(draw: &mut Rng, round: usize, message: &impl Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    if round.is_multiple_of(4) {
        bytes
    } else {
        mutate(draw, &bytes)
    }
}

fn job(id: &str) -> Option<Job> {
    Some(Job {
        job: Some(job::Job::Workload(id.into())),
    })
}

#[test]
fn the_grpc_walker_accepts_what_prost_decodes_and_counts_alike() {
    let mut draw = Rng::new(23);
    for round in 0..4_000 {
        let n = draw.below(40);
        let request = PredictRequest {
            gpu: (round % 3 == 0).then(|| "v100".to_string()),
            pairs: (0..n)
                .map(|i| Pair {
                    a: job(&format!("w{i}")),
                    b: if i % 4 == 0 { None } else { job("a3c") },
                    mode: "space".into(),
                    share_a: (i % 5 == 0).then_some(50.0),
                    ..Pair::default()
                })
                .collect(),
            groups: (0..n % 4)
                .map(|i| Group {
                    jobs: (0..3 + i).filter_map(|k| job(&format!("g{k}"))).collect(),
                    mode: "mps".into(),
                    shares: vec![30.0; i],
                    gpu: (i % 2 == 0).then(|| "v100".to_string()),
                })
                .collect(),
        };
        let bytes = encoded_or_mutated(&mut draw, round, &request);
        let walked = scan(&PREDICT_REQUEST, &bytes);
        if let Ok(decoded) = PredictRequest::decode(bytes.as_slice()) {
            let walked =
                walked.unwrap_or_else(|e| panic!("prost decodes what the walker refuses: {e:?}"));
            let count = |name: &str| walked.counts.get(name).copied().unwrap_or(0);
            assert_eq!(count("pairs"), decoded.pairs.len());
            assert_eq!(count("groups"), decoded.groups.len());
            let jobs: usize = decoded.groups.iter().map(|g| g.jobs.len()).sum();
            assert_eq!(count("group_jobs"), jobs);
            // What it decodes into, counted by the allocator, is within the walker's bound.
            let held = counting::decoded_bytes::<PredictRequest>(&bytes).expect("decodes");
            assert!(
                walked.decoded_bytes >= held,
                "round {round}: the walker says {} bytes, the message holds {held}",
                walked.decoded_bytes
            );
        }
    }
}

#[test]
fn the_grpc_walker_bounds_what_an_inference_request_decodes_into() {
    use duet_server::grpc::proto::inference::model_infer_request::{
        InferInputTensor, InferRequestedOutputTensor,
    };
    use duet_server::grpc::proto::inference::{
        InferParameter, InferTensorContents, ModelInferRequest, infer_parameter,
    };
    use duet_server::grpc::scan::MODEL_INFER_REQUEST;
    let mut draw = Rng::new(29);
    let mut decoded_some = 0;
    for round in 0..2_000 {
        let parameters = |draw: &mut Rng| {
            (0..draw.below(20))
                .map(|k| {
                    let value = infer_parameter::ParameterChoice::StringParam("v".repeat(k));
                    (
                        format!("p{k}"),
                        InferParameter {
                            parameter_choice: Some(value),
                        },
                    )
                })
                .collect()
        };
        let request = ModelInferRequest {
            model_name: "duet".into(),
            parameters: parameters(&mut draw),
            inputs: (0..draw.below(12))
                .map(|i| InferInputTensor {
                    name: format!("input-{i}"),
                    datatype: "FP32".into(),
                    shape: vec![1; draw.below(4)],
                    parameters: parameters(&mut draw),
                    contents: (i % 2 == 0).then(|| InferTensorContents {
                        fp32_contents: vec![0.5; draw.below(40)],
                        int64_contents: vec![7; draw.below(9)],
                        bytes_contents: vec![b"x".to_vec(); draw.below(5)],
                        ..Default::default()
                    }),
                })
                .collect(),
            outputs: (0..draw.below(3))
                .map(|_| InferRequestedOutputTensor {
                    name: "speed".into(),
                    parameters: parameters(&mut draw),
                })
                .collect(),
            raw_input_contents: vec![vec![1u8; draw.below(9)].into(); draw.below(4)],
            ..Default::default()
        };
        let bytes = encoded_or_mutated(&mut draw, round, &request);
        let walked = scan(&MODEL_INFER_REQUEST, &bytes);
        let Some(held) = counting::decoded_bytes::<ModelInferRequest>(&bytes) else {
            continue;
        };
        let walked =
            walked.unwrap_or_else(|e| panic!("prost decodes what the walker refuses: {e:?}"));
        let decoded = ModelInferRequest::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(
            walked.counts.get("inputs").copied().unwrap_or(0),
            decoded.inputs.len()
        );
        assert!(
            walked.decoded_bytes >= held,
            "round {round}: the walker says {} bytes, the message holds {held}",
            walked.decoded_bytes
        );
        decoded_some += 1;
    }
    assert!(decoded_some > 500, "{decoded_some}");
}
