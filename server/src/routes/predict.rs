//! `POST /v1/predict` (and its alias `/predict`): a request's pairs encoded, run and written as
//! JSON; a large request split over the cores.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use duet_core::api::PredictRequest;

use crate::auth::authorize_read;
use crate::error::{Failure, body_failure, parse_json};
use crate::state::{AppState, not_ready};

/// Requests with a body larger than this are answered on a blocking thread, so a 10,000-pair
/// request never stalls the small ones.
const INLINE_BODY_BYTES: usize = 16 * 1024;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/predict", post(predict_route))
        .route("/predict", post(predict_route))
}

/// Parses, checks, encodes and runs one prediction request; the JSON answer.
pub fn answer(state: &AppState, body: &[u8]) -> Result<Vec<u8>, Failure> {
    let request: PredictRequest = parse_json(body)?;
    if request.pairs.is_empty() {
        return Err(Failure::field("pairs", "no pairs to predict"));
    }
    if request.pairs.len() > state.config.max_pairs {
        return Err(Failure::field(
            "pairs",
            format!(
                "{} pairs is over the server's limit of {} per request (--max-pairs)",
                request.pairs.len(),
                state.config.max_pairs
            ),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    let model = &serving.model;
    let default_gpu = state.config.gpu.as_deref();
    let n = request.pairs.len();
    // A large request is cut into one part per core; each part is encoded, run and written on
    // its own thread, and the parts' JSON arrays are joined in order.
    let parts = if n >= PARALLEL_PAIRS {
        cores().min(n)
    } else {
        1
    };
    let size = n.div_ceil(parts);
    let part = |range: std::ops::Range<usize>, serial: bool| -> Result<Vec<u8>, Failure> {
        let inputs = duet_model::predict::encode_pairs(
            model,
            &serving.registry,
            &request,
            range,
            default_gpu,
        )?;
        let kinds = duet_model::predict::kinds(&model.meta.spec, &model.meta.calibration, &inputs);
        let outputs = if serial {
            model.engine.run_serial(inputs)
        } else {
            model.engine.run(inputs)
        }
        .map_err(|e| {
            tracing::error!(error = %e, "inference failed");
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("inference failed: {e}"),
            )
        })?;
        serde_json::to_vec(&duet_model::predict::predictions(&kinds, &outputs))
            .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    };
    let arrays: Vec<Vec<u8>> = if parts == 1 {
        vec![part(0..n, false)?]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..parts)
                .map(|k| {
                    let range = (k * size)..((k + 1) * size).min(n);
                    scope.spawn(move || part(range, true))
                })
                .collect();
            // Joined in order: the first failing part names the first bad pair.
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Failure::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "a prediction worker panicked",
                        ))
                    })
                })
                .collect::<Result<Vec<_>, Failure>>()
        })?
    };
    state.metrics.pairs(n);
    let version = serde_json::to_string(model.version())
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut out = Vec::with_capacity(arrays.iter().map(Vec::len).sum::<usize>() + 64);
    out.extend_from_slice(b"{\"model_version\":");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b",\"predictions\":[");
    for (k, array) in arrays.iter().enumerate() {
        // Each part is a JSON array `[...]`: its items go in, separated by a comma.
        let items = &array[1..array.len() - 1];
        if k > 0 && !items.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(items);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Requests with at least this many pairs are split over the cores.
const PARALLEL_PAIRS: usize = 2048;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[utoipa::path(post, tag = "predict", path = "/v1/predict", request_body = PredictRequest, responses(
    (status = 200, body = duet_core::api::PredictResponse),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "unknown workload id, or no profile of it on the pair's device"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body or pairs limit"),
    (status = 422, body = duet_core::api::ApiError, description = "a field the model cannot use"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or over the time limit")))]
pub async fn predict_route(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    authorize_read(&state, &headers)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let bytes = if body.len() <= INLINE_BODY_BYTES {
        answer(&state, &body)?
    } else {
        let state = state.clone();
        tokio::task::spawn_blocking(move || answer(&state, &body))
            .await
            .map_err(|e| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("prediction panicked: {e}"),
                )
            })??
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}
