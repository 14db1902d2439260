//! Liveness, readiness and the Prometheus metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::error::Failure;
use crate::state::{AppState, not_ready};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
}

#[utoipa::path(get, tag = "health", path = "/healthz", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        model_version: None,
    })
}

#[utoipa::path(get, tag = "health", path = "/readyz", responses(
    (status = 200, body = Health),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Health>, Failure> {
    if !state.is_ready() {
        return Err(not_ready());
    }
    let model = state.model()?;
    Ok(Json(Health {
        status: "ready".into(),
        model_version: Some(model.version().to_string()),
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let (version, engine, workloads) = match state.read() {
        Ok(guard) => match guard.as_ref() {
            Some(s) => (
                s.model.version().to_string(),
                s.model.engine.kind().as_str(),
                s.registry.len(),
            ),
            None => (String::new(), state.config.engine.as_str(), 0),
        },
        Err(f) => return f.into_response(),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&version, engine, workloads),
    )
        .into_response()
}
