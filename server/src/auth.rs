//! Bearer-token checks: write endpoints need the token where one is configured, reads only
//! under `--protect-reads` (health, readiness and metrics stay open).

use axum::http::{HeaderMap, StatusCode, header};

use crate::error::Failure;
use crate::state::AppState;

/// Checks the bearer token where one is configured.
pub fn authorize(state: &AppState, headers: &HeaderMap, write: bool) -> Result<(), Failure> {
    let Some(token) = &state.config.token else {
        return Ok(());
    };
    if !write && !state.config.protect_reads {
        return Ok(());
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(Failure::field("Authorization", "wrong bearer token")
            .with_status(StatusCode::UNAUTHORIZED)),
        None => Err(Failure::field(
            "Authorization",
            "this endpoint needs `Authorization: Bearer <token>`",
        )
        .with_status(StatusCode::UNAUTHORIZED)),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Authorisation for read endpoints.
pub fn authorize_read(state: &AppState, headers: &HeaderMap) -> Result<(), Failure> {
    authorize(state, headers, false)
}

/// Authorisation for write endpoints.
pub fn authorize_write(state: &AppState, headers: &HeaderMap) -> Result<(), Failure> {
    authorize(state, headers, true)
}
