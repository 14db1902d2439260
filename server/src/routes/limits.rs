//! `GET /v1/limits`: the limits a client sizes its requests by. A request over one is refused
//! with the limit's name and value.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::auth::authorize_read;
use crate::error::Failure;
use crate::state::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/v1/limits", get(limits))
}

/// The server's limits, as its flags set them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Limits {
    /// Largest request body, bytes (`--max-body-bytes`); larger bodies are answered 413.
    pub max_body_bytes: usize,
    /// Most pairs in one `/v1/predict` request, and observations in one `/v1/observations`
    /// request (`--max-pairs`); more are answered 413. The
    /// KServe `infer` route takes twice as many rows (each pair is two rows).
    pub max_pairs: usize,
    /// Seconds a request may take (`--request-timeout`); a slower one is answered 503.
    pub request_timeout_s: f64,
    /// Longest workload id.
    pub max_workload_id_length: usize,
}

#[utoipa::path(get, tag = "limits", path = "/v1/limits", responses(
    (status = 200, body = Limits),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token")))]
pub async fn limits(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Limits>, Failure> {
    authorize_read(&state, &headers)?;
    Ok(Json(Limits {
        max_body_bytes: state.config.max_body_bytes,
        max_pairs: state.config.max_pairs,
        request_timeout_s: state.config.request_timeout.as_secs_f64(),
        max_workload_id_length: duet_model::registry::MAX_ID,
    }))
}
