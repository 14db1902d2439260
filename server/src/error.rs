//! The one error every route answers with: a status and a JSON body naming the offending field.

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use duet_core::api::{
    ApiError, MAX_STRING_BYTES, clipped, clipped_display, known_path, long_string,
};
use duet_model::{ErrorKind, ModelError};

/// Seconds a client refused for the server's load is asked to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// A response whose event was already logged (and counted) where it happened: the request log
/// does not repeat it.
#[derive(Debug, Clone, Copy)]
pub struct Logged;

/// A failed request: what went wrong and the request field to blame, where there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub status: StatusCode,
    pub error: String,
    pub field: Option<String>,
    /// Already logged (and counted) where it happened: the request log does not repeat it.
    pub logged: bool,
}

impl Failure {
    /// A failure with `status`; its text clipped as every failure's is ([`clipped`]).
    pub fn new(status: StatusCode, error: impl Into<String>) -> Failure {
        Failure::with_field(status, error.into(), None)
    }

    /// 422: a well-formed request the model cannot answer, because of `field`.
    pub fn field(field: impl Into<String>, error: impl Into<String>) -> Failure {
        Failure::with_field(
            StatusCode::UNPROCESSABLE_ENTITY,
            error.into(),
            Some(field.into()),
        )
    }

    /// Every failure is made here: its error and field clipped to what an answer carries, since
    /// either may quote what the client sent.
    fn with_field(status: StatusCode, error: String, field: Option<String>) -> Failure {
        Failure {
            status,
            error: clipped(error),
            field: field.map(clipped),
            logged: false,
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Failure {
        self.status = status;
        self
    }

    pub fn body(&self) -> ApiError {
        ApiError {
            error: self.error.clone(),
            field: self.field.clone(),
        }
    }
}

/// A model's error as an answer: invalid input 422, an unknown id 404, an engine failure 500.
impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Failure {
        let status = match e.kind {
            ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Internal => {
                tracing::error!(error = %e.message, "inference failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        Failure::with_field(status, e.message, e.field)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if self.logged {
            response.extensions_mut().insert(Logged);
        }
        response
    }
}

/// Parses a JSON body; a syntax or type error names the path of the field it concerns. The
/// fast parser runs first; only a body it refuses is parsed again, tracking paths, to say where.
/// A body holding a string longer than any field takes is refused first, unparsed
/// ([`long_string_failure`]).
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    if let Some(refused) = long_string_failure(bytes) {
        return Err(refused);
    }
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(_) => parse_json_tracked(bytes),
    }
}

/// 422 for a body holding a string longer than `MAX_STRING_BYTES`, naming its length, its place
/// and its field: parsed, the parser's message for it where another type belongs would quote it
/// whole (+310 MiB for a 23 MiB string of control bytes).
pub(crate) fn long_string_failure(bytes: &[u8]) -> Option<Failure> {
    long_string(bytes, MAX_STRING_BYTES).map(|long| {
        Failure::with_field(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("invalid JSON body: {long}"),
            long.path,
        )
    })
}

pub(crate) fn parse_json_tracked<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, Failure> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let status = if inner.is_syntax() || inner.is_eof() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        Failure::with_field(
            status,
            clipped_display("invalid JSON body: ", &inner),
            known_path(&path).map(str::to_string),
        )
    })?;
    de.end().map_err(|e| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            clipped_display("invalid JSON body: ", &e),
        )
    })?;
    Ok(value)
}

/// The answer to a body longer than `limit` (`flag` names the limit).
pub fn too_large(limit: usize, flag: &str) -> Failure {
    Failure::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is larger than the server's limit of {limit} bytes ({flag})"),
    )
}

/// The 408 of a body that paused longer than `--idle-timeout`, however it was read.
pub fn paused() -> Failure {
    Failure::new(
        StatusCode::REQUEST_TIMEOUT,
        "the body paused longer than the server's limit (--idle-timeout)",
    )
}

/// A body that could not be read: too large (413) or broken.
pub fn body_failure(e: &BytesRejection, limit: usize, flag: &str) -> Failure {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large(limit, flag)
    } else if stalled(e) {
        paused()
    } else {
        Failure::new(e.status(), format!("cannot read the body: {e}"))
    }
}

/// Whether the body was cut off by the pause limit (`--idle-timeout`).
fn stalled(e: &BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = s.source();
    }
    false
}
