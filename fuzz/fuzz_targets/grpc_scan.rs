//! The gRPC walker that judges a message before tonic decodes it: it accepts every message
//! prost decodes and counts its pairs as prost does.
#![no_main]

use duet_server::grpc::proto::duet::v1::PredictRequest;
use duet_server::grpc::proto::inference::ModelInferRequest;
use duet_server::grpc::scan::{MODEL_INFER_REQUEST, PREDICT_REQUEST, scan};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let walked = scan(&PREDICT_REQUEST, data);
    if let Ok(decoded) = PredictRequest::decode(data) {
        let walked = walked.expect("prost decodes what the walker refuses");
        assert_eq!(
            walked.counts.get("pairs").copied().unwrap_or(0),
            decoded.pairs.len()
        );
    }
    let walked = scan(&MODEL_INFER_REQUEST, data);
    if let Ok(decoded) = ModelInferRequest::decode(data) {
        let walked = walked.expect("prost decodes what the walker refuses");
        assert_eq!(
            walked.counts.get("inputs").copied().unwrap_or(0),
            decoded.inputs.len()
        );
    }
});
