//! The app in process, called like a client calls it: shared by the server's route tests.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// The shipped default model.
pub fn model_dir() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../models/default")
}

/// The app on `config` with its model loaded, and its state.
#[allow(dead_code)] // not every test file that shares this module needs it
pub fn app_with(config: duet_server::Config) -> (Router, std::sync::Arc<duet_server::AppState>) {
    let state = duet_server::AppState::new(config).expect("state");
    state
        .load_model(None, Vec::new())
        .expect("the default model loads");
    (duet_server::router(state.clone()), state)
}

/// The app serving the default model, its writes behind `token`, the registry in memory.
#[allow(dead_code)] // not every test file that shares this module needs it
pub fn default_app(token: &str) -> Router {
    app_with(duet_server::Config {
        token: Some(token.into()),
        ..duet_server::Config::new(model_dir())
    })
    .0
}

/// One request; the answer's status and JSON body (a string where it is not JSON).
#[allow(dead_code)] // not every test file that shares this module needs it
pub async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    call_raw(app, method, uri, body.map(|b| b.to_string()), token).await
}

#[allow(dead_code)] // not every test file that shares this module needs it
pub async fn call_raw(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        request = request.header("Authorization", format!("Bearer {t}"));
    }
    let request = request
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, Body::from))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}
