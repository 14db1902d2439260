//! The workload registry: list, get, register or replace, delete.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use duet_core::api::{RegisteredWorkload, WorkloadBody};

use crate::error::{Failure, body_failure, parse_json};
use crate::state::{AppState, not_ready};

/// The path parameter of `/v1/workloads/{id}`.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WorkloadId {
    /// The workload's id: 1 to 200 letters, digits and `- _ . : +`, not dots alone.
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = r"^[A-Za-z0-9._:+\-]*[A-Za-z0-9_:+\-][A-Za-z0-9._:+\-]*$"
    )]
    pub id: String,
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/workloads", get(list_workloads))
        .route(
            "/v1/workloads/{id}",
            get(get_workload).put(put_workload).delete(delete_workload),
        )
}

#[utoipa::path(get, tag = "workloads", path = "/v1/workloads", responses(
    (status = 200, body = Vec<RegisteredWorkload>),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn list_workloads(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Vec<RegisteredWorkload>>, Failure> {
    state.access.read(&headers)?;
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    Ok(Json(serving.registry.list().into_iter().cloned().collect()))
}

#[utoipa::path(get, tag = "workloads", path = "/v1/workloads/{id}", params(WorkloadId), responses(
    (status = 200, body = RegisteredWorkload),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no workload with this id"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn get_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<RegisteredWorkload>, Failure> {
    state.access.read(&headers)?;
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    serving
        .registry
        .get(&id)
        .map(|e| Json(e.registered.clone()))
        .ok_or_else(|| duet_model::ModelError::not_found(&id, "id").into())
}

#[utoipa::path(put, tag = "workloads", path = "/v1/workloads/{id}", params(WorkloadId), request_body = WorkloadBody, responses(
    (status = 200, body = RegisteredWorkload, description = "replaced"),
    (status = 201, body = RegisteredWorkload, description = "registered"),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "no or a wrong token"),
    (status = 408, body = duet_core::api::ApiError, description = "the body paused longer than --idle-timeout"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body limit of writes (--max-write-body-bytes)"),
    (status = 422, body = duet_core::api::ApiError, description = "an id or a profile the model cannot use"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or the registry database cannot be reached (the message names it)")))]
pub async fn put_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    state.access.write(&headers)?;
    let body = body.map_err(|e| {
        body_failure(
            &e,
            state.config.max_write_body_bytes,
            "--max-write-body-bytes",
        )
    })?;
    let body: WorkloadBody = parse_json(&body)?;
    let (created, registered) = state.put_workload(&id, body).await?;
    tracing::info!(workload = %id, created, "workload registered");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(registered)).into_response())
}

#[utoipa::path(delete, tag = "workloads", path = "/v1/workloads/{id}", params(WorkloadId), responses(
    (status = 204, description = "deleted"),
    (status = 401, body = duet_core::api::ApiError, description = "no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no workload with this id"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or the registry database cannot be reached (the message names it)")))]
pub async fn delete_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, Failure> {
    state.access.write(&headers)?;
    state.delete_workload(&id).await?;
    tracing::info!(workload = %id, "workload deleted");
    Ok(StatusCode::NO_CONTENT)
}
