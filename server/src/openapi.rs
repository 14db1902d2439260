//! `/openapi.json`, generated from the request and response types and the routes' annotations.

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "duet",
        description = "Predicts how much two GPU jobs slow each other down when they share one GPU."
    ),
    paths(
        crate::app::healthz,
        crate::app::readyz,
        crate::app::predict_route,
        crate::app::list_workloads,
        crate::app::get_workload,
        crate::app::put_workload,
        crate::app::delete_workload,
        crate::app::models,
        crate::app::reload_route,
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
