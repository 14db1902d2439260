//! gRPC's guards before bytes: a call of a known method is checked before tonic decodes its
//! message. In order: the token (from the `authorization` metadata, for the methods that need
//! one), the message read whole under `--max-body-bytes` and the server's budget of body bytes
//! in flight (`crate::intake`) within `--request-timeout` (a stream that trickles is cut off
//! then, and graceful shutdown does not wait on it longer), the message walked as protobuf
//! without allocating (`super::scan`): more pairs than `--max-pairs` are refused, and so is a
//! message that would decode into more than the budget; what it decodes into is held against
//! the budget until its answer is made.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use super::scan::{self, Schema};
use crate::error::Failure;
use crate::intake::Held;
use crate::state::AppState;

/// A method the services serve: its path, the schema of its request, whether it needs the
/// token under `--protect-reads`, and whether its message may be as long as a body
/// (`--max-body-bytes`) or is a few names (`SMALL_MESSAGE_BYTES`).
struct Method {
    path: &'static str,
    schema: &'static Schema,
    protected: bool,
    large: bool,
}

/// The longest message of a method whose request holds a model's name or nothing.
pub const SMALL_MESSAGE_BYTES: usize = 64 * 1024;

const METHODS: &[Method] = &[
    Method {
        path: super::duet::PREDICT,
        schema: &scan::PREDICT_REQUEST,
        large: true,
        protected: true,
    },
    Method {
        path: super::kserve::MODEL_INFER,
        schema: &scan::MODEL_INFER_REQUEST,
        large: true,
        protected: true,
    },
    Method {
        path: super::kserve::MODEL_METADATA,
        schema: &scan::MODEL_NAME_REQUEST,
        large: false,
        protected: true,
    },
    Method {
        path: super::kserve::MODEL_READY,
        schema: &scan::MODEL_NAME_REQUEST,
        large: false,
        protected: false,
    },
    Method {
        path: super::kserve::SERVER_LIVE,
        schema: &scan::EMPTY_REQUEST,
        large: false,
        protected: false,
    },
    Method {
        path: super::kserve::SERVER_READY,
        schema: &scan::EMPTY_REQUEST,
        large: false,
        protected: false,
    },
    Method {
        path: super::kserve::SERVER_METADATA,
        schema: &scan::EMPTY_REQUEST,
        large: false,
        protected: false,
    },
];

/// The gRPC frame's header: a compression flag and the message's length.
const FRAME_HEADER: usize = 5;

/// The middleware around both services. A path no service serves goes on to tonic, which
/// answers `UNIMPLEMENTED` without reading the message.
pub async fn intake(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let start = Instant::now();
    let path = request.uri().path();
    let Some(method) = METHODS.iter().find(|m| m.path == path) else {
        return next.run(request).await;
    };
    match admit(&state, method, request).await {
        Ok((request, held)) => {
            let response = next.run(request).await;
            drop(held);
            response
        }
        Err(failure) => {
            state.metrics.request(
                method.path,
                failure.status.as_u16(),
                start.elapsed().as_secs_f64(),
            );
            if failure.status.is_server_error() && !failure.logged {
                tracing::warn!(route = method.path, error = %failure.error, "request refused");
            }
            super::status(&failure).into_http::<Body>()
        }
    }
}

async fn admit(
    state: &AppState,
    method: &Method,
    request: Request,
) -> Result<(Request, Held), Failure> {
    if method.protected {
        state.access.read(request.headers())?;
    }
    let (parts, body) = request.into_parts();
    let (limit, flag) = if method.large {
        (state.config.max_body_bytes, "--max-body-bytes")
    } else {
        (
            SMALL_MESSAGE_BYTES,
            "the limit of a request that names a model",
        )
    };
    let limit_s = state.config.request_timeout.as_secs_f64();
    let read = tokio::time::timeout(
        state.config.request_timeout,
        crate::intake::read(
            body,
            limit.saturating_add(FRAME_HEADER),
            flag,
            &state.body_budget,
        ),
    )
    .await
    .map_err(|_| {
        state
            .metrics
            .guards
            .timeouts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Failure::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the message did not arrive within the server's limit of {limit_s} s \
                 (--request-timeout)"
            ),
        )
    })?;
    // The limit is the message's; its frame's header comes on top.
    let (bytes, mut held) = read.map_err(|f| {
        if f.status == StatusCode::PAYLOAD_TOO_LARGE {
            crate::error::too_large(limit, flag)
        } else {
            f
        }
    })?;
    let message = message(&bytes)?;
    let scan = scan::scan(method.schema, message).map_err(|m| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            format!("the message is not valid protobuf: {}", m.0),
        )
    })?;
    // A group's jobs count here as pairs would; the exact count (a group of k jobs is its
    // k(k-1)/2 pairs) is checked once the message is decoded.
    let count = |name: &str| scan.counts.get(name).copied().unwrap_or(0);
    if count("pairs") + count("group_jobs") > state.config.max_pairs {
        return Err(crate::service::predict::over_pairs(state.config.max_pairs));
    }
    let budget = state.body_budget.max();
    if scan.decoded_bytes > budget {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the message would decode into about {} bytes, more than the server's budget of \
                 {budget} bytes in flight (--max-inflight-body-bytes)",
                scan.decoded_bytes
            ),
        ));
    }
    state.body_budget.take(&mut held, scan.decoded_bytes)?;
    Ok((Request::from_parts(parts, Body::from(bytes)), held))
}

/// The one message of a unary call, from its frame.
fn message(bytes: &[u8]) -> Result<&[u8], Failure> {
    let bad = |why: &str| Failure::new(StatusCode::BAD_REQUEST, why.to_string());
    if bytes.len() < FRAME_HEADER {
        return Err(bad("the call carries no whole gRPC message"));
    }
    if bytes[0] != 0 {
        return Err(bad(
            "the message is compressed; the server accepts uncompressed messages only",
        ));
    }
    let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    let message = &bytes[FRAME_HEADER..];
    if message.len() != len {
        return Err(bad(
            "a unary call carries one gRPC message, whole: its length does not match its frame",
        ));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_whole_uncompressed_message() {
        assert_eq!(message(&[0, 0, 0, 0, 2, 7, 8]).expect("message"), &[7, 8]);
        assert_eq!(message(&[0, 0, 0, 0, 0]).expect("empty"), &[] as &[u8]);
        for bad in [&[0u8, 0, 0][..], &[1, 0, 0, 0, 1, 9], &[0, 0, 0, 0, 3, 1]] {
            let e = message(bad).expect_err("refused");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }
}
