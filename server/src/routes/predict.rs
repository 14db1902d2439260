//! `POST /v1/predict` (and its alias `/predict`): a request's pairs encoded, run and written as
//! JSON; a large request split over the cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use duet_core::api::PredictRequest;

use crate::auth::authorize_read;
use crate::bounded::Refused;
use crate::error::{Failure, body_failure};
use crate::shed::Work;
use crate::state::{AppState, not_ready};

/// Requests with a body larger than this are answered on a blocking thread, so a 10,000-pair
/// request never stalls the small ones.
pub const INLINE_BODY_BYTES: usize = 16 * 1024;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/predict", post(predict_route))
        .route("/predict", post(predict_route))
}

/// `POST /v1/predict`'s body as parsed: `PredictRequest`, its pairs counted while they are
/// read, so a body with more than `--max-pairs` is refused at the first pair past the limit.
mod wire {
    use duet_core::api::PairQuery;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, remote = "Self")]
    pub struct PredictRequest {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gpu: Option<String>,
        #[serde(deserialize_with = "crate::bounded::vec")]
        pub pairs: Vec<PairQuery>,
    }
    duet_core::object_only!(PredictRequest);
}

/// The 413 of a request with more pairs than `--max-pairs`.
fn over_pairs(max: usize) -> Failure {
    Failure::field(
        "pairs",
        format!(
            "more than {max} pairs: over the server's limit of {max} per request (--max-pairs)"
        ),
    )
    .with_status(StatusCode::PAYLOAD_TOO_LARGE)
}

/// Parses a prediction request, refusing it at the first pair over `max_pairs`.
pub fn parse_request(body: &[u8], max_pairs: usize) -> Result<PredictRequest, Failure> {
    match crate::bounded::parse::<wire::PredictRequest>(body, max_pairs) {
        Ok(b) => Ok(PredictRequest {
            gpu: b.gpu,
            pairs: b.pairs,
        }),
        Err(Refused::OverLimit) => Err(over_pairs(max_pairs)),
        Err(Refused::Invalid(f)) => Err(f),
    }
}

/// Parses, checks, encodes and runs one prediction request; the JSON answer.
pub fn answer(state: &AppState, body: &[u8]) -> Result<Vec<u8>, Failure> {
    answer_until(state, body, &AtomicBool::new(false))
}

/// `answer`, given up at its next chunk of pairs once `cancelled` is set (its client timed out
/// or went away).
pub fn answer_until(
    state: &AppState,
    body: &[u8],
    cancelled: &AtomicBool,
) -> Result<Vec<u8>, Failure> {
    let request = parse_request(body, state.config.max_pairs)?;
    if request.pairs.is_empty() {
        return Err(Failure::field("pairs", "no pairs to predict"));
    }
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    let model = &serving.model;
    let default_gpu = state.config.gpu.as_deref();
    let n = request.pairs.len();
    // A large request is cut into one part per core; each part is encoded, run and written on
    // its own thread, a chunk of pairs at a time (the tensors of one chunk alive at once), and
    // the parts' JSON items are joined in order.
    let parts = if n >= PARALLEL_PAIRS {
        cores().min(n)
    } else {
        1
    };
    let size = n.div_ceil(parts);
    let part = |range: std::ops::Range<usize>, serial: bool| -> Result<Vec<u8>, Failure> {
        let mut items = Vec::new();
        let mut start = range.start;
        while start < range.end {
            if cancelled.load(Ordering::Relaxed) {
                return Err(state.metrics.guards.gave_up());
            }
            let chunk = start..(start + CHUNK_PAIRS).min(range.end);
            start = chunk.end;
            let inputs = duet_model::predict::encode_pairs(
                model,
                &serving.registry,
                &request,
                chunk,
                default_gpu,
            )?;
            let kinds =
                duet_model::predict::kinds(&model.meta.spec, &model.meta.calibration, &inputs);
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
            let array = serde_json::to_vec(&duet_model::predict::predictions(&kinds, &outputs))
                .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            // A JSON array `[...]`: its items go in, separated by a comma.
            let chunk_items = &array[1..array.len() - 1];
            if !items.is_empty() && !chunk_items.is_empty() {
                items.push(b',');
            }
            items.extend_from_slice(chunk_items);
        }
        Ok(items)
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
                    h.join()
                        .unwrap_or_else(|_| Err(state.metrics.guards.panicked("prediction worker")))
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
    for (k, items) in arrays.iter().enumerate() {
        if k > 0 && !items.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(items);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Pairs encoded, run and written at once: a request's tensors never hold more, and a request
/// given up stops within one chunk's work.
const CHUNK_PAIRS: usize = 2048;

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
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, over the time limit, or over the limit of predictions in flight and waiting (`Retry-After` says when to retry)")))]
pub async fn predict_route(
    State(state): State<Arc<AppState>>,
    work: Option<Extension<Work>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    authorize_read(&state, &headers)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let bytes = if body.len() <= INLINE_BODY_BYTES {
        answer(&state, &body)?
    } else {
        // Only a request that declared a small body goes without a place.
        let Some(Extension(work)) = work else {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "the body is longer than its Content-Length",
            ));
        };
        let worker = state.clone();
        // The work holds its place until it ends, even after its client is gone.
        tokio::task::spawn_blocking(move || answer_until(&worker, &body, work.cancelled()))
            .await
            .map_err(|e| state.metrics.guards.join_failure(&e, "prediction"))??
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}
