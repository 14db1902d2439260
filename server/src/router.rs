//! The whole app: every area's routes, the fallback, and the middleware around them (request
//! metrics, panics caught, the request timeout, the body limit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::Failure;
use crate::state::AppState;
use crate::{kserve, openapi, routes};

/// The whole app with its middleware.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    let timeout = state.config.request_timeout;
    Router::new()
        .merge(routes::health::routes())
        .merge(routes::predict::routes())
        .merge(routes::workloads::routes())
        .merge(routes::models::routes())
        .merge(routes::observations::routes())
        .merge(routes::limits::routes())
        .merge(kserve::routes())
        .merge(openapi::routes())
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        // While draining, every answer asks its client to close the connection.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::lifecycle::close_when_draining,
        ))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn_with_state(timeout, time_limit))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

/// Counts and times every request by its route pattern.
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
    if status.is_server_error() {
        tracing::warn!(route = %route, status = status.as_u16(), "request failed");
    }
    response
}

async fn fallback() -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        "no such route; /openapi.json lists them",
    )
}

/// Answers 503 naming the limit when a request takes longer than `--request-timeout`.
async fn time_limit(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request took longer than the server's limit of {} s (--request-timeout)",
                limit.as_secs_f64()
            ),
        )
        .into_response(),
    }
}
