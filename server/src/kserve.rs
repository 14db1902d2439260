//! Open Inference Protocol (KServe v2) aliases over the same model: health, model metadata, and
//! `infer` on the encoded tensor (`pairs`, FP32 `[N, width]` -> `outputs`, FP32 `[N, 3]`: ln speed,
//! ln p10 speed, feasibility logit), for tooling that speaks the protocol.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use duet_model::LoadedModel;
use duet_model::network::OUTPUTS;
use duet_model::onnx::{INPUT, OUTPUT};
use serde::{Deserialize, Serialize};

use crate::auth::authorize_read;
use crate::bounded::Refused;
use crate::error::{Failure, body_failure};
use crate::shed::Work;
use crate::state::{AppState, not_ready};

/// The largest magnitude of an encoded input: standardised features are a few units, so this
/// bound only refuses values no encoding produces, and keeps every output finite.
pub const MAX_INPUT: f32 = 1e6;

/// The path parameter naming the model.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ModelName {
    /// The served model's name (`GET /v1/models`).
    pub name: String,
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{name}", get(metadata))
        .route("/v2/models/{name}/ready", get(model_ready))
}

/// `infer`, which runs the model: behind the limit of work in flight.
pub fn infer_routes() -> Router<Arc<AppState>> {
    Router::new().route("/v2/models/{name}/infer", post(infer))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Live {
    pub live: bool,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Ready {
    pub ready: bool,
}

#[utoipa::path(get, path = "/v2/health/live", tag = "kserve", responses((status = 200, body = Live)))]
pub async fn live() -> Json<Live> {
    Json(Live { live: true })
}

#[utoipa::path(get, path = "/v2/health/ready", tag = "kserve", responses(
    (status = 200, body = Ready), (status = 503, body = Ready, description = "no model loaded yet, or shutting down")))]
pub async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Ready>) {
    let ready = state.is_ready() && !state.lifecycle.draining();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(Ready { ready }))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TensorMeta {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
}

/// The model `name` names, or 404.
fn named(state: &AppState, name: &str) -> Result<Arc<LoadedModel>, Failure> {
    let model = state.model()?;
    if model.meta.name == name {
        Ok(model)
    } else {
        Err(Failure::field(
            "name",
            format!(
                "no model `{name}`; this server serves `{}`",
                model.meta.name
            ),
        )
        .with_status(StatusCode::NOT_FOUND))
    }
}

#[utoipa::path(get, path = "/v2/models/{name}", tag = "kserve", params(ModelName), responses(
    (status = 200, body = ModelMetadata),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
#[allow(clippy::cast_possible_wrap)]
pub async fn metadata(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<ModelMetadata>, Failure> {
    authorize_read(&state, &headers)?;
    let model = named(&state, &name)?;
    Ok(Json(ModelMetadata {
        name: model.meta.name.clone(),
        versions: vec![model.version().to_string()],
        platform: format!("duet_{}", model.engine.kind()),
        inputs: vec![TensorMeta {
            name: INPUT.into(),
            datatype: "FP32".into(),
            shape: vec![-1, model.meta.spec.pair_width() as i64],
        }],
        outputs: vec![TensorMeta {
            name: OUTPUT.into(),
            datatype: "FP32".into(),
            shape: vec![-1, OUTPUTS as i64],
        }],
    }))
}

#[utoipa::path(get, path = "/v2/models/{name}/ready", tag = "kserve", params(ModelName), responses(
    (status = 200, body = Ready),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn model_ready(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<Ready>, Failure> {
    if !state.is_ready() {
        return Err(not_ready());
    }
    named(&state, &name)?;
    Ok(Json(Ready { ready: true }))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct InferTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
    /// Counted while parsed: the value past `--max-infer-rows` rows ends the parse.
    #[serde(deserialize_with = "crate::bounded::vec")]
    pub data: Vec<f32>,
}
duet_core::object_only!(InferTensor);

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct InferRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
    pub inputs: Vec<InferTensor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub outputs: Option<serde_json::Value>,
}
duet_core::object_only!(InferRequest);

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<InferTensor>,
}

fn check_tensor(input: &InferTensor, width: usize, max_rows: usize) -> Result<usize, Failure> {
    if input.name != INPUT {
        return Err(Failure::field(
            "inputs[0].name",
            format!("the model's input is `{INPUT}`, not `{}`", input.name),
        ));
    }
    if input.datatype != "FP32" {
        return Err(Failure::field(
            "inputs[0].datatype",
            format!("the input is FP32, not {}", input.datatype),
        ));
    }
    let rows = match input.shape.as_slice() {
        [rows, w] if *rows > 0 && usize::try_from(*w).ok() == Some(width) => {
            usize::try_from(*rows).unwrap_or(usize::MAX)
        }
        _ => {
            return Err(Failure::field(
                "inputs[0].shape",
                format!(
                    "the input's shape is [rows, {width}], got {:?}",
                    input.shape
                ),
            ));
        }
    };
    if rows > max_rows {
        return Err(Failure::field(
            "inputs[0].shape",
            format!("{rows} rows is over the server's limit of {max_rows} (--max-infer-rows)"),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    if input.data.len() != rows * width {
        return Err(Failure::field(
            "inputs[0].data",
            format!(
                "{} values for shape [{rows}, {width}] ({} expected)",
                input.data.len(),
                rows * width
            ),
        ));
    }
    if let Some(i) = input
        .data
        .iter()
        .position(|v| !v.is_finite() || v.abs() > MAX_INPUT)
    {
        return Err(Failure::field(
            format!("inputs[0].data[{i}]"),
            format!(
                "{} is not a number in [-{MAX_INPUT:e}, {MAX_INPUT:e}] (encoded inputs are \
                 standardised: a value this large is no pair's encoding)",
                input.data[i]
            ),
        ));
    }
    Ok(rows)
}

#[utoipa::path(post, path = "/v2/models/{name}/infer", tag = "kserve", params(ModelName),
    request_body = InferRequest, responses(
    (status = 200, body = InferResponse),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body or rows limit"),
    (status = 422, body = duet_core::api::ApiError, description = "a tensor the model cannot take (name, type, shape, data length, a non-finite value)"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, over the time limit, or over the limit of work in flight and waiting (`Retry-After` says when to retry)")))]
pub async fn infer(
    State(state): State<Arc<AppState>>,
    Extension(work): Extension<Work>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<InferResponse>, Failure> {
    authorize_read(&state, &headers)?;
    let model = named(&state, &name)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let max_rows = state.config.max_infer_rows;
    let worker = state.clone();
    tokio::task::spawn_blocking(move || {
        let width = model.meta.spec.pair_width();
        // Every tensor's values count: more than the rows limit allows ends the parse there.
        let budget = max_rows.saturating_mul(width);
        let request: InferRequest = match crate::bounded::parse(&body, budget) {
            Ok(r) => r,
            Err(Refused::OverLimit) => {
                return Err(Failure::field(
                    "inputs[0].data",
                    format!(
                        "more than {budget} values ({max_rows} rows of {width}): over the \
                         server's limit of {max_rows} rows (--max-infer-rows)"
                    ),
                )
                .with_status(StatusCode::PAYLOAD_TOO_LARGE));
            }
            Err(Refused::Invalid(f)) => return Err(f),
        };
        drop(body);
        let InferRequest { id, mut inputs, .. } = request;
        if inputs.len() != 1 {
            return Err(Failure::field(
                "inputs",
                format!("one input tensor `{INPUT}` expected, got {}", inputs.len()),
            ));
        }
        let input = inputs.remove(0);
        let rows = check_tensor(&input, width, max_rows)?;
        if work.cancelled().load(std::sync::atomic::Ordering::Relaxed) {
            return Err(worker.metrics.guards.gave_up());
        }
        let data = model.engine.run(input.data).map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("inference failed: {e}"),
            )
        })?;
        #[allow(clippy::cast_possible_wrap)]
        let shape = vec![rows as i64, OUTPUTS as i64];
        Ok(Json(InferResponse {
            model_name: model.meta.name.clone(),
            model_version: model.version().to_string(),
            id,
            outputs: vec![InferTensor {
                name: OUTPUT.into(),
                shape,
                datatype: "FP32".into(),
                parameters: None,
                data,
            }],
        }))
    })
    .await
    .map_err(|e| state.metrics.guards.join_failure(&e, "inference"))?
}
