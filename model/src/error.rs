//! The one error of a prediction or a registry change: what kind of failure, the request field
//! to blame, and a message that says what to do. No HTTP here; the server maps the kind to a
//! status.

/// What went wrong, as a caller needs to act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A well-formed request the model cannot answer (a field out of range, a feature missing).
    Invalid,
    /// An id that names no registered workload.
    NotFound,
    /// The engine failed on inputs that passed every check.
    Internal,
}

/// A failed prediction or registry change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct ModelError {
    pub kind: ErrorKind,
    /// The offending field as a path (`pairs[3].share_a`), where one is to blame.
    pub field: Option<String>,
    pub message: String,
}

impl ModelError {
    /// An invalid `field`.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> ModelError {
        ModelError {
            kind: ErrorKind::Invalid,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// The workload `id`, named by `field`, is not registered.
    pub fn not_found(id: &str, field: impl Into<String>) -> ModelError {
        ModelError {
            kind: ErrorKind::NotFound,
            field: Some(field.into()),
            message: format!("unknown workload `{id}`"),
        }
    }

    /// The engine failed.
    pub fn internal(message: impl Into<String>) -> ModelError {
        ModelError {
            kind: ErrorKind::Internal,
            field: None,
            message: message.into(),
        }
    }
}
