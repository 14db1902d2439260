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
use crate::store::Store;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` (liveness), `ready`, or `degraded`: ready to predict, but the registry's store
    /// cannot be reached (see `registry`).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryHealth>,
}

/// Where the workload registry stands against its store.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegistryHealth {
    /// `memory`, `sqlite` or `postgres`.
    pub store: String,
    /// The file or database (never its password).
    pub database: String,
    /// `ok`, or `degraded`: predictions serve the last synced registry and writes answer 503
    /// until the store returns.
    pub state: String,
    /// Why the store cannot be used, while it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The highest change sequence number applied from the store.
    pub sequence: i64,
    /// Seconds since the last catch-up with a shared store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_age_s: Option<f64>,
}

#[utoipa::path(get, tag = "health", path = "/healthz", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        model_version: None,
        registry: None,
    })
}

#[utoipa::path(get, tag = "health", path = "/readyz", responses(
    (status = 200, body = Health, description = "ready; `status` is `degraded` while the registry's store cannot be reached"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Health>, Failure> {
    if !state.is_ready() {
        return Err(not_ready());
    }
    let model = state.model()?;
    let error = state.sync.degraded();
    let registry = RegistryHealth {
        store: state.store.kind().to_string(),
        database: state.store.target().to_string(),
        state: if error.is_some() { "degraded" } else { "ok" }.to_string(),
        sequence: state.sync.seq(),
        last_sync_age_s: state.store.postgres().and(state.sync.last_sync_age()),
        error,
    };
    Ok(Json(Health {
        status: if registry.error.is_some() {
            "degraded"
        } else {
            "ready"
        }
        .into(),
        model_version: Some(model.version().to_string()),
        registry: Some(registry),
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
    let mut text = state
        .metrics
        .render(&version, engine, workloads, &state.drift.tallies());
    state.sync.render(state.store.kind(), &mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
