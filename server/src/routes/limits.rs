//! `GET /v1/limits`: the limits a client sizes its requests by. A request over one is refused
//! with the limit's name and value.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::error::Failure;
use crate::state::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/v1/limits", get(limits))
}

/// The server's limits, as its flags set them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Limits {
    /// Largest request body, bytes (`--max-body-bytes`; by default 256 per pair of
    /// `--max-pairs` and 64 KiB); a larger body is answered 413, before it is read when its
    /// length is declared.
    pub max_body_bytes: usize,
    /// Largest body of a workload registration or a reload (`--max-write-body-bytes`).
    pub max_write_body_bytes: usize,
    /// Bytes of request bodies the server holds at once (`--max-inflight-body-bytes`); a body
    /// that would pass it is answered 503 with `Retry-After`.
    pub max_inflight_body_bytes: usize,
    /// Most pairs in one `/v1/predict` request (`--max-pairs`); more are answered 413, counted
    /// while the body is parsed.
    pub max_pairs: usize,
    /// Most rows in one KServe `infer` request (`--max-infer-rows`; a pair is two rows); more
    /// are answered 413.
    pub max_infer_rows: usize,
    /// Most observations in one `/v1/observations` request (`--max-observations`); more are
    /// answered 413.
    pub max_observations: usize,
    /// Places of model work (predict, infer, observations, drift) taken at once
    /// (`--max-inflight`): one per request, one per core for a request split over the cores.
    pub max_inflight: usize,
    /// Places of model work that may be waited for (`--max-queue`); beyond both, 503 at once
    /// with `Retry-After`.
    pub max_queue: usize,
    /// Seconds a request may take (`--request-timeout`); a slower one is answered 503.
    pub request_timeout_s: f64,
    /// Seconds a connection has to send a request's header (`--header-timeout`); it is closed
    /// then, and so is a keep-alive connection idle that long.
    pub header_timeout_s: f64,
    /// Seconds a request's body may pause (`--idle-timeout`); it is answered 408 then.
    pub idle_timeout_s: f64,
    /// Client connections open at once (`--max-connections`), besides a reserve for probes.
    pub max_connections: usize,
    /// Workloads registered at most, the model's own included (`--max-workloads`); a new one
    /// past it is answered 422.
    pub max_workloads: usize,
    /// Profiles (devices) in one registration (`--max-profiles`).
    pub max_profiles: usize,
    /// Without `--state`: observations kept in memory at most (`--max-memory-observations`);
    /// a batch past it is answered 507.
    pub max_memory_observations: usize,
    /// Longest workload id.
    pub max_workload_id_length: usize,
    /// Longest string a JSON body may hold anywhere, bytes as written; a body with a longer one
    /// is answered 422 unparsed, naming its field.
    pub max_string_bytes: usize,
}

#[utoipa::path(get, tag = "limits", path = "/v1/limits", responses(
    (status = 200, body = Limits),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token")))]
pub async fn limits(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Limits>, Failure> {
    state.access.read(&headers)?;
    let c = &state.config;
    Ok(Json(Limits {
        max_body_bytes: c.max_body_bytes,
        max_write_body_bytes: c.max_write_body_bytes,
        max_inflight_body_bytes: c.max_inflight_body_bytes,
        max_pairs: c.max_pairs,
        max_infer_rows: c.max_infer_rows,
        max_observations: c.max_observations,
        max_inflight: c.max_inflight,
        max_queue: c.max_queue,
        request_timeout_s: c.request_timeout.as_secs_f64(),
        header_timeout_s: c.header_timeout.as_secs_f64(),
        idle_timeout_s: c.idle_timeout.as_secs_f64(),
        max_connections: c.max_connections,
        max_workloads: c.max_workloads,
        max_profiles: c.max_profiles,
        max_memory_observations: c.max_memory_observations,
        max_workload_id_length: duet_model::registry::MAX_ID,
        max_string_bytes: duet_core::api::MAX_STRING_BYTES,
    }))
}
