//! The whole app: every area's routes, the fallback, and the middleware around them (request
//! metrics, panics caught, the request timeout, the body limit).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::error::{Failure, Logged};
use crate::state::AppState;
use crate::{auth, openapi, routes, shed};

/// The whole app with its middleware.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    let panics = state.clone();
    // The routes that run the model hold one of the limited places of work while they run.
    let admitted = |routes: Router<Arc<AppState>>| {
        routes.route_layer(middleware::from_fn_with_state(state.clone(), admit))
    };
    // Where a route takes a body, the token is checked from the headers before a byte of it is
    // read (the outermost route layer runs first); the handlers check it again, as they do on
    // the routes without a body.
    let reads = |routes: Router<Arc<AppState>>| {
        routes.route_layer(middleware::from_fn_with_state(
            state.access.clone(),
            auth::require_read,
        ))
    };
    let by_method = |routes: Router<Arc<AppState>>| {
        routes.route_layer(middleware::from_fn_with_state(
            state.access.clone(),
            auth::require_by_method,
        ))
    };
    // Registrations and reloads are small: their own body limit, checked before the body.
    let small_writes = |routes: Router<Arc<AppState>>| {
        routes
            .route_layer(DefaultBodyLimit::max(state.config.max_write_body_bytes))
            .route_layer(middleware::from_fn_with_state(
                state.access.clone(),
                auth::write_body_limit,
            ))
    };
    Router::new()
        .merge(routes::health::routes())
        .merge(reads(routes::predict::routes().route_layer(
            middleware::from_fn_with_state(state.clone(), admit_unless_small),
        )))
        .merge(by_method(small_writes(routes::workloads::routes())))
        .merge(by_method(small_writes(routes::models::routes())))
        .merge(by_method(admitted(routes::observations::routes())))
        .merge(routes::limits::routes())
        .merge(routes::kserve::routes())
        .merge(reads(admitted(routes::kserve::infer_routes())))
        .merge(openapi::routes())
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(fallback)
        // A body that stops arriving for --idle-timeout is cut off (the innermost layer: it
        // changes the body's type, which only the routes themselves take as it is).
        .layer(RequestBodyTimeoutLayer::new(state.config.idle_timeout))
        .layer(CatchPanicLayer::custom(
            move |panic: Box<dyn std::any::Any + Send + 'static>| panicked(&panics, &*panic),
        ))
        .layer(middleware::from_fn_with_state(state.clone(), time_limit))
        .layer(middleware::from_fn_with_state(state.clone(), body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        // While draining, every answer asks its client to close the connection.
        .layer(middleware::from_fn_with_state(
            state.lifecycle.clone(),
            crate::lifecycle::close_when_draining,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// The middleware of `/v1/predict`: a request whose declared body is at most
/// `INLINE_BODY_BYTES` (a few dozen pairs) is answered at once on the async worker that reads
/// it, without a place: its work is bounded by the workers themselves, and a flood of large
/// requests never sheds the small ones. Any other is admitted (`admit`).
async fn admit_unless_small(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let small = crate::intake::declared_length(request.headers())
        .is_some_and(|n| n <= routes::predict::INLINE_BODY_BYTES as u64);
    if small {
        next.run(request).await
    } else {
        admit(State(state), request, next).await
    }
}

/// The middleware of the model routes. The body is read first (`crate::intake`: under
/// `--max-body-bytes` and the server's budget of body bytes in flight), so a slow sender holds
/// bytes, never a place; then the request takes its places (`shed::places_for_body`), or is
/// answered 503 with `Retry-After`.
async fn admit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let (parts, body) = request.into_parts();
    let (bytes, held) = match crate::intake::read(
        body,
        state.config.max_body_bytes,
        "--max-body-bytes",
        &state.body_budget,
    )
    .await
    {
        Ok(read) => read,
        Err(failure) => return shed::shed_response(failure),
    };
    let places = shed::places_for_body(&state.limiter, bytes.len());
    let work = match shed::take(&state.limiter, &state.metrics.guards, route, places).await {
        Ok(work) => work,
        Err(failure) => return shed::shed_response(failure),
    };
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(work.clone());
    let guard = shed::GiveUpOnDrop::new(work);
    let response = next.run(request).await;
    guard.answered();
    drop(held);
    response
}

/// A handler's panic, caught: counted and logged once, answered 500.
fn panicked(state: &AppState, panic: &(dyn std::any::Any + Send)) -> Response {
    let what = duet_core::panic::message(panic);
    tracing::error!(panic = %what, "a request handler panicked");
    state.metrics.guards.panics.fetch_add(1, Ordering::Relaxed);
    let mut response =
        Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response();
    response.extensions_mut().insert(Logged);
    response
}

/// Counts and times every request by its route pattern; logs a server error once (unless
/// what caused it already did).
async fn observe(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let start = Instant::now();
    let response = next.run(request).await;
    let status = response.status();
    state
        .metrics
        .request(&route, status.as_u16(), start.elapsed().as_secs_f64());
    if status.is_server_error() && response.extensions().get::<Logged>().is_none() {
        tracing::warn!(route = %route, status = status.as_u16(), "request failed");
    }
    response
}

/// Answers 413 at once, before reading a byte of it, for a body whose declared length is over
/// `--max-body-bytes` (one without a length is cut off where it passes the limit).
async fn body_limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limit = state.config.max_body_bytes;
    if crate::intake::declared_length(request.headers()).is_some_and(|n| n > limit as u64) {
        return crate::error::too_large(limit, "--max-body-bytes").into_response();
    }
    next.run(request).await
}

/// A route asked with a method it does not answer: 405 as an `ApiError`, the `Allow` header
/// (axum's) listing those it does.
async fn method_not_allowed() -> Failure {
    Failure::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this route does not answer this method; Allow lists those it does, /openapi.json each route's",
    )
}

async fn fallback() -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        "no such route; /openapi.json lists them",
    )
}

/// Answers 503 naming the limit when a request takes longer than `--request-timeout`; the
/// work behind it is dropped (model work stops at its next chunk). Counted and logged once.
async fn time_limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limit = state.config.request_timeout;
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            state
                .metrics
                .guards
                .timeouts
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(route = %route, limit_s = limit.as_secs_f64(), "request timed out");
            let mut response = Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the request took longer than the server's limit of {} s (--request-timeout)",
                    limit.as_secs_f64()
                ),
            )
            .into_response();
            response.extensions_mut().insert(Logged);
            response
        }
    }
}
