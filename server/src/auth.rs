//! Bearer-token checks: write endpoints need the token where one is configured, reads only
//! under `--protect-reads` (health, readiness and metrics stay open).

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{Failure, too_large};

/// The bearer token: its `Debug` never shows it (a `Config` in a log line or a panic message
/// names no secret).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Token {
    fn from(token: &str) -> Token {
        Token::new(token)
    }
}

impl From<String> for Token {
    fn from(token: String) -> Token {
        Token(token)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(redacted)")
    }
}

/// Who may do what: the token (where one is configured) and whether reads need it too.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub token: Option<Token>,
    /// `--protect-reads`: every read but health, readiness and metrics needs the token.
    pub protect_reads: bool,
    /// `--max-write-body-bytes`: the largest body of a registration or a reload.
    pub max_write_body_bytes: usize,
}

impl Access {
    /// Whether `headers` carry the configured token (`false` when none is configured): what
    /// unlocks the detail of `/readyz`.
    pub fn has_token(&self, headers: &HeaderMap) -> bool {
        self.token.is_some() && self.check(headers, true).is_ok()
    }

    /// Authorisation for read endpoints.
    pub fn read(&self, headers: &HeaderMap) -> Result<(), Failure> {
        self.check(headers, false)
    }

    /// Authorisation for write endpoints.
    pub fn write(&self, headers: &HeaderMap) -> Result<(), Failure> {
        self.check(headers, true)
    }

    /// Checks the bearer token where one is configured.
    pub fn check(&self, headers: &HeaderMap, write: bool) -> Result<(), Failure> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if !write && !self.protect_reads {
            return Ok(());
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(g) if constant_time_eq(g.as_bytes(), token.expose().as_bytes()) => Ok(()),
            Some(_) => Err(Failure::field("Authorization", "wrong bearer token")
                .with_status(StatusCode::UNAUTHORIZED)),
            None => Err(Failure::field(
                "Authorization",
                "this endpoint needs `Authorization: Bearer <token>`",
            )
            .with_status(StatusCode::UNAUTHORIZED)),
        }
    }
}

/// Middleware of routes that only read: the token (under `--protect-reads`) is checked from the
/// headers, before a byte of the body is read.
pub async fn require_read(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    match access.read(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(failure) => failure.into_response(),
    }
}

/// Middleware of routes that read with GET and HEAD and write with any other method: the token
/// the method needs is checked from the headers, before a byte of the body is read.
pub async fn require_by_method(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let write = !matches!(*request.method(), Method::GET | Method::HEAD);
    match access.check(request.headers(), write) {
        Ok(()) => next.run(request).await,
        Err(failure) => failure.into_response(),
    }
}

/// Middleware of the registry's writes and reloads: a body declared longer than
/// `--max-write-body-bytes` is answered 413 before it is read (one without a length is cut off
/// where it passes the limit, by the route's `DefaultBodyLimit`).
pub async fn write_body_limit(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let limit = access.max_write_body_bytes;
    if crate::intake::declared_length(request.headers()).is_some_and(|n| n > limit as u64) {
        return too_large(limit, "--max-write-body-bytes").into_response();
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::Token;

    #[test]
    fn a_token_is_never_in_debug() {
        let token = Token::from("s3cret-token");
        assert_eq!(format!("{token:?}"), "Token(redacted)");
        assert_eq!(token.expose(), "s3cret-token");
        let access = super::Access {
            token: Some(token),
            ..super::Access::default()
        };
        let debug = format!("{access:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("Token(redacted)"), "{debug}");
    }
}
