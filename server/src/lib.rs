//! duet's server: the axum app answering `/v1/predict` over a model loaded by `duet-model`, with
//! authentication, metrics, the durable registry store and the KServe aliases, and the same
//! predictions over gRPC (`grpc`). The only crate that serves HTTP or gRPC.
//!
//! `serve` binds nothing itself: it takes a listener, answers `/healthz` at once, loads and warms
//! the model in the background (`/readyz` turns 200 when it is in), reloads on SIGHUP and stops
//! gracefully on SIGTERM or Ctrl-C: `/readyz` turns 503, requests are served for
//! `--drain-seconds` more, then the listener closes and in-flight requests finish.

pub mod auth;
pub mod bounded;
pub mod drift;
pub mod error;
pub mod grpc;
pub mod intake;
pub mod lifecycle;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod openapi;
pub mod router;
pub mod routes;
pub mod service;
pub mod shed;
pub mod state;
pub mod store;
pub mod sync;
pub mod tensor_json;

use std::sync::Arc;

pub use duet_model::EngineKind;
pub use router::router;
pub use routes::predict::{answer, parse_request};
pub use state::{AppState, Config};

/// Serves `config` on `listener` until SIGTERM or Ctrl-C. Fails when the registry database
/// cannot be opened or the first model cannot be loaded.
pub async fn serve(config: Config, listener: tokio::net::TcpListener) -> Result<(), String> {
    serve_with_grpc(config, listener, None).await
}

/// `serve`, and gRPC on `grpc` where given (`duet serve --grpc-addr`): both stop together, after
/// the same drain.
pub async fn serve_with_grpc(
    config: Config,
    listener: tokio::net::TcpListener,
    grpc: Option<tokio::net::TcpListener>,
) -> Result<(), String> {
    let state = AppState::new(config)?;
    let app = router(state.clone());
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, "listening");
    let (fatal_tx, mut fatal_rx) = tokio::sync::oneshot::channel::<String>();
    let fatal = Arc::new(std::sync::Mutex::new(None::<String>));
    let fatal_seen = fatal.clone();
    let (drainer, drain) = (state.clone(), state.config.drain);
    let loader = state.clone();
    tokio::spawn(async move {
        if let Err(f) = loader.start().await {
            let _ = fatal_tx.send(f.error);
        }
    });
    spawn_sighup(state.clone());
    // gRPC stops when HTTP's listener closes: after the drain, or when the start failed.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        // The loader drops the sender once the first model is in: only a message stops us.
        let failed = async {
            match (&mut fatal_rx).await {
                Ok(m) => {
                    tracing::error!(error = %m, "cannot start");
                    if let Ok(mut f) = fatal_seen.lock() {
                        *f = Some(m);
                    }
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = terminated() => lifecycle::drain(&drainer.lifecycle, drain, terminated()).await,
            () = failed => {}
        }
        let _ = stop_tx.send(true);
    };
    let http = listen::serve(listener, app, &state, shutdown);
    match grpc {
        None => http.await.map_err(|e| e.to_string())?,
        Some(grpc) => {
            let stopped = async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            };
            let (http, grpc) = tokio::join!(http, grpc::serve(state.clone(), grpc, stopped));
            http.map_err(|e| e.to_string())?;
            grpc?;
        }
    }
    if state.is_ready() {
        tracing::info!("stopped");
        Ok(())
    } else {
        let why = fatal.lock().ok().and_then(|f| f.clone());
        Err(why.unwrap_or_else(|| "stopped before a model was loaded".into()))
    }
}

/// SIGTERM or Ctrl-C.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Reloads the model on every SIGHUP.
fn spawn_sighup(state: Arc<AppState>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("SIGHUP cannot be watched; reload with POST /v1/models/reload");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the model");
            let _ = state.reload(None).await;
        }
    });
    #[cfg(not(unix))]
    let _ = state;
}
