//! `grpc::scan` promises an upper bound on what a message decodes into: the gRPC intake takes
//! that many bytes from the server's budget before prost decodes a byte. Here messages a
//! hostile or an ordinary client may send are decoded by prost under an allocator that counts
//! what glibc's malloc holds for every block (`support/counting.rs`), and the scan's figure
//! must be at least what the decoded message holds, and not far above it.

use std::collections::HashMap;

use duet_server::grpc::proto::duet::v1 as duet;
use duet_server::grpc::proto::inference;
use duet_server::grpc::proto::inference::model_infer_request as infer;
use duet_server::grpc::scan::{MODEL_INFER_REQUEST, PREDICT_REQUEST, Schema, scan};
use prost::Message;

#[path = "support/counting.rs"]
mod counting;

/// The scan's bound against what prost's decoding of `bytes` holds: at least that, and within
/// 5% and 1 KiB of it (a bound far above it would refuse messages that fit the budget).
fn bounded<M: Message + Default>(what: &str, schema: &Schema, bytes: &[u8]) {
    let bound = scan(schema, bytes).expect("scan").decoded_bytes;
    let held = counting::decoded_bytes::<M>(bytes).expect("prost decodes it");
    assert!(
        bound >= held,
        "{what}: the scan says {bound} bytes, the decoded message holds {held}"
    );
    assert!(
        bound <= held + held / 20 + 1024,
        "{what}: the scan says {bound} bytes, far above the {held} the decoded message holds"
    );
}

fn features(n: usize, name: impl Fn(usize) -> String) -> duet::Job {
    let values = (0..n)
        .map(|k| {
            (
                name(k),
                duet::FeatureValue {
                    value: Some(duet::feature_value::Value::Number(1.0)),
                },
            )
        })
        .collect();
    duet::Job {
        job: Some(duet::job::Job::Features(duet::Features { values })),
    }
}

fn pairs_of(jobs: impl Fn(usize) -> (duet::Job, duet::Job), n: usize) -> Vec<u8> {
    duet::PredictRequest {
        gpu: None,
        pairs: (0..n)
            .map(|i| {
                let (a, b) = jobs(i);
                duet::Pair {
                    a: Some(a),
                    b: Some(b),
                    mode: "space".into(),
                    share_a: None,
                    share_b: None,
                    gpu: None,
                }
            })
            .collect(),
        groups: Vec::new(),
    }
    .encode_to_vec()
}

#[test]
fn what_a_predict_request_decodes_into_is_within_its_scan() {
    let names = |k: usize| format!("feature_{k}");
    // Every size of feature map from 0 to 40 entries: a hash table's capacity grows by
    // doubling, and just past a growth it holds the most per entry.
    for n in 0..=40 {
        let bytes = pairs_of(|_| (features(n, names), features(n, names)), 50);
        bounded::<duet::PredictRequest>(
            &format!("50 pairs of {n} features"),
            &PREDICT_REQUEST,
            &bytes,
        );
    }
    // What an inline client sends: twenty features with names as long as duet's datasets'.
    let long = |k: usize| format!("a_feature_name_{k:02}");
    let bytes = pairs_of(|_| (features(20, long), features(20, long)), 1000);
    bounded::<duet::PredictRequest>("1,000 inline pairs", &PREDICT_REQUEST, &bytes);
    // One feature with a one-byte name: the smallest table and the smallest string.
    let tiny = |_: usize| "x".to_string();
    let bytes = pairs_of(|_| (features(1, tiny), features(1, tiny)), 1000);
    bounded::<duet::PredictRequest>(
        "1,000 pairs of one one-byte feature",
        &PREDICT_REQUEST,
        &bytes,
    );
    // Jobs by a one-byte id.
    let by_id = |_: usize| duet::Job {
        job: Some(duet::job::Job::Workload("w".into())),
    };
    let bytes = pairs_of(|i| (by_id(i), by_id(i)), 1000);
    bounded::<duet::PredictRequest>("1,000 pairs by one-byte ids", &PREDICT_REQUEST, &bytes);
    // Empty pairs: two bytes each on the wire.
    let bytes: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 1000)
        .flatten()
        .collect();
    bounded::<duet::PredictRequest>("1,000 empty pairs", &PREDICT_REQUEST, &bytes);
    // Groups of eight one-byte ids with shares; empty groups; groups of empty jobs.
    let group = |jobs: usize, shares: usize| duet::Group {
        jobs: (0..jobs).map(by_id).collect(),
        mode: "mps".into(),
        shares: vec![12.5; shares],
        gpu: Some("g".into()),
    };
    for (jobs, shares) in [(8, 8), (0, 0), (3, 0), (1, 1)] {
        let bytes = duet::PredictRequest {
            gpu: None,
            pairs: Vec::new(),
            groups: vec![group(jobs, shares); 500],
        }
        .encode_to_vec();
        bounded::<duet::PredictRequest>(
            &format!("500 groups of {jobs} jobs, {shares} shares"),
            &PREDICT_REQUEST,
            &bytes,
        );
    }
    let bytes: Vec<u8> = std::iter::repeat_n([0x1au8, 0x02, 0x0a, 0x00], 1000)
        .flatten()
        .collect();
    bounded::<duet::PredictRequest>("1,000 groups of one empty job", &PREDICT_REQUEST, &bytes);
}

#[test]
fn what_a_model_infer_request_decodes_into_is_within_its_scan() {
    let parameter = |n: usize| -> HashMap<String, inference::InferParameter> {
        (0..n)
            .map(|k| {
                (
                    format!("p{k}"),
                    inference::InferParameter {
                        parameter_choice: Some(
                            inference::infer_parameter::ParameterChoice::StringParam("v".into()),
                        ),
                    },
                )
            })
            .collect()
    };
    for n in [0, 1, 2, 4, 8, 15, 29] {
        let request = inference::ModelInferRequest {
            model_name: "m".into(),
            parameters: parameter(n),
            inputs: (0..200)
                .map(|_| infer::InferInputTensor {
                    name: "x".into(),
                    datatype: "FP32".into(),
                    shape: vec![1, 2],
                    parameters: parameter(n),
                    contents: Some(inference::InferTensorContents {
                        fp32_contents: vec![1.0; 2],
                        bytes_contents: vec![b"b".to_vec(); 3],
                        ..Default::default()
                    }),
                })
                .collect(),
            outputs: (0..50)
                .map(|_| infer::InferRequestedOutputTensor {
                    name: "y".into(),
                    parameters: parameter(n),
                })
                .collect(),
            raw_input_contents: vec![vec![0u8; 1].into(); 100],
            ..Default::default()
        };
        let bytes = request.encode_to_vec();
        bounded::<inference::ModelInferRequest>(
            &format!("200 inputs with {n} parameters each"),
            &MODEL_INFER_REQUEST,
            &bytes,
        );
    }
    // Empty inputs, and many empty byte strings.
    let bytes: Vec<u8> = std::iter::repeat_n([0x2au8, 0x00], 1000)
        .flatten()
        .collect();
    bounded::<inference::ModelInferRequest>("1,000 empty inputs", &MODEL_INFER_REQUEST, &bytes);
    let bytes: Vec<u8> = std::iter::repeat_n([0x3au8, 0x00], 1000)
        .flatten()
        .collect();
    bounded::<inference::ModelInferRequest>("1,000 empty raw inputs", &MODEL_INFER_REQUEST, &bytes);
}
