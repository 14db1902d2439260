//! duet on Kubernetes: pods that ask for GPUs placed by duet's prices on an unmodified cluster.
//!
//! Two ways in, one judgement: `duet extender` answers the stock kube-scheduler's extender calls
//! (a pod at a time), `duet schedule` is a second scheduler that runs the pricing loop's round
//! over every pending pod at once. Both keep their own view of the cluster from watches
//! (`watch.rs`, `cluster.rs`), read nodes through a mapping file (`devices.rs`), read what a pod
//! is from its annotations and record where it went on its binding (`contract.rs`, `bind.rs`),
//! and value a place by the pricing loop's rule (`placement.rs`), with the server's predictions.

pub mod access;
pub mod bind;
pub mod call_args;
pub mod cluster;
pub mod contract;
pub mod devices;
pub mod extender;
pub mod known;
pub mod listen;
pub mod metrics;
pub mod placement;
pub mod quantity;
pub mod schedule;
pub mod watch;
pub mod wire;

use anyhow::{Context, Result};
use std::path::Path;

/// A client of the API server: the kubeconfig at `path`, else the usual places (`KUBECONFIG`,
/// `~/.kube/config`, the pod's service account).
pub async fn client(path: Option<&Path>) -> Result<kube::Client> {
    let config = match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not in a pod")?,
    };
    kube::Client::try_from(config).context("the Kubernetes client")
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
