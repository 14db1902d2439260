//! Keeps a replica's registry in memory in step with a shared store (PostgreSQL): a task that
//! connects, listens for other replicas' writes, catches up from the last sequence number it
//! applied, polls as a safeguard, and reconnects after a loss. The prediction path never waits
//! on it: predictions read the registry in memory, which this task updates under a short write
//! lock only when there are changes.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::store::{PostgresStore, Store, StoreError};

/// What the catch-up task keeps in step: a replica's registry in memory over its store.
pub trait Replica: Send + Sync + 'static {
    /// The shared store, when it is PostgreSQL (the task has nothing to do otherwise).
    fn postgres(&self) -> Option<&PostgresStore>;
    /// Where the registry stands against the store.
    fn sync_status(&self) -> &SyncStatus;
    /// Applies every change committed since the last one applied.
    fn catch_up(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// How often a replica asks the database for changes it was not notified of: the bound on
/// propagation when a notification is lost.
pub const POLL: Duration = Duration::from_millis(250);
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Where the registry stands against its store: `/readyz` and `/metrics` report it.
#[derive(Debug, Default)]
pub struct SyncStatus {
    /// The highest sequence number applied from the store.
    seq: AtomicI64,
    last_sync: RwLock<Option<Instant>>,
    errors: AtomicU64,
    /// Why the store cannot be used, while it cannot.
    degraded: RwLock<Option<String>>,
}

impl SyncStatus {
    pub fn seq(&self) -> i64 {
        self.seq.load(Ordering::Acquire)
    }

    pub(crate) fn advance(&self, seq: i64) {
        self.seq.fetch_max(seq, Ordering::AcqRel);
    }

    pub(crate) fn synced(&self) {
        if let Ok(mut t) = self.last_sync.write() {
            *t = Some(Instant::now());
        }
        if let Ok(mut d) = self.degraded.write() {
            *d = None;
        }
    }

    /// Counts a database error; `degrade` also marks the registry degraded with it.
    pub(crate) fn failed(&self, error: &StoreError, degrade: bool) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if degrade && let Ok(mut d) = self.degraded.write() {
            *d = Some(error.to_string());
        }
    }

    pub fn degraded(&self) -> Option<String> {
        self.degraded.read().ok().and_then(|d| d.clone())
    }

    /// Seconds since the last successful catch-up.
    pub fn last_sync_age(&self) -> Option<f64> {
        self.last_sync
            .read()
            .ok()
            .and_then(|t| t.map(|t| t.elapsed().as_secs_f64()))
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// Runs for the server's life when the store is PostgreSQL. `rx` is the notification stream of
/// a connection `AppState::start` already made, if it could.
pub async fn run<R: Replica>(
    state: Arc<R>,
    mut rx: Option<tokio::sync::mpsc::UnboundedReceiver<Option<i64>>>,
) {
    let Some(pg) = state.postgres() else {
        return;
    };
    let mut backoff = POLL;
    // The last failed attempt's error: a new one is logged, the same one again is not.
    let mut last_error = String::new();
    loop {
        let mut notifications = match rx.take() {
            Some(r) => r,
            None => match pg.connect().await {
                Ok(r) => {
                    last_error.clear();
                    tracing::info!(database = %pg.target(), "registry database connected");
                    r
                }
                Err(e) => {
                    let why = e.to_string();
                    pg.disconnected(&why);
                    if why != last_error {
                        tracing::warn!(error = %why, "registry database connection attempt failed; retrying");
                        last_error = why;
                    }
                    state.sync_status().failed(&e, true);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let lost = loop {
            let woke = tokio::select! {
                msg = notifications.recv() => msg.is_some(),
                _ = poll.tick() => true,
            };
            if !woke {
                break StoreError::Unavailable(format!(
                    "{}: the connection was closed",
                    pg.target()
                ));
            }
            // One catch-up answers every notification that arrived meanwhile.
            while notifications.try_recv().is_ok() {}
            if let Err(e) = state.catch_up().await {
                break e;
            }
            backoff = POLL;
        };
        tracing::warn!(error = %lost, "registry database lost; serving the last synced registry");
        pg.disconnected(&lost.to_string());
        state.sync_status().failed(&lost, true);
        tokio::time::sleep(backoff).await;
    }
}
