//! KServe's JSON reader: the fast path (a tensor's numbers read from the bytes, on every core for
//! a large one) reads exactly what serde reads, or steps aside.
#![no_main]

use duet_server::bounded::{Refused, parse};
use duet_server::routes::kserve::{InferRequest, parse_request};
use libfuzzer_sys::fuzz_target;

fn as_json(r: Result<InferRequest, Refused>) -> Option<serde_json::Value> {
    r.ok()
        .map(|request| serde_json::to_value(&request).expect("serialises"))
}

fuzz_target!(|data: &[u8]| {
    let fast = as_json(parse_request(data, 1 << 16));
    let plain = as_json(parse::<InferRequest>(data, 1 << 16));
    assert_eq!(fast, plain);
});
