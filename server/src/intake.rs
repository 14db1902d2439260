//! A request's body brought into memory before any place of work is taken for it, under a
//! budget of body bytes in flight for the whole server (`--max-inflight-body-bytes`), so that a
//! slow sender holds only the bytes it has sent, never a place of model work, and many fast
//! large bodies at once are refused (503 naming the flag) rather than held in memory together.
//!
//! A request holds its share of the budget from its first byte until its answer is made
//! (`Held`): the bytes, and for gRPC what its message decodes into, live that long.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Failure, RETRY_AFTER_S, too_large};

/// The bytes in flight, for the whole server.
#[derive(Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    max: usize,
    /// Bodies refused because the budget was spent (`/metrics`).
    pub refused: std::sync::atomic::AtomicU64,
}

/// A request's share of the budget, given back when dropped.
#[derive(Debug, Default)]
pub struct Held(Vec<OwnedSemaphorePermit>);

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|p| p.num_permits()).sum()
    }
}

impl BodyBudget {
    pub fn new(max_bytes: usize) -> BodyBudget {
        let max = max_bytes.clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(max)),
            max,
            refused: std::sync::atomic::AtomicU64::new(0),
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

    /// `n` more bytes for `held`, at once, or the 503 of a spent budget.
    pub fn take(&self, held: &mut Held, n: usize) -> Result<(), Failure> {
        if n == 0 {
            return Ok(());
        }
        let units = u32::try_from(n).unwrap_or(u32::MAX);
        match self.bytes.clone().try_acquire_many_owned(units) {
            Ok(permit) => {
                held.0.push(permit);
                Ok(())
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    budget = self.max,
                    wanted = n,
                    "request refused: the server's budget of body bytes in flight is spent"
                );
                let mut failure = Failure::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the server holds its limit of {} bytes of request bodies in flight \
                         (--max-inflight-body-bytes); retry after {} s",
                        self.max, RETRY_AFTER_S
                    ),
                );
                failure.logged = true;
                Err(failure)
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

/// Reads `body` whole, at most `limit` bytes (413 naming `flag` past it), each frame's bytes
/// taken from `budget` as they arrive (503 once it is spent). A body cut off by the idle
/// timeout is answered 408; one whose client went away, 400.
pub async fn read(
    body: Body,
    limit: usize,
    flag: &str,
    budget: &BodyBudget,
) -> Result<(Bytes, Held), Failure> {
    let mut held = Held::default();
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    let mut read = 0usize;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| body_error(&e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read = read.saturating_add(data.len());
        if read > limit {
            return Err(too_large(limit, flag));
        }
        budget.take(&mut held, data.len())?;
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

/// A body that could not be read: the idle timeout's 408, or the client's failure.
fn body_error(e: &axum::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return crate::error::paused();
        }
        source = err.source();
    }
    Failure::new(
        StatusCode::BAD_REQUEST,
        format!("the body could not be read: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_takes_its_bytes_and_gives_them_back() {
        let budget = BodyBudget::new(100);
        let (bytes, held) = read(Body::from("0123456789"), 50, "--max-body-bytes", &budget)
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"0123456789");
        assert_eq!((held.bytes(), budget.in_flight()), (10, 10));
        drop(held);
        assert_eq!(budget.in_flight(), 0);
    }

    #[tokio::test]
    async fn over_the_limit_is_413_and_over_the_budget_503() {
        let budget = BodyBudget::new(8);
        let e = read(Body::from("0123456789"), 5, "--max-body-bytes", &budget)
            .await
            .expect_err("too long");
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.error.contains("--max-body-bytes"), "{}", e.error);
        let e = read(Body::from("0123456789"), 50, "--max-body-bytes", &budget)
            .await
            .expect_err("over budget");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.error.contains("--max-inflight-body-bytes"), "{}", e.error);
        assert_eq!(budget.in_flight(), 0, "a refused body gives its bytes back");
        assert_eq!(budget.refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn frames_are_joined() {
        let budget = BodyBudget::new(100);
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"ab")),
            Ok(Bytes::from_static(b"cd")),
            Ok(Bytes::from_static(b"e")),
        ];
        let body = Body::from_stream(tokio_stream::iter(chunks));
        let (bytes, held) = read(body, 50, "--max-body-bytes", &budget)
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"abcde");
        assert_eq!(held.bytes(), 5);
    }
}
