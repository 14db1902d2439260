//! How the extender takes requests in, with the guards of `duet serve`: duet's connection loop
//! (`duet-listen`, the server's too: hyper's header-read timeout, `--header-timeout`, which
//! also closes a keep-alive connection idle that long; a limit on open connections,
//! `--max-connections`, with a reserve beyond it for probes, `/healthz`, `/readyz`,
//! `/metrics`; a drain on shutdown), and its body intake (`duet_listen::body`, the server's
//! too): a body read whole under its limit (`--max-body-bytes`, a declared length over it
//! refused before a byte is read) and under a budget of body bytes in flight
//! (`--max-inflight-body-bytes`); here besides, a body that pauses cut off (`--idle-timeout`),
//! a call that takes too long answered (`--request-timeout`), and a handler's panic answered
//! 500. Every refusal is a JSON `ApiError` naming its flag.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use duet_core::api::{ApiError, clipped};
use duet_listen::ConnectionLimits;
use duet_listen::body::{self, BodyBudget, Unread, declared_length};
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::metrics::Guards;

/// Request lines a connection in the reserve beyond `--max-connections` may start with.
const PROBES: [&[u8]; 3] = [b"GET /healthz", b"GET /readyz", b"GET /metrics"];

/// The limits on what a client may make the extender hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// To send a request's whole header (and a keep-alive connection's idle time).
    pub header_timeout: Duration,
    /// The longest pause within a body.
    pub idle_timeout: Duration,
    /// To answer a call, its body's reading included.
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_body_bytes: usize,
    /// Body bytes held at once, every connection together.
    pub max_inflight_body_bytes: usize,
    /// Nodes one call may name (`NodeNames` and `Nodes.items` together).
    pub max_nodes: usize,
}

/// `--max-nodes`'s default: three times Kubernetes' documented limit of 5,000 nodes a cluster.
pub const MAX_NODES: usize = 15_000;

impl Default for Limits {
    /// `duet extender`'s defaults, none of which a kube-scheduler trips: it sends a call at
    /// once on a few connections, and waits 5 s for the answer (its `httpTimeout`'s default).
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            max_connections: 256,
            max_body_bytes: 64 << 20,
            max_inflight_body_bytes: 256 << 20,
            max_nodes: MAX_NODES,
        }
    }
}

/// A JSON refusal: `status`, `error` (clipped).
pub fn refusal(status: StatusCode, error: String, field: Option<String>) -> Response {
    let body = ApiError {
        error: clipped(error),
        field: field.map(clipped),
    };
    (status, axum::Json(body)).into_response()
}

/// `app` behind the request guards: its body read under the limits, paused bodies cut off,
/// panics answered, the time limit; a wrong method (405, with `Allow`) or path (404) answered as
/// an `ApiError`, as its refusals are.
pub fn guarded(app: Router, limits: &Limits, guards: &Guards) -> Router {
    let intake = Arc::new(Intake {
        guards: guards.clone(),
        max_body_bytes: limits.max_body_bytes,
        budget: BodyBudget::new(limits.max_inflight_body_bytes),
    });
    let limit = limits.request_timeout;
    // The body is whole once the handler sees it: axum's own limit (2 MB) is off.
    app.method_not_allowed_fallback(|| async {
        refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            "this route does not answer this method; Allow lists those it does".into(),
            None,
        )
    })
    .fallback(|| async { refusal(StatusCode::NOT_FOUND, "no such route".into(), None) })
    .layer(DefaultBodyLimit::disable())
    .layer(middleware::from_fn_with_state(intake, read_body))
    // Inside the body's reading: it changes the body's type.
    .layer(RequestBodyTimeoutLayer::new(limits.idle_timeout))
    .layer(CatchPanicLayer::custom({
        let guards = guards.clone();
        move |panic| panicked(&guards, panic)
    }))
    .layer(middleware::from_fn({
        let guards = guards.clone();
        move |request: Request, next: Next| time_limit(limit, guards.clone(), request, next)
    }))
}

struct Intake {
    guards: Guards,
    max_body_bytes: usize,
    budget: BodyBudget,
}

/// Reads the body whole before the handler runs (`duet_listen::body`, the server's intake
/// too): a declared length over `--max-body-bytes` is refused before a byte is read, a body
/// that passes it where it does; each frame's bytes are taken from the budget of bytes in
/// flight as they arrive (503 once it is spent) and held until the answer is made.
async fn read_body(State(intake): State<Arc<Intake>>, request: Request, next: Next) -> Response {
    let limit = intake.max_body_bytes;
    let too_large = || {
        intake.guards.refused("max_body_bytes");
        refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is larger than the extender's limit of {limit} bytes (--max-body-bytes)"
            ),
            None,
        )
    };
    if declared_length(request.headers()).is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let (bytes, held) = match body::read(body, limit, &intake.budget).await {
        Ok(read) => read,
        Err(Unread::TooLarge { .. }) => return too_large(),
        Err(Unread::BudgetSpent(spent)) => {
            intake.guards.refused("max_inflight_body_bytes");
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the extender holds its limit of {} bytes of bodies in flight \
                     (--max-inflight-body-bytes)",
                    spent.max
                ),
                None,
            );
        }
        Err(Unread::Paused) => {
            intake.guards.refused("idle_timeout");
            return refusal(
                StatusCode::REQUEST_TIMEOUT,
                "the body paused longer than the extender's limit (--idle-timeout)".into(),
                None,
            );
        }
        Err(Unread::Broken(e)) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                format!("the body could not be read: {e}"),
                None,
            );
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    drop(held);
    response
}

/// A handler's panic, caught: logged, answered 500.
fn panicked(guards: &Guards, panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    guards.refused("panic");
    let what = duet_core::panic::message(&*panic);
    tracing::error!(panic = %what, "an extender call panicked");
    refusal(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error".into(),
        None,
    )
}

/// 503 naming `--request-timeout` when a call takes longer; its work is dropped.
async fn time_limit(limit: Duration, guards: Guards, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    if let Ok(response) = tokio::time::timeout(limit, next.run(request)).await {
        return response;
    }
    guards.refused("request_timeout");
    tracing::warn!(path, limit_s = limit.as_secs_f64(), "call timed out");
    refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the call took longer than the extender's limit of {} s (--request-timeout)",
            limit.as_secs_f64()
        ),
        None,
    )
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets open connections finish:
/// duet's connection loop (`duet-listen`, the server's too) with `--header-timeout`,
/// `--max-connections` and the probes' reserve.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    guards: &Guards,
    shutdown: impl Future<Output = ()>,
) {
    let connections = ConnectionLimits {
        max_connections: limits.max_connections,
        header_timeout: limits.header_timeout,
        probes: &PROBES,
    };
    let events = Arc::new(guards.clone());
    duet_listen::serve(listener, app, &connections, events, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use axum::routing::{get, post};

    /// `routes` behind the guards on a loopback port.
    async fn start(routes: Router, limits: &Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let guards = Guards::default();
        let (app, limits) = (guarded(routes, limits, &guards), limits.clone());
        tokio::spawn(async move {
            serve(listener, app, &limits, &guards, std::future::pending()).await;
        });
        addr
    }

    /// Sends `head` (its last header line's end included) and `body`; the status and body.
    async fn ask(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
        use std::io::{Read, Write};
        let request = [format!("{head}Connection: close\r\n\r\n").as_bytes(), body].concat();
        let text = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            let _ = stream.write_all(&request);
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).into_owned()
        })
        .await
        .expect("joined");
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        (status, body)
    }

    fn error(body: &str) -> String {
        serde_json::from_str::<ApiError>(body)
            .map(|e| e.error)
            .unwrap_or_else(|e| panic!("not a JSON error ({e}): {body}"))
    }

    async fn a_bug() -> &'static str {
        std::panic::panic_any("a handler's bug")
    }

    #[tokio::test]
    async fn each_guard_answers_json_naming_its_flag() {
        let limits = Limits {
            max_body_bytes: 10,
            // Longer than the idle timeout, so that a body that stops arriving meets the idle
            // timeout first (at the same 200 ms the two raced: 408 or 503).
            request_timeout: Duration::from_millis(600),
            idle_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let routes = Router::new()
            .route("/echo", post(|body: Bytes| async move { body }))
            .route("/panic", get(a_bug))
            .route(
                "/slow",
                get(|| async { tokio::time::sleep(Duration::from_secs(60)).await }),
            );
        let addr = start(routes, &limits).await;
        let post = |n: usize| format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n");
        let (status, body) = ask(addr, &post(10), b"0123456789").await;
        assert_eq!((status, body.as_str()), (200, "0123456789"));
        // Declared over the limit: refused with nothing of it sent.
        let (status, body) = ask(addr, &post(1_000_000_000), b"").await;
        assert_eq!(status, 413, "{body}");
        assert!(error(&body).contains("--max-body-bytes"), "{body}");
        // Chunked, passing the limit as it arrives.
        let chunked = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n";
        let (status, body) = ask(addr, chunked, b"c\r\n0123456789ab\r\n0\r\n\r\n").await;
        assert_eq!(status, 413, "{body}");
        // A body that stops arriving.
        let (status, body) = ask(addr, &post(10), b"01234").await;
        assert_eq!(status, 408, "{body}");
        assert!(error(&body).contains("--idle-timeout"), "{body}");
        let (status, body) = ask(addr, "GET /panic HTTP/1.1\r\nHost: x\r\n", b"").await;
        assert_eq!((status, error(&body).as_str()), (500, "internal error"));
        let (status, body) = ask(addr, "GET /slow HTTP/1.1\r\nHost: x\r\n", b"").await;
        assert_eq!(status, 503, "{body}");
        assert!(error(&body).contains("--request-timeout"), "{body}");
    }

    #[tokio::test]
    async fn bodies_in_flight_share_one_budget() {
        let limits = Limits {
            max_body_bytes: 10,
            max_inflight_body_bytes: 15,
            ..Limits::default()
        };
        // A handler that holds its body's bytes until told to answer.
        let (go, wait) = tokio::sync::watch::channel(false);
        let routes = Router::new().route(
            "/hold",
            post(move |body: Bytes| {
                let mut wait = wait.clone();
                async move {
                    let _ = wait.wait_for(|go| *go).await;
                    body
                }
            }),
        );
        let addr = start(routes, &limits).await;
        let head = "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n";
        let first = tokio::spawn(async move { ask(addr, head, b"0123456789").await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) = ask(addr, head, b"0123456789").await;
        assert_eq!(status, 503, "{body}");
        assert!(error(&body).contains("--max-inflight-body-bytes"), "{body}");
        go.send(true).expect("send");
        assert_eq!(first.await.expect("joined").0, 200);
        // Its bytes given back, the next body is taken.
        assert_eq!(ask(addr, head, b"0123456789").await.0, 200);
    }
}
