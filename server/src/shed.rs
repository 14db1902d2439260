//! Load shedding: a bound on the model work in flight (predictions, KServe inference,
//! observations, drift). A request takes one of `--max-inflight` places before its body is read;
//! with none free it waits, one of at most `--max-queue`; beyond that it is answered 503 at once,
//! with `Retry-After`. A place is held until the work ends, on whatever thread, so a request
//! whose client timed out or went away still counts until its work stops, which it does at its
//! next chunk: the request's `Work` is marked given up when its answer is no longer awaited.
//!
//! Also here: the counters of what the guards refused (shed requests, timeouts, panics, work
//! given up, connections over the limit, headers too slow), rendered into `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Failure;
use crate::state::AppState;

/// Seconds a shed client is asked to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// The places of model work: running and waiting.
#[derive(Debug)]
pub struct Limiter {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_running: usize,
    max_waiting: usize,
}

impl Limiter {
    pub fn new(max_running: usize, max_waiting: usize) -> Limiter {
        let max_running = max_running.max(1);
        Limiter {
            running: Arc::new(Semaphore::new(max_running)),
            waiting: AtomicUsize::new(0),
            max_running,
            max_waiting,
        }
    }

    /// Requests whose work runs now.
    pub fn running(&self) -> usize {
        self.max_running - self.running.available_permits()
    }

    /// Requests waiting for a place.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A place at once, or after waiting as one of at most `max_waiting`; `None`: shed.
    async fn enter(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.running.clone().try_acquire_owned() {
            return Some(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // Leaves the queue however the wait ends (a place, or the request given up).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        self.running.clone().acquire_owned().await.ok()
    }
}

/// Longest a shed request's body is read for, before its answer.
const DRAIN_FOR: Duration = Duration::from_secs(2);

/// Reads and drops `body`, at most `limit` bytes and `DRAIN_FOR`.
async fn drain(body: Body, limit: usize) {
    let mut body = std::pin::pin!(body);
    let mut read = 0usize;
    let all = std::future::poll_fn(|cx| {
        loop {
            match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    read += frame.data_ref().map_or(0, Bytes::len);
                    if read > limit {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    });
    let _ = tokio::time::timeout(DRAIN_FOR, all).await;
}

/// One admitted request's place, shared by its handler and the threads doing its work.
#[derive(Debug, Clone)]
pub struct Work(Arc<Place>);

#[derive(Debug)]
struct Place {
    _permit: OwnedSemaphorePermit,
    given_up: AtomicBool,
}

impl Work {
    /// Set once nobody awaits the answer: work checks it between chunks.
    pub fn cancelled(&self) -> &AtomicBool {
        &self.0.given_up
    }
}

/// Marks the work given up when the request's future is dropped before its answer.
#[derive(Debug)]
pub struct GiveUpOnDrop(Option<Work>);

impl GiveUpOnDrop {
    pub fn new(work: Work) -> GiveUpOnDrop {
        GiveUpOnDrop(Some(work))
    }

    /// Answered: nothing is left to give up.
    pub fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        if let Some(work) = self.0.take() {
            work.0.given_up.store(true, Ordering::Relaxed);
        }
    }
}

/// The middleware of `/v1/predict`: a request whose declared body is at most `small_bytes`
/// (a few dozen pairs) is answered at once on the async worker that reads it, without a place:
/// its work is bounded by the workers themselves, and a flood of large requests never sheds
/// the small ones. Any other takes a place (`admit`).
pub async fn admit_unless_small(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= crate::routes::predict::INLINE_BODY_BYTES);
    if small {
        next.run(request).await
    } else {
        admit(State(state), request, next).await
    }
}

/// A place of model work for a request on `route`, or the 503 of a server at its limit
/// (counted and logged here). The place is held while the returned `Work` or a clone lives.
pub async fn take(state: &AppState, route: &str) -> Result<Work, Failure> {
    let Some(permit) = state.limiter.enter().await else {
        state.metrics.guards.shed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            route,
            running = state.limiter.max_running,
            waiting = state.limiter.max_waiting,
            "request shed: the server is at its limit of work in flight"
        );
        let mut failure = Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the server is at its limit of {} requests in flight and {} waiting \
                 (--max-inflight, --max-queue); retry after {RETRY_AFTER_S} s",
                state.limiter.max_running, state.limiter.max_waiting
            ),
        );
        failure.logged = true;
        return Err(failure);
    };
    Ok(Work(Arc::new(Place {
        _permit: permit,
        given_up: AtomicBool::new(false),
    })))
}

/// The middleware of the model routes: a place, or 503 with `Retry-After`.
pub async fn admit(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let work = match take(&state, route).await {
        Ok(work) => work,
        Err(failure) => {
            let mut response = failure.into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            // Read to its end (never kept) so that the client, still sending, hears the
            // answer rather than a reset, as a proxy's lingering close does.
            drain(request.into_body(), state.config.max_body_bytes).await;
            return response;
        }
    };
    request.extensions_mut().insert(work.clone());
    let guard = GiveUpOnDrop::new(work);
    let response = next.run(request).await;
    guard.answered();
    response
}

/// A response whose event was already logged (and counted) where it happened: the request log
/// does not repeat it.
#[derive(Debug, Clone, Copy)]
pub struct Logged;

/// What the guards refused or stopped, for `/metrics` (`metrics::Scrape` reads them).
#[derive(Debug, Default)]
pub struct Counters {
    pub shed: AtomicU64,
    pub timeouts: AtomicU64,
    pub panics: AtomicU64,
    pub given_up: AtomicU64,
    pub connections_open: AtomicU64,
    pub connections_refused: AtomicU64,
    pub header_timeouts: AtomicU64,
}

impl Counters {
    /// The answer of work stopped because nobody waits for it any more (nobody reads it
    /// either); counted.
    pub fn gave_up(&self) -> Failure {
        self.given_up.fetch_add(1, Ordering::Relaxed);
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the request was given up (its client went away or its time ran out)",
        )
    }

    /// A blocking task that did not finish: a panic (counted and logged once, 500), or the
    /// runtime shutting down.
    pub fn join_failure(&self, e: &tokio::task::JoinError, what: &str) -> Failure {
        if e.is_panic() {
            self.panicked(what)
        } else {
            Failure::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping")
        }
    }

    /// A panic caught in a request: counted, logged once, answered 500.
    pub fn panicked(&self, what: &str) -> Failure {
        self.panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(work = what, "a request's work panicked");
        let mut failure = Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: the {what} failed"),
        );
        failure.logged = true;
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn places_then_a_queue_then_shed() {
        let limiter = Arc::new(Limiter::new(1, 1));
        let first = limiter.enter().await.expect("a place");
        assert_eq!((limiter.running(), limiter.waiting()), (1, 0));
        // The second waits; the third finds the queue full and is shed at once.
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.enter().await.is_some() })
        };
        while limiter.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(limiter.enter().await.is_none());
        drop(first);
        assert!(waiter.await.expect("waiter"));
        assert_eq!((limiter.running(), limiter.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_panic_off_the_request_task_is_counted_and_answered_500() {
        let counters = Counters::default();
        let e = tokio::task::spawn_blocking(|| panic!("boom"))
            .await
            .expect_err("panicked");
        let failure = counters.join_failure(&e, "prediction");
        assert_eq!(failure.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(failure.logged);
        assert_eq!(counters.panics.load(Ordering::Relaxed), 1);
    }
}
