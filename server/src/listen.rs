//! The server's connections: duet's connection loop (`duet-listen`: hyper's header-read
//! timeout, `--header-timeout`; a limit on open connections, `--max-connections`; a reserve of
//! `duet_listen::PROBE_RESERVE` beyond it that only probes may use, so that `/healthz`,
//! `/readyz`, `/metrics` and the KServe health routes stay answerable while clients hold every
//! connection; a drain on shutdown), with what happens to them counted for `/metrics`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use duet_listen::{ConnectionEvents, ConnectionLimits};
use tokio::net::TcpListener;

use crate::shed::Counters;
use crate::state::AppState;

/// Request lines a connection in the reserve may start with.
const PROBES: [&[u8]; 5] = [
    b"GET /healthz",
    b"GET /readyz",
    b"GET /metrics",
    b"GET /v2/health/live",
    b"GET /v2/health/ready",
];

/// Serves `app` on `listener` until `shutdown` resolves, then lets open connections finish:
/// duet's connection loop (`duet-listen`) under `--max-connections` and `--header-timeout`,
/// its connections counted in `/metrics`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: &Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limits = ConnectionLimits {
        max_connections: state.config.max_connections,
        header_timeout: state.config.header_timeout,
        probes: &PROBES,
    };
    let events = Arc::new(Counted(state.clone()));
    duet_listen::serve(listener, app, &limits, events, shutdown).await;
    Ok(())
}

/// The server's guard counters, told what happens to connections.
struct Counted(Arc<AppState>);

impl Counted {
    fn counters(&self) -> &Counters {
        &self.0.metrics.guards
    }
}

impl ConnectionEvents for Counted {
    fn refused(&self) {
        self.counters()
            .connections_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    fn opened(&self) {
        self.counters()
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
    }

    fn closed(&self) {
        self.counters()
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }

    fn header_timed_out(&self) {
        self.counters()
            .header_timeouts
            .fetch_add(1, Ordering::Relaxed);
    }
}
