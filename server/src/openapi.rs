//! `/openapi.json`, generated from the request and response types and the routes' annotations.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::OpenApi;

use crate::state::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/openapi.json", get(openapi))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "duet",
        description = "Predicts how much two GPU jobs slow each other down when they share one GPU."
    ),
    paths(
        crate::routes::health::healthz,
        crate::routes::health::readyz,
        crate::routes::predict::predict_route,
        crate::routes::workloads::list_workloads,
        crate::routes::workloads::get_workload,
        crate::routes::workloads::put_workload,
        crate::routes::workloads::delete_workload,
        crate::routes::models::models,
        crate::routes::models::reload_route,
        crate::routes::limits::limits,
    ),
    components(schemas(
        duet_core::api::PredictRequest,
        duet_core::api::PairQuery,
        duet_core::api::JobRef,
        duet_core::api::PredictResponse,
        duet_core::api::Prediction,
        duet_core::api::WorkloadBody,
        duet_core::api::RegisteredWorkload,
        duet_core::api::ApiError,
        duet_core::dataset::Mode,
        duet_core::dataset::JobKind,
    ))
)]
struct Document;

/// The OpenAPI document as JSON.
pub fn document() -> String {
    Document::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}
