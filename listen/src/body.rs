//! A request's body brought into memory whole before any work is done for it: under its limit
//! (a listener's `--max-body-bytes`), and under a budget of body bytes in flight for the whole
//! listener (`--max-inflight-body-bytes`), each frame's bytes taken from the budget as they
//! arrive, so that a slow sender holds only the bytes it has sent and many large bodies at once
//! are refused rather than held together.
//!
//! A request holds its share of the budget from its first byte until its answer is made
//! (`Held`). What a refusal is answered with (the server's `Failure`, the extender's JSON
//! error) and how it is counted is the listener's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes, HttpBody};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The body bytes in flight, for a whole listener.
#[derive(Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    max: usize,
    /// Bodies refused because the budget was spent.
    pub refused: AtomicU64,
}

/// A request's share of the budget, given back when dropped: one permit however many frames
/// its body came in (a body of a million one-byte chunks holds one, not a million).
#[derive(Debug, Default)]
pub struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

/// The budget was spent: `max` bytes are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSpent {
    pub max: usize,
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// It passed the limit (`limit` bytes).
    TooLarge { limit: usize },
    /// The budget of bytes in flight was spent.
    BudgetSpent(BudgetSpent),
    /// It paused longer than the listener's idle timeout (tower-http's `RequestBodyTimeout`).
    Paused,
    /// The client's failure (a connection gone, a malformed chunk): what went wrong.
    Broken(String),
}

impl BodyBudget {
    pub fn new(max_bytes: usize) -> BodyBudget {
        let max = max_bytes.clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(max)),
            max,
            refused: AtomicU64::new(0),
        }
    }

    /// The budget, bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes held by requests now.
    pub fn in_flight(&self) -> usize {
        self.max - self.bytes.available_permits()
    }

    /// `n` more bytes for `held`, at once, or the budget is spent (counted in `refused`).
    pub fn take(&self, held: &mut Held, n: usize) -> Result<(), BudgetSpent> {
        if n == 0 {
            return Ok(());
        }
        let units = u32::try_from(n).unwrap_or(u32::MAX);
        match self.bytes.clone().try_acquire_many_owned(units) {
            Ok(permit) => {
                match &mut held.0 {
                    Some(mine) => mine.merge(permit),
                    None => held.0 = Some(permit),
                }
                Ok(())
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    budget = self.max,
                    wanted = n,
                    "body refused: the budget of body bytes in flight is spent"
                );
                Err(BudgetSpent { max: self.max })
            }
        }
    }
}

/// The body length a request's headers declare, if they declare one.
pub fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads `body` whole, at most `limit` bytes, each frame's bytes taken from `budget` as they
/// arrive.
pub async fn read(body: Body, limit: usize, budget: &BodyBudget) -> Result<(Bytes, Held), Unread> {
    let mut held = Held::default();
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    let mut read = 0usize;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| unread(&e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read = read.saturating_add(data.len());
        if read > limit {
            return Err(Unread::TooLarge { limit });
        }
        budget
            .take(&mut held, data.len())
            .map_err(Unread::BudgetSpent)?;
        // One frame (the common case of a small body) is kept as it came, without a copy.
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            Some(f) => {
                rest.reserve(f.len() + data.len());
                rest.extend_from_slice(&f);
                rest.extend_from_slice(&data);
            }
            None => rest.extend_from_slice(&data),
        }
    }
    let bytes = first.unwrap_or_else(|| Bytes::from(rest));
    Ok((bytes, held))
}

/// A body that could not be read: the idle timeout's, or the client's failure.
fn unread(e: &axum::Error) -> Unread {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return Unread::Paused;
        }
        source = err.source();
    }
    Unread::Broken(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_takes_its_bytes_and_gives_them_back() {
        let budget = BodyBudget::new(100);
        let (bytes, held) = read(Body::from("0123456789"), 50, &budget)
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"0123456789");
        assert_eq!((held.bytes(), budget.in_flight()), (10, 10));
        drop(held);
        assert_eq!(budget.in_flight(), 0);
    }

    #[tokio::test]
    async fn over_the_limit_or_the_budget_is_refused() {
        let budget = BodyBudget::new(8);
        let e = read(Body::from("0123456789"), 5, &budget)
            .await
            .expect_err("too long");
        assert_eq!(e, Unread::TooLarge { limit: 5 });
        let e = read(Body::from("0123456789"), 50, &budget)
            .await
            .expect_err("over budget");
        assert_eq!(e, Unread::BudgetSpent(BudgetSpent { max: 8 }));
        assert_eq!(budget.in_flight(), 0, "a refused body gives its bytes back");
        assert_eq!(budget.refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn frames_are_joined_and_held_as_one_permit() {
        let budget = BodyBudget::new(100);
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"ab")),
            Ok(Bytes::from_static(b"cd")),
            Ok(Bytes::from_static(b"e")),
        ];
        let body = Body::from_stream(tokio_stream::iter(chunks));
        let (bytes, held) = read(body, 50, &budget).await.expect("read");
        assert_eq!(&bytes[..], b"abcde");
        assert_eq!((held.bytes(), budget.in_flight()), (5, 5));
        drop(held);
        assert_eq!(budget.in_flight(), 0);
    }
}
