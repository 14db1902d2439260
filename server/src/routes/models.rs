//! The serving model: what it is, and reloading it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::error::{Failure, body_failure, parse_json};
use crate::routes::health::Health;
use crate::state::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/reload", post(reload_route))
}

/// `GET /v1/models`: the serving model.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelInfo {
    pub name: String,
    pub version: String,
    pub engine: String,
    pub path: String,
    /// Unix seconds.
    pub loaded_at: u64,
    /// `model.json`: feature spec, training data, configuration and metrics per split.
    #[schema(value_type = Object)]
    pub meta: serde_json::Value,
}

#[utoipa::path(get, tag = "models", path = "/v1/models", responses(
    (status = 200, body = Vec<ModelInfo>),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn models(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Vec<ModelInfo>>, Failure> {
    state.access.read(&headers)?;
    let model = state.model()?;
    let meta = serde_json::to_value(&model.meta)
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(vec![ModelInfo {
        name: model.meta.name.clone(),
        version: model.version().to_string(),
        engine: model.engine.kind().to_string(),
        path: model.dir.display().to_string(),
        loaded_at: model.loaded_at,
        meta,
    }]))
}

/// `POST /v1/models/reload`: optional body naming another model of the server's model
/// repository (`--model-repo`, by default the folder that holds `--model`).
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct ReloadRequest {
    /// The name of a model in the server's model repository (a folder name, never a path); the
    /// serving model's folder is read again when absent.
    #[serde(default)]
    pub model: Option<String>,
}
duet_core::object_only!(ReloadRequest);

#[utoipa::path(post, tag = "models", path = "/v1/models/reload", request_body = Option<ReloadRequest>, responses(
    (status = 200, body = Health),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name in the repository"),
    (status = 409, body = duet_core::api::ApiError, description = "another model is being loaded (named); a request for the model being loaded waits for that load and gets its outcome"),
    (status = 408, body = duet_core::api::ApiError, description = "the body paused longer than --idle-timeout"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body limit of writes (--max-write-body-bytes)"),
    (status = 422, body = duet_core::api::ApiError, description = "not a model name, or the model was refused (the old one serves)"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or over the time limit")))]
pub async fn reload_route(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Health>, Failure> {
    state.access.write(&headers)?;
    let body = body.map_err(|e| {
        body_failure(
            &e,
            state.config.max_write_body_bytes,
            "--max-write-body-bytes",
        )
    })?;
    // No body, `null` and `{}` all mean "read the serving model's folder again".
    let request: ReloadRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReloadRequest::default()
    } else {
        parse_json::<Option<ReloadRequest>>(&body)?.unwrap_or_default()
    };
    let dir = request
        .model
        .map(|name| state.config.resolve_model_name(&name))
        .transpose()?;
    let version = state.reload(dir).await?;
    Ok(Json(Health {
        status: "reloaded".into(),
        model_version: Some(version),
        reason: None,
        model: None,
        registry: None,
    }))
}
