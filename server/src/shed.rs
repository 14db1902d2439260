//! Load shedding: a bound on the model work in flight (predictions, KServe inference,
//! observations, drift). There are `--max-inflight` places of work, one per core by default. A
//! request takes its places once its body is in memory (`crate::intake`, under the server's
//! budget of body bytes in flight): one, or, where its work is split over every core (a body of
//! at least `WHOLE_BODY_BYTES`), as many places as there are cores (at most all of them),
//! given back down to what the parsed request needs
//! (`Work::fit`). With too few free it waits, its places counted against `--max-queue`;
//! beyond that it is answered 503 at once, with `Retry-After`. So a request that runs on every
//! core runs alone: accepted work keeps its unloaded latency plus at most the queue's wait,
//! rather than sharing the cores with every other admitted request.
//!
//! Places are held until the work ends, on whatever thread, so a request whose client timed
//! out or went away still counts until its work stops, which it does at its next chunk: the
//! request's `Work` is marked given up when its answer is no longer awaited.
//!
//! Also here: the counters of what the guards refused (shed requests, timeouts, panics, work
//! given up, connections over the limit, headers too slow), rendered into `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Failure, RETRY_AFTER_S};

/// The cores this process may use (its cgroup's CPU limit included), read once: the standard
/// library reads the cgroup's files on every call, tens of microseconds.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

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

    /// Places whose work runs now.
    pub fn running(&self) -> usize {
        self.max_running - self.running.available_permits()
    }

    /// Places waited for.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The places of work split over every core: one per core, at most all of them.
    pub fn whole(&self) -> usize {
        cores().clamp(1, self.max_running)
    }

    /// The places of `units` pairs or rows of work, split over every core from `parallel_from`.
    pub fn places_for(&self, units: usize, parallel_from: usize) -> usize {
        if units >= parallel_from {
            self.whole()
        } else {
            1
        }
    }

    /// `places` at once, or after waiting with at most `max_waiting` places waited for in all;
    /// `None`: shed. Waiters are served in order (the semaphore is fair), so a request of every
    /// core is not passed over by single places.
    async fn enter(&self, places: usize) -> Option<OwnedSemaphorePermit> {
        let places = places.clamp(1, self.max_running);
        let n = u32::try_from(places).unwrap_or(u32::MAX);
        if let Ok(permit) = self.running.clone().try_acquire_many_owned(n) {
            return Some(permit);
        }
        if self.waiting.fetch_add(places, Ordering::AcqRel) + places > self.max_waiting {
            self.waiting.fetch_sub(places, Ordering::AcqRel);
            return None;
        }
        // Leaves the queue however the wait ends (its places, or the request given up).
        struct Waiting<'a>(&'a AtomicUsize, usize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(self.1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting, places);
        self.running.clone().acquire_many_owned(n).await.ok()
    }
}

/// A body at least this long takes one place per core once it is read: at 128 bytes a pair,
/// twice a pair by workload id, it holds over 2,048 pairs, which are split over the cores. A shorter one takes one place, so that mid-sized requests (a few
/// thousand pairs at most) are admitted as many at once as before; one of them that does hold
/// 2,048 pairs or more still splits over the cores.
pub const WHOLE_BODY_BYTES: usize = 256 * 1024;

/// One admitted request's place, shared by its handler and the threads doing its work.
#[derive(Debug, Clone)]
pub struct Work(Arc<Place>);

#[derive(Debug)]
struct Place {
    permit: std::sync::Mutex<OwnedSemaphorePermit>,
    given_up: AtomicBool,
}

impl Work {
    /// Gives back the places beyond `places` (at least one is kept), once the request is
    /// parsed and what its work needs is known.
    pub fn fit(&self, places: usize) {
        let mut permit = self
            .0
            .permit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = permit.num_permits();
        let keep = places.max(1);
        if held > keep {
            drop(permit.split(held - keep));
        }
    }

    /// Places held now.
    pub fn places(&self) -> usize {
        self.0
            .permit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .num_permits()
    }

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

/// `places` of model work for a request on `route`, or the 503 of a server at its limit
/// (counted in `counters` and logged here). They are held while the returned `Work` or a clone
/// lives.
pub async fn take(
    limiter: &Limiter,
    counters: &Counters,
    route: &str,
    places: usize,
) -> Result<Work, Failure> {
    let Some(permit) = limiter.enter(places).await else {
        counters.shed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            route,
            running = limiter.max_running,
            waiting = limiter.max_waiting,
            "request shed: the server is at its limit of work in flight"
        );
        let mut failure = Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the server is at its limit of {} places of work in flight and {} waiting \
                 (--max-inflight, --max-queue); retry after {RETRY_AFTER_S} s",
                limiter.max_running, limiter.max_waiting
            ),
        );
        failure.logged = true;
        return Err(failure);
    };
    Ok(Work(Arc::new(Place {
        permit: std::sync::Mutex::new(permit),
        given_up: AtomicBool::new(false),
    })))
}

/// The places a body of `bytes` takes once it is read: every core's from `WHOLE_BODY_BYTES`,
/// else one.
pub fn places_for_body(limiter: &Limiter, bytes: usize) -> usize {
    if bytes < WHOLE_BODY_BYTES {
        1
    } else {
        limiter.whole()
    }
}

/// A refusal's answer; a 503 asks the client to retry after `RETRY_AFTER_S`.
pub fn shed_response(failure: Failure) -> Response {
    let unavailable = failure.status == StatusCode::SERVICE_UNAVAILABLE;
    let mut response = failure.into_response();
    if unavailable {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    }
    response
}

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
        let first = limiter.enter(1).await.expect("a place");
        assert_eq!((limiter.running(), limiter.waiting()), (1, 0));
        // The second waits; the third finds the queue full and is shed at once.
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.enter(1).await.is_some() })
        };
        while limiter.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(limiter.enter(1).await.is_none());
        drop(first);
        assert!(waiter.await.expect("waiter"));
        assert_eq!((limiter.running(), limiter.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_request_of_every_core_runs_alone_and_waits_with_its_places() {
        let limiter = Arc::new(Limiter::new(4, 4));
        let small = limiter.enter(1).await.expect("one place");
        // Four places cannot all be had while one is taken: the large request waits with
        // four places counted, so a second large one finds the queue full.
        let large = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.enter(4).await.map(|p| p.num_permits()) })
        };
        while limiter.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(limiter.waiting(), 4);
        assert!(limiter.enter(4).await.is_none());
        assert!(
            limiter.enter(1).await.is_none(),
            "the queue holds four places"
        );
        drop(small);
        assert_eq!(large.await.expect("large"), Some(4));
        // More places than there are: capped at all of them, never waiting for ever.
        let all = limiter.enter(9).await.expect("all places");
        assert_eq!(all.num_permits(), 4);
    }

    #[tokio::test]
    async fn work_gives_back_the_places_it_does_not_need() {
        let limiter = Limiter::new(2, 0);
        let permit = limiter.enter(2).await.expect("two places");
        let work = Work(Arc::new(Place {
            permit: std::sync::Mutex::new(permit),
            given_up: AtomicBool::new(false),
        }));
        assert_eq!((work.places(), limiter.running()), (2, 2));
        work.fit(1);
        assert_eq!((work.places(), limiter.running()), (1, 1));
        work.fit(0);
        assert_eq!(work.places(), 1, "one place is kept");
        drop(work);
        assert_eq!(limiter.running(), 0);
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
