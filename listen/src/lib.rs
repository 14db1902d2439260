//! The connection loop of duet's HTTP listeners (the server's and the Kubernetes extender's), in
//! place of `axum::serve`, which cannot set these: hyper's HTTP/1 with its header-read timeout
//! (which also closes a keep-alive connection idle that long), a limit on open connections, and
//! a small reserve beyond the limit that only probes may use, so that health, readiness and
//! metrics stay answerable while clients hold every connection. A connection over the limit
//! that is not a probe is closed at once, so descriptors stay bounded.
//!
//! On shutdown the listener closes, every connection finishes the request it is answering and
//! closes, and [`serve`] returns once all have.
//!
//! [`body`] reads a request's body whole under a limit and a budget of body bytes in flight.

pub mod body;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Connections beyond the limit that probes may use.
pub const PROBE_RESERVE: usize = 16;

/// How long a connection over the limit has to show it is a probe.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// What a listener holds its connections to.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections open at once, probes in the reserve aside.
    pub max_connections: usize,
    /// To send a request's whole header, from a connection's opening or its previous answer.
    pub header_timeout: Duration,
    /// The request lines (`GET /healthz`) a connection in the reserve may start with.
    pub probes: &'static [&'static [u8]],
}

/// What happens to connections, for a listener that counts it; every method does nothing by
/// default.
pub trait ConnectionEvents: Send + Sync + 'static {
    /// A connection over the limit (not a probe in the reserve) was closed on arrival.
    fn refused(&self) {}
    /// A connection is being served.
    fn opened(&self) {}
    /// A served connection ended.
    fn closed(&self) {}
    /// A connection was closed for not sending a whole header within the timeout.
    fn header_timed_out(&self) {}
}

/// Counts nothing.
impl ConnectionEvents for () {}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then lets open
/// connections finish; `events` hears what happens to them.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &ConnectionLimits,
    events: Arc<dyn ConnectionEvents>,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let reserve = Arc::new(Semaphore::new(PROBE_RESERVE));
    // Every connection holds a receiver; `closing.closed()` resolves when the last has ended.
    let (closing, closed) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            stream = accept(&listener, "HTTP") => stream,
            () = &mut shutdown => break,
        };
        let connection = Connection {
            app: app.clone(),
            events: events.clone(),
            header_timeout: limits.header_timeout,
            closed: closed.clone(),
        };
        if let Ok(permit) = connections.clone().try_acquire_owned() {
            tokio::spawn(connection.run(stream, permit, true));
        } else if let Ok(permit) = reserve.clone().try_acquire_owned() {
            let probes = limits.probes;
            tokio::spawn(async move {
                if is_probe(&stream, probes).await {
                    connection.run(stream, permit, false).await;
                } else {
                    refused(connection.events.as_ref());
                }
            });
        } else {
            refused(events.as_ref());
        }
    }
    drop(listener);
    tracing::info!("listener closed; finishing open connections");
    let _ = closing.send(true);
    drop(closed);
    closing.closed().await;
}

fn refused(events: &dyn ConnectionEvents) {
    events.refused();
    tracing::debug!("connection over the connection limit closed");
}

/// Whether the connection's first bytes are one of `probes`' request lines (within
/// `PROBE_WAIT`).
async fn is_probe(stream: &TcpStream, probes: &[&[u8]]) -> bool {
    let look = async {
        let mut buf = [0u8; 24];
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            let seen = &buf[..n];
            if probes.iter().any(|p| seen.starts_with(p)) {
                return true;
            }
            if n == buf.len() || !probes.iter().any(|p| p.starts_with(seen)) {
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
pub async fn accept(listener: &TcpListener, transport: &'static str) -> TcpStream {
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
    events: Arc<dyn ConnectionEvents>,
    header_timeout: Duration,
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// Serves the connection until it closes (a reserve connection: one request).
    async fn run(mut self, stream: TcpStream, permit: OwnedSemaphorePermit, keep_alive: bool) {
        self.events.opened();
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
                self.events.header_timed_out();
                tracing::debug!("connection closed: no complete request header within its timeout");
            } else {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        self.events.closed();
        drop(permit);
    }
}
