//! `/v1/predict`'s bounded parser: any bytes are parsed or refused with a 4xx, never more pairs
//! than the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limit = 64;
    match duet_server::routes::predict::parse_request(data, limit) {
        Ok(request) => assert!(request.pairs.len() <= limit),
        Err(failure) => assert!(failure.status.is_client_error(), "{failure:?}"),
    }
});
