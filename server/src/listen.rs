//! The connection loop, in place of `axum::serve` (which cannot set these): hyper's HTTP/1 with
//! its header-read timeout (`--header-timeout`, which also closes a keep-alive connection idle
//! that long), a limit on open connections (`--max-connections`), and a small reserve beyond
//! the limit that only probes may use, so that `/healthz`, `/readyz`, `/metrics` and the KServe
//! health routes stay answerable while clients hold every connection. A connection over the
//! limit that is not a probe is closed at once, so descriptors stay bounded.
//!
//! On shutdown the listener closes, every connection finishes the request it is answering and
//! closes, and `serve` returns once all have.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::shed::Counters;
use crate::state::AppState;

/// Connections beyond `--max-connections` that probes may use.
pub const PROBE_RESERVE: usize = 16;

/// Request lines a connection in the reserve may start with.
const PROBES: [&[u8]; 5] = [
    b"GET /healthz",
    b"GET /readyz",
    b"GET /metrics",
    b"GET /v2/health/live",
    b"GET /v2/health/ready",
];

/// How long a connection over the limit has to show it is a probe.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` resolves, then lets open connections finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: &Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let connections = Arc::new(Semaphore::new(state.config.max_connections.max(1)));
    let reserve = Arc::new(Semaphore::new(PROBE_RESERVE));
    // Every connection holds a receiver; `closing.closed()` resolves when the last has ended.
    let (closing, closed) = watch::channel(false);
    let header_timeout = state.config.header_timeout;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            stream = accept(&listener, "HTTP") => stream,
            () = &mut shutdown => break,
        };
        let connection = Connection {
            app: app.clone(),
            state: state.clone(),
            header_timeout,
            closed: closed.clone(),
        };
        if let Ok(permit) = connections.clone().try_acquire_owned() {
            tokio::spawn(connection.run(stream, permit, true));
        } else if let Ok(permit) = reserve.clone().try_acquire_owned() {
            tokio::spawn(async move {
                if is_probe(&stream).await {
                    connection.run(stream, permit, false).await;
                } else {
                    refused(&connection.state.metrics.guards);
                }
            });
        } else {
            refused(&state.metrics.guards);
        }
    }
    drop(listener);
    tracing::info!("listener closed; finishing open connections");
    let _ = closing.send(true);
    drop(closed);
    closing.closed().await;
    Ok(())
}

fn refused(counters: &Counters) {
    counters.connections_refused.fetch_add(1, Ordering::Relaxed);
    tracing::debug!("connection over --max-connections closed");
}

/// Whether the connection's first bytes are a probe's request line (within `PROBE_WAIT`).
async fn is_probe(stream: &TcpStream) -> bool {
    let look = async {
        let mut buf = [0u8; 24];
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            let seen = &buf[..n];
            if PROBES.iter().any(|p| seen.starts_with(p)) {
                return true;
            }
            if n == buf.len() || !PROBES.iter().any(|p| p.starts_with(seen)) {
                return false;
            }
            // A request line still arriving.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PROBE_WAIT, look)
        .await
        .unwrap_or(false)
}

/// The next connection on `listener`, Nagle's algorithm off. An accept that fails (out of
/// descriptors, a connection reset before it was taken) is logged and tried again after a
/// pause, as hyper's own accept loops do. Cancel-safe: a caller may stop waiting at any time.
pub(crate) async fn accept(listener: &TcpListener, transport: &'static str) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(e) => {
                tracing::warn!(error = %e, transport, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: Router,
    state: Arc<AppState>,
    header_timeout: Duration,
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// Serves the connection until it closes (a reserve connection: one request).
    async fn run(mut self, stream: TcpStream, permit: OwnedSemaphorePermit, keep_alive: bool) {
        let guards = &self.state.metrics.guards;
        guards.connections_open.fetch_add(1, Ordering::Relaxed);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(keep_alive);
        let service = TowerToHyperService::new(self.app.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(conn);
        let mut closing = false;
        let result = loop {
            tokio::select! {
                result = conn.as_mut() => break result,
                changed = self.closed.changed(), if !closing => {
                    // Shutting down (or the loop gone): finish the request in progress, if
                    // any, then close.
                    let _ = changed;
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        };
        if let Err(e) = result {
            if e.is_timeout() {
                guards.header_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "connection closed: no complete request header within --header-timeout"
                );
            } else {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        guards.connections_open.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
    }
}
