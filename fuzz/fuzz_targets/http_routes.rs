//! Every route that reads a body, through the app in process on the shipped model: the first
//! byte picks the route (and, for KServe's binary extension, the JSON header's length), the rest
//! is the body. No body is answered 5xx.
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use duet_server::{AppState, Config};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const TOKEN: &str = "fuzz-token";

fn app() -> &'static (Router, tokio::runtime::Runtime) {
    static APP: OnceLock<(Router, tokio::runtime::Runtime)> = OnceLock::new();
    APP.get_or_init(|| {
        let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default");
        let state: Arc<AppState> = AppState::new(Config {
            token: Some(TOKEN.into()),
            max_pairs: 64,
            max_body_bytes: 64 * 1024,
            max_observations: 16,
            ..Config::new(model)
        })
        .expect("state");
        state
            .load_model(None, Vec::new())
            .expect("the shipped model loads");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        (duet_server::router(state), runtime)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (method, uri, binary) = match pick % 5 {
        0 => ("POST", "/v1/predict", false),
        1 => ("POST", "/v2/models/default/infer", false),
        2 => ("POST", "/v2/models/default/infer", true),
        3 => ("POST", "/v1/observations", false),
        _ => ("PUT", "/v1/workloads/fuzzed", false),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("Authorization", format!("Bearer {TOKEN}"));
    if binary {
        let length = usize::from(pick / 5) * body.len() / 51;
        request = request
            .header("content-type", "application/octet-stream")
            .header("inference-header-content-length", length.to_string());
    } else {
        request = request.header("content-type", "application/json");
    }
    let request = request.body(Body::from(body.to_vec())).expect("request");
    let (app, runtime) = app();
    let status = runtime
        .block_on(app.clone().oneshot(request))
        .expect("response")
        .status();
    assert!(!status.is_server_error(), "{method} {uri}: {status}");
});
