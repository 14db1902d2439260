//! Liveness, readiness and the Prometheus metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
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
    /// cannot be reached, or the configured model could not be loaded and the model
    /// repository's `previous` serves (`reason` says which).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// Why the server is degraded, in words that name no host, user or error text (the detail
    /// is in the log, and here for a request with the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelHealth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryHealth>,
}

/// Which model serves.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelHealth {
    /// `configured` (the model `--model` names, or one a reload named since), or `previous`:
    /// the configured model could not be loaded at start, and the model repository's
    /// `previous` serves in its place until a reload succeeds.
    pub serving: String,
    /// The model being loaded by a reload under way (its name in the model repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reloading: Option<String>,
    /// With the token only: why the configured model could not be loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where the workload registry stands against its store.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegistryHealth {
    /// `memory`, `sqlite` or `postgres`.
    pub store: String,
    /// With the token only: the file or database (never its password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// `ok`, or `degraded`: predictions serve the last synced registry and writes answer 503
    /// until the store returns.
    pub state: String,
    /// With the token only: why the store cannot be used, while it cannot.
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
        reason: None,
        model: None,
        registry: None,
    })
}

#[utoipa::path(get, tag = "health", path = "/readyz", responses(
    (status = 200, body = Health, description = "ready; `status` is `degraded` (and `reason` says why) while the registry's store cannot be reached or the model repository's `previous` model serves; with the token, `registry` and `model` also carry the database and the errors"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or shutting down")))]
pub async fn readyz(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Health>, Failure> {
    if state.lifecycle.draining() {
        return Err(Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down: in-flight requests are finishing; send new ones to another replica",
        ));
    }
    if !state.is_ready() {
        return Err(not_ready());
    }
    let detail = state.access.has_token(&headers);
    let model = state.model()?;
    let store_error = state.sync.degraded();
    let fallback = state.lifecycle.fallback();
    let mut reasons = Vec::new();
    if fallback.is_some() {
        reasons.push(
            "the configured model could not be loaded: the model repository's previous model \
             serves in its place",
        );
    }
    if store_error.is_some() {
        reasons.push(
            "the registry's database cannot be reached: predictions serve the last synced \
             registry, and writes are refused until it returns",
        );
    }
    let registry = RegistryHealth {
        store: state.store.kind().to_string(),
        database: detail.then(|| state.store.target().to_string()),
        state: (if store_error.is_some() {
            "degraded"
        } else {
            "ok"
        })
        .to_string(),
        sequence: state.sync.seq(),
        last_sync_age_s: state.store.postgres().and(state.sync.last_sync_age()),
        error: store_error.filter(|_| detail),
    };
    Ok(Json(Health {
        status: (if reasons.is_empty() {
            "ready"
        } else {
            "degraded"
        })
        .into(),
        model_version: Some(model.version().to_string()),
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        model: Some(ModelHealth {
            serving: (if fallback.is_some() {
                "previous"
            } else {
                "configured"
            })
            .into(),
            reloading: state.lifecycle.reloading(),
            error: fallback.filter(|_| detail),
        }),
        registry: Some(registry),
    }))
}

/// In the format the `Accept` header prefers: OpenMetrics for Prometheus, else the classic text.
async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = crate::metrics::Format::negotiate(accept);
    match state.metrics_text(format) {
        Ok(text) => ([(header::CONTENT_TYPE, format.content_type())], text).into_response(),
        Err(f) => f.into_response(),
    }
}
