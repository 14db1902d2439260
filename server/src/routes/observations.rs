//! `POST /v1/observations`: what the cluster measured, stored durably and scored for drift;
//! `GET /v1/drift`: the stored observations scored against the loaded model.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use duet_core::api::{DriftReport, ObservationRecord, ObservationsAnswer, RejectedObservation};
use serde::Deserialize;

use crate::bounded::Refused;
use crate::error::{Failure, body_failure};
use crate::service::observations::{Receipt, check};
use crate::shed::Work;
use crate::state::{AppState, not_ready};
use crate::store::{OBSERVATION_PAGE, Put, Store};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/observations", post(post_observations))
        .route("/v1/drift", get(drift))
}

/// The body as read before each item is checked on its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    /// Counted while parsed: the item past `--max-observations` ends the parse. Each item kept
    /// as its JSON text (checked on its own later): a hostile item's millions of tiny values
    /// cost their bytes, not a tree of values many times their size.
    #[serde(deserialize_with = "crate::bounded::vec")]
    observations: Vec<Box<serde_json::value::RawValue>>,
}

/// The name this server stores with what it receives: the pod's (`HOSTNAME`), else the host's;
/// read once, not per request.
fn server_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "duet".to_string())
    })
}

#[utoipa::path(post, tag = "observations", path = "/v1/observations", request_body = duet_core::api::ObservationBatch, responses(
    (status = 200, body = ObservationsAnswer, description = "every observation stored, or stored before with the same content"),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 401, body = duet_core::api::ApiError, description = "no or a wrong token"),
    (status = 408, body = duet_core::api::ApiError, description = "the body paused longer than --idle-timeout"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body limit, or more observations than --max-observations"),
    (status = 422, body = ObservationsAnswer, description = "some observations refused (`rejected` names each one's field); the others were stored and are listed"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or the store cannot be reached (none of the batch was stored; retry it: nothing is stored twice)"),
    (status = 507, body = duet_core::api::ApiError, description = "without --state: the batch would pass the observations kept in memory (--max-memory-observations); nothing of it was stored")))]
pub async fn post_observations(
    State(state): State<Arc<AppState>>,
    Extension(work): Extension<Work>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    state.access.write(&headers)?;
    let body =
        body.map_err(|e| body_failure(&e, state.config.max_body_bytes, "--max-body-bytes"))?;
    let max = state.config.max_observations;
    let batch: Batch = match crate::bounded::parse(&body, max) {
        Ok(batch) => batch,
        Err(Refused::OverLimit) => {
            return Err(Failure::field(
                "observations",
                format!(
                    "more than {max} observations: over the server's limit of {max} per \
                     request (--max-observations)"
                ),
            )
            .with_status(StatusCode::PAYLOAD_TOO_LARGE));
        }
        Err(Refused::Invalid(failure)) => return Ok(refused_whole(failure)),
    };
    drop(body);
    if batch.observations.is_empty() {
        return Ok(refused_whole(Failure::field(
            "observations",
            "no observations",
        )));
    }
    // Checking resolves jobs and runs the model: off the async threads.
    let checker = state.clone();
    // The place is held until the batch is stored, not only while it is checked.
    let checking = work.clone();
    let checked = tokio::task::spawn_blocking(move || {
        if checking
            .cancelled()
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(checker.metrics.guards.gave_up());
        }
        let guard = checker.read()?;
        let serving = guard.as_ref().ok_or_else(not_ready)?;
        let receipt = Receipt {
            server: server_name(),
            now_s: duet_core::timestamp::now_seconds(),
        };
        let mut checked = Vec::with_capacity(batch.observations.len());
        for (i, item) in batch.observations.into_iter().enumerate() {
            // A batch of large groups runs the model thousands of times: given up between
            // items once its client timed out or went away (nothing of it is stored yet).
            if checking
                .cancelled()
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                return Err(checker.metrics.guards.gave_up());
            }
            checked.push(check(&serving.model, &serving.registry, i, &item, &receipt));
        }
        Ok::<_, Failure>(checked)
    })
    .await
    .map_err(|e| state.metrics.guards.join_failure(&e, "observation check"))??;
    let mut answer = ObservationsAnswer {
        stored: Vec::new(),
        duplicates: Vec::new(),
        rejected: Vec::new(),
        error: None,
        field: None,
    };
    let mut records = Vec::new();
    for (index, item) in checked.into_iter().enumerate() {
        match item {
            Ok(record) => records.push((index, record)),
            Err(rejected) => answer.rejected.push(rejected),
        }
    }
    store(&state, records, &mut answer).await?;
    answer.rejected.sort_by_key(|r| r.index);
    for _ in &answer.rejected {
        state.metrics.observation("rejected");
    }
    tracing::info!(
        stored = answer.stored.len(),
        duplicates = answer.duplicates.len(),
        rejected = answer.rejected.len(),
        "observations reported"
    );
    let status = match answer.rejected.first() {
        Some(first) => {
            answer.error = Some(first.error.clone());
            answer.field = Some(first.field.clone());
            StatusCode::UNPROCESSABLE_ENTITY
        }
        None => StatusCode::OK,
    };
    Ok((status, Json(answer)).into_response())
}

/// A refusal of the batch as a whole. A 422 has the body every 422 of this route has (nothing
/// stored, nothing listed, the error and its field); any other status, the usual error body.
fn refused_whole(failure: Failure) -> Response {
    if failure.status != StatusCode::UNPROCESSABLE_ENTITY {
        return failure.into_response();
    }
    let answer = ObservationsAnswer {
        stored: Vec::new(),
        duplicates: Vec::new(),
        rejected: Vec::new(),
        error: Some(failure.error),
        field: failure.field,
    };
    (failure.status, Json(answer)).into_response()
}

/// Stores the checked observations (with their indices in the batch) in one transaction,
/// counts them, and adds each new pair to the drift window.
async fn store(
    state: &AppState,
    records: Vec<(usize, ObservationRecord)>,
    answer: &mut ObservationsAnswer,
) -> Result<(), Failure> {
    if records.is_empty() {
        return Ok(());
    }
    let batch: Vec<ObservationRecord> = records.iter().map(|(_, r)| r.clone()).collect();
    let puts = state.store.put_observations(&batch).await.map_err(|e| {
        tracing::error!(error = %e, observations = batch.len(), "a batch of observations could not be stored");
        let mut failure = state.store_failure(&e);
        failure.error = format!(
            "{} (none of this batch was stored; retry it, nothing is stored twice)",
            failure.error
        );
        failure
    })?;
    for ((index, record), put) in records.into_iter().zip(puts) {
        counted(state, index, &record, put, answer);
    }
    Ok(())
}

/// One observation's outcome, counted and answered; a new one joins the drift window.
fn counted(
    state: &AppState,
    index: usize,
    record: &ObservationRecord,
    put: Put,
    answer: &mut ObservationsAnswer,
) {
    let id = record.observation.id.clone();
    match put {
        Put::Stored(_) => {
            state.metrics.observation("stored");
            let scores = record
                .prediction
                .as_ref()
                .and_then(|p| crate::drift::scores(record, p))
                .unwrap_or_default();
            let mode = record
                .observation
                .mode
                .map_or("solo", duet_core::dataset::Mode::as_str);
            // Devices outside the serving model's list are counted as one (`other`).
            let device = state.model().map_or(crate::drift::OTHER_DEVICE, |m| {
                crate::drift::device_label(&m, &record.observation.gpu)
            });
            state.metrics.observed(device, mode, &scores);
            state.drift.push(record, device);
            answer.stored.push(id);
        }
        Put::Duplicate => {
            state.metrics.observation("duplicate");
            answer.duplicates.push(id);
        }
        Put::Conflict => answer.rejected.push(RejectedObservation {
            index,
            id: Some(id.clone()),
            field: format!("observations[{index}].id"),
            error: format!(
                "an observation `{id}` with other content is already stored; an id names one \
                 measurement (give this one its own)"
            ),
        }),
    }
}

/// `GET /v1/drift` parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DriftQuery {
    /// How many of the newest stored observations to score (default and most: 10000).
    #[param(minimum = 1, maximum = 10000)]
    pub window: Option<usize>,
}

#[utoipa::path(get, tag = "observations", path = "/v1/drift", params(DriftQuery), responses(
    (status = 200, body = DriftReport),
    (status = 400, body = duet_core::api::ApiError, description = "a query parameter that is not a number or not known"),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 422, body = duet_core::api::ApiError, description = "a window outside 1 to 10000"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, or the store cannot be reached")))]
pub async fn drift(
    State(state): State<Arc<AppState>>,
    Extension(work): Extension<Work>,
    headers: HeaderMap,
    query: Result<Query<DriftQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DriftReport>, Failure> {
    state.access.read(&headers)?;
    let Query(query) = query.map_err(|e| Failure {
        field: Some("window".into()),
        ..Failure::new(StatusCode::BAD_REQUEST, e.body_text())
    })?;
    let window = query.window.unwrap_or(OBSERVATION_PAGE);
    if !(1..=OBSERVATION_PAGE).contains(&window) {
        return Err(Failure::field(
            "window",
            format!("window {window} is outside 1 to {OBSERVATION_PAGE}"),
        ));
    }
    // Its own connection on a shared store; a failure there leaves writes and the sync alone.
    let records = state.store.newest_observations(window).await.map_err(|e| {
        tracing::warn!(error = %e, "drift: stored observations cannot be read");
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the stored observations cannot be read now; retry later",
        )
    })?;
    let scorer = state.clone();
    tokio::task::spawn_blocking(move || {
        // Started after its client gave up (the blocking threads were all busy): not at all.
        if work.cancelled().load(std::sync::atomic::Ordering::Relaxed) {
            return Err(scorer.metrics.guards.gave_up());
        }
        let guard = scorer.read()?;
        let serving = guard.as_ref().ok_or_else(not_ready)?;
        let refs: Vec<&ObservationRecord> = records.iter().map(|(_, r)| r).collect();
        let predictions =
            crate::drift::predict(&serving.model, &serving.registry, &refs, work.cancelled())
                .ok_or_else(|| scorer.metrics.guards.gave_up())?;
        let scored: Vec<_> = refs.iter().copied().zip(predictions).collect();
        let tallies = crate::drift::tallies(&scored);
        Ok(Json(DriftReport {
            model_version: serving.model.version().to_string(),
            pairs: tallies.scored,
            skipped: records.len() - tallies.scored,
            window,
            groups: tallies.devices,
            sizes: tallies.sizes,
            workloads: tallies.workloads,
        }))
    })
    .await
    .map_err(|e| state.metrics.guards.join_failure(&e, "drift scoring"))?
}
