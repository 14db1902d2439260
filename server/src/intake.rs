//! A request's body brought into memory before any place of work is taken for it, under a
//! budget of body bytes in flight for the whole server (`--max-inflight-body-bytes`):
//! `duet-listen`'s body intake (the Kubernetes extender's too), its refusals answered as the
//! server's failures, so that a slow sender holds only the bytes it has sent, never a place of
//! model work, and many fast large bodies at once are refused (503 naming the flag) rather than
//! held in memory together.
//!
//! A request holds its share of the budget from its first byte until its answer is made
//! (`Held`): the bytes, and for gRPC what its message decodes into, live that long.

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
pub use duet_listen::body::{BodyBudget, BudgetSpent, Held, declared_length};
use duet_listen::body::{Unread, read as read_whole};

use crate::error::{Failure, RETRY_AFTER_S, too_large};

/// Reads `body` whole, at most `limit` bytes (413 naming `flag` past it), each frame's bytes
/// taken from `budget` as they arrive (503 once it is spent). A body cut off by the idle
/// timeout is answered 408; one whose client went away, 400.
pub async fn read(
    body: Body,
    limit: usize,
    flag: &str,
    budget: &BodyBudget,
) -> Result<(Bytes, Held), Failure> {
    read_whole(body, limit, budget)
        .await
        .map_err(|unread| match unread {
            Unread::TooLarge { limit } => too_large(limit, flag),
            Unread::BudgetSpent(spent) => spent.into(),
            Unread::Paused => crate::error::paused(),
            Unread::Broken(e) => Failure::new(
                StatusCode::BAD_REQUEST,
                format!("the body could not be read: {e}"),
            ),
        })
}

/// The 503 of a spent budget, logged where it was spent.
impl From<BudgetSpent> for Failure {
    fn from(spent: BudgetSpent) -> Failure {
        let mut failure = Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the server holds its limit of {} bytes of request bodies in flight \
                 (--max-inflight-body-bytes); retry after {} s",
                spent.max, RETRY_AFTER_S
            ),
        );
        failure.logged = true;
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn over_the_limit_is_413_and_over_the_budget_503_naming_their_flags() {
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
        assert!(e.logged);
        let (bytes, _held) = read(Body::from("01234"), 50, "--max-body-bytes", &budget)
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"01234");
    }
}
