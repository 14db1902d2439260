//! The serving model's lifecycle beyond one load: reloads single-flight for their whole
//! duration (a second request for the model being loaded waits for that load and gets its
//! outcome; one for another model is refused 409), the fallback to the repository's `previous`
//! model when the configured one cannot be loaded at start, and the drain on SIGTERM
//! (`/readyz` 503 while in-flight requests finish).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::error::Failure;

/// The sibling of the configured model, in the model repository, that serves when the
/// configured model cannot be loaded at start: the model the retraining CronJob replaced.
pub const PREVIOUS: &str = "previous";

/// What a finished load gives every request that waited for it.
type Outcome = Option<Result<String, Failure>>;

/// A reload under way: the folder it loads, the name requests see, and its outcome once known.
#[derive(Debug)]
struct InFlight {
    /// The folder resolved (a `current` link to its target), to compare requests.
    resolved: PathBuf,
    name: String,
    done: tokio::sync::watch::Receiver<Outcome>,
}

/// Where the server stands beyond "a model is loaded".
#[derive(Debug, Default)]
pub struct Lifecycle {
    /// Set on SIGTERM: `/readyz` answers 503 from then on.
    draining: AtomicBool,
    /// Why the configured model is not the one serving, while the repository's `previous`
    /// serves instead: the configured model's load error (shown only with the token).
    fallback: Mutex<Option<String>>,
    /// The reload under way, if one is.
    reload: Mutex<Option<InFlight>>,
}

impl Lifecycle {
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// The configured model's load error while `previous` serves in its place.
    pub fn fallback(&self) -> Option<String> {
        self.fallback.lock().ok().and_then(|f| f.clone())
    }

    pub(crate) fn set_fallback(&self, why: Option<String>) {
        if let Ok(mut f) = self.fallback.lock() {
            *f = why;
        }
    }

    /// The name of the model being loaded, if a reload is under way.
    pub fn reloading(&self) -> Option<String> {
        self.reload
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|f| f.name.clone()))
    }
}

impl Lifecycle {
    /// Runs `load` of `dir` single-flight for the load's whole duration, whoever waits for it:
    /// the load runs in a task of its own, so a request that gives up (its time limit, a
    /// client gone) leaves it running and holding the slot. A request for the same folder
    /// meanwhile waits for that load and gets its outcome; one for another folder is refused
    /// 409, naming the model being loaded.
    pub async fn single_flight<F, L>(
        self: &Arc<Self>,
        dir: PathBuf,
        load: L,
    ) -> Result<String, Failure>
    where
        L: FnOnce(PathBuf) -> F,
        F: Future<Output = Result<String, Failure>> + Send + 'static,
    {
        let key = resolved(&dir);
        let mut done = {
            let mut slot = self.reload.lock().map_err(|_| {
                Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "reload lock poisoned")
            })?;
            match slot.as_ref() {
                Some(f) if f.resolved == key => f.done.clone(),
                Some(f) => {
                    return Err(Failure::new(
                        StatusCode::CONFLICT,
                        format!(
                            "model `{}` is being loaded; one reload at a time: retry `{}` when \
                             that one ends",
                            f.name,
                            model_name(&dir)
                        ),
                    ));
                }
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    *slot = Some(InFlight {
                        resolved: key,
                        name: model_name(&dir),
                        done: rx.clone(),
                    });
                    let loading = load(dir);
                    let lifecycle = self.clone();
                    tokio::spawn(async move {
                        let result = loading.await;
                        // The slot is freed and the outcome published together.
                        let mut slot = lifecycle.reload.lock();
                        if let Ok(slot) = slot.as_mut() {
                            **slot = None;
                        }
                        let _ = tx.send(Some(result));
                    });
                    rx
                }
            }
        };
        let outcome = done
            .wait_for(Option::is_some)
            .await
            .map_err(|_| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the reload ended without an outcome",
                )
            })?
            .clone();
        outcome.unwrap_or_else(|| {
            Err(Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the reload ended without an outcome",
            ))
        })
    }
}

/// A folder with its links resolved, for comparing two requests; itself where it cannot be.
pub fn resolved(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// How a request names a model folder: its name in the repository (the folder's name).
fn model_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// While draining, every answer asks its client to close the connection, so that keep-alive
/// clients reconnect (to another replica) instead of sending on a connection about to close.
pub async fn close_when_draining(
    State(lifecycle): State<Arc<Lifecycle>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if lifecycle.draining() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The drain after SIGTERM: `/readyz` answers 503 at once (the Service stops routing here),
/// requests keep being served for `drain`, then the listener closes and in-flight requests
/// finish. A second SIGTERM or Ctrl-C cuts the wait short.
pub async fn drain(lifecycle: &Lifecycle, drain: Duration, again: impl Future<Output = ()>) {
    lifecycle.start_draining();
    tracing::info!(
        drain_s = drain.as_secs_f64(),
        "shutting down: /readyz answers 503; closing the listener after the drain (--drain-seconds)"
    );
    tokio::select! {
        () = tokio::time::sleep(drain) => {}
        () = again => tracing::info!("signalled again: closing now"),
    }
    tracing::info!("closing the listener; finishing in-flight requests");
}
