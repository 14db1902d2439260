//! `POST /v1/predict` (and its alias `/predict`): a request's pairs and groups parsed against
//! the pairs limit, predicted by `crate::service::predict` and written as JSON.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use duet_core::api::feature_map::with_entry_limit;
use duet_core::api::{PredictRequest, PredictResponse};

use crate::bounded::Refused;
use crate::error::{Failure, body_failure};
use crate::service::predict::{self as service, JsonItems, Spent};
use crate::shed::Work;
use crate::state::AppState;

/// Requests with a body larger than this are answered on a blocking thread, so a 10,000-pair
/// request never stalls the small ones.
pub const INLINE_BODY_BYTES: usize = 16 * 1024;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/predict", post(predict_route))
        .route("/predict", post(predict_route))
}

/// `POST /v1/predict`'s body as parsed: `PredictRequest`, its pairs and the pairs within its
/// groups counted while they are read (a group's jobs by `bounded::group_jobs`), so a body with
/// more than `--max-pairs` pairs is refused at the first item past the limit, and a body within
/// it never is.
mod wire {
    use duet_core::api::{JobRef, PairQuery};
    use duet_core::dataset::Mode;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, remote = "Self")]
    pub struct PredictRequest {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gpu: Option<String>,
        #[serde(default, deserialize_with = "crate::bounded::vec")]
        pub pairs: Vec<PairQuery>,
        #[serde(default, deserialize_with = "crate::bounded::vec")]
        pub groups: Vec<GroupQuery>,
    }
    duet_core::object_only!(PredictRequest);

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, remote = "Self")]
    pub struct GroupQuery {
        #[serde(deserialize_with = "crate::bounded::group_jobs")]
        pub jobs: Vec<JobRef>,
        pub mode: Mode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub shares: Option<Vec<f64>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gpu: Option<String>,
    }
    duet_core::object_only!(GroupQuery);

    impl GroupQuery {
        pub fn into_api(self) -> duet_core::api::GroupQuery {
            duet_core::api::GroupQuery {
                jobs: self.jobs,
                mode: self.mode,
                shares: self.shares,
                gpu: self.gpu,
            }
        }
    }
}

mod parts;

/// Parses a prediction request, refusing it at the first item over `max_pairs`, or once
/// parsed where its pairs and the pairs within its groups come to more. A body of at least
/// `shed::WHOLE_BODY_BYTES` (one that holds every core's place of work) is parsed over the
/// cores.
pub fn parse_request(body: &[u8], max_pairs: usize) -> Result<PredictRequest, Failure> {
    parse_request_over(body, max_pairs, crate::shed::cores())
}

/// [`parse_request`] over at most `threads` threads.
pub fn parse_request_over(
    body: &[u8],
    max_pairs: usize,
    threads: usize,
) -> Result<PredictRequest, Failure> {
    let in_parts = (threads > 1 && body.len() >= crate::shed::WHOLE_BODY_BYTES)
        .then(|| parts::parse(body, max_pairs, threads))
        .flatten();
    let request = match in_parts {
        Some(request) => request,
        None => match crate::bounded::parse::<wire::PredictRequest>(body, max_pairs) {
            Ok(b) => PredictRequest {
                gpu: b.gpu,
                pairs: b.pairs,
                groups: b
                    .groups
                    .into_iter()
                    .map(wire::GroupQuery::into_api)
                    .collect(),
            },
            Err(Refused::OverLimit) => return Err(service::over_pairs(max_pairs)),
            Err(Refused::Invalid(f)) => return Err(f),
        },
    };
    if service::pair_count(&request) > max_pairs {
        return Err(service::over_pairs(max_pairs));
    }
    Ok(request)
}

/// [`parse_request_over`] for the served model: each job's feature map refused at its first
/// entry past [`crate::bounded::FEATURE_ENTRIES_PAST_ACCEPTED`] more than the names the model accepts
/// (`duet_core::api::feature_map::with_entry_limit`), before a hostile map's millions of tiny
/// entries are held.
fn parse_for(state: &AppState, body: &[u8], threads: usize) -> Result<PredictRequest, Failure> {
    let parse = || parse_request_over(body, state.config.max_pairs, threads);
    match state.model() {
        Ok(model) => with_entry_limit(
            model.accepted_feature_count() + crate::bounded::FEATURE_ENTRIES_PAST_ACCEPTED,
            parse,
        ),
        Err(_) => parse(),
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
    let request = parse_for(state, body, crate::shed::cores())?;
    answer_request(state, request, cancelled)
}

/// The JSON answer to a parsed prediction request, given up at its next chunk of pairs once
/// `cancelled` is set.
pub fn answer_request(
    state: &AppState,
    request: PredictRequest,
    cancelled: &AtomicBool,
) -> Result<Vec<u8>, Failure> {
    answer_keeping(state, request, cancelled, &mut Spent::default())
}

/// `answer_request`, with the request and what was built from it kept in `spent` for its caller
/// to free after the answer is out.
pub fn answer_keeping(
    state: &AppState,
    request: PredictRequest,
    cancelled: &AtomicBool,
    spent: &mut Spent,
) -> Result<Vec<u8>, Failure> {
    if !request.groups.is_empty() {
        return answer_with_groups(state, request, cancelled, spent);
    }
    let predicted = service::predict::<JsonItems>(state, &request, cancelled);
    spent.keep(request);
    let predicted = predicted?;
    let version = serde_json::to_string(predicted.model.version())
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let arrays = predicted.parts;
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.0.len()).sum::<usize>() + 64);
    out.extend_from_slice(b"{\"model_version\":");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b",\"predictions\":[");
    for (k, JsonItems(items)) in arrays.iter().enumerate() {
        if k > 0 && !items.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(items);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// The JSON answer to a request with groups: its pairs and its groups' pairs run as one
/// request (one model, one snapshot), the groups composed from theirs.
fn answer_with_groups(
    state: &AppState,
    request: PredictRequest,
    cancelled: &AtomicBool,
    spent: &mut Spent,
) -> Result<Vec<u8>, Failure> {
    let (model_version, predictions, groups) =
        service::predict_with_groups(state, request, cancelled, spent)?;
    if groups.is_empty() {
        return serde_json::to_vec(&PredictResponse {
            model_version,
            predictions,
            groups,
        })
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    }
    // `PredictResponse` as serde writes it, its two arrays written over the cores.
    let version = serde_json::to_string(&model_version)
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let pairs = service::json_array(state, &predictions)?;
    let groups = service::json_array(state, &groups)?;
    let mut out = Vec::with_capacity(version.len() + pairs.len() + groups.len() + 44);
    out.extend_from_slice(b"{\"model_version\":");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b",\"predictions\":");
    out.extend_from_slice(&pairs);
    out.extend_from_slice(b",\"groups\":");
    out.extend_from_slice(&groups);
    out.push(b'}');
    Ok(out)
}

#[utoipa::path(post, tag = "predict", path = "/v1/predict", request_body = PredictRequest, responses(
    (status = 200, body = PredictResponse),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "unknown workload id, or no profile of it on the pair's device"),
    (status = 408, body = duet_core::api::ApiError, description = "the body paused longer than --idle-timeout"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body or pairs limit (a group of k jobs counts its k(k-1)/2 pairs)"),
    (status = 422, body = duet_core::api::ApiError, description = "a field the model cannot use"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, over the time limit, or over the limit of predictions in flight and waiting (`Retry-After` says when to retry)")))]
pub async fn predict_route(
    State(state): State<Arc<AppState>>,
    work: Option<Extension<Work>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    state.access.read(&headers)?;
    let body =
        body.map_err(|e| body_failure(&e, state.config.max_body_bytes, "--max-body-bytes"))?;
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
        // The work holds its places until it ends, even after its client is gone; those its
        // pairs do not need are given back once they are counted.
        let (answer, spent) = tokio::task::spawn_blocking(move || {
            let mut spent = Spent::default();
            let answer = parse_for(&worker, &body, work.places()).and_then(|request| {
                let places = worker
                    .limiter
                    .places_for(service::pair_count(&request), service::PARALLEL_PAIRS);
                work.fit(places);
                answer_keeping(&worker, request, work.cancelled(), &mut spent)
            });
            // The request and its body are freed, and what they freed (answered or refused)
            // given back past the bodies the server admits and a working margin. Its places go
            // back with its answer: held for the freeing too, they would refuse the next request
            // of a client that waits for each answer (`--max-queue 0`) for a few milliseconds.
            spent.keep(body);
            spent.trim_above(worker.config.memory_mark());
            drop(work);
            (answer, spent)
        })
        .await
        .map_err(|e| state.metrics.guards.join_failure(&e, "prediction"))?;
        // Freed once the answer is handed over (a request given up is freed where it ends).
        spent.free_later();
        answer?
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}
