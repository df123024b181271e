//! om's request and server errors. Only `grpc` turns them into `tonic::Status`.
//!
//! Request errors (bad input, missing parents, conflicts) never stop the node;
//! `Storage` errors are fatal to the request and are logged, never retried silently.

use std::fmt;

/// The class of a request error; decides the gRPC status code at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    PermissionDenied,
    /// Refused for want of a resource (the data volume's space); retry
    /// later. Never in a replicated `Rejection`.
    ResourceExhausted,
}

impl ErrorKind {
    /// Stable numbering used in replicated `Rejection` records.
    pub fn to_code(self) -> u32 {
        match self {
            ErrorKind::InvalidArgument => 1,
            ErrorKind::NotFound => 2,
            ErrorKind::AlreadyExists => 3,
            ErrorKind::FailedPrecondition => 4,
            ErrorKind::PermissionDenied => 5,
            ErrorKind::ResourceExhausted => 6,
        }
    }

    pub fn from_code(code: u32) -> ErrorKind {
        match code {
            1 => ErrorKind::InvalidArgument,
            2 => ErrorKind::NotFound,
            3 => ErrorKind::AlreadyExists,
            5 => ErrorKind::PermissionDenied,
            6 => ErrorKind::ResourceExhausted,
            _ => ErrorKind::FailedPrecondition,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum OmError {
    /// The request was refused and changed nothing.
    #[error("{message}")]
    Request {
        kind: ErrorKind,
        /// Stable machine-readable reason, e.g. `VOLUME_NOT_FOUND`.
        reason: String,
        /// The request field at fault; empty when none is.
        field: String,
        message: String,
    },
    /// The caller lacks `right` (e.g. `READ`) on `resource` (`/`, `/vol` or
    /// `/vol/bucket`); nothing changed.
    #[error("{message}")]
    Denied {
        right: String,
        resource: String,
        message: String,
    },
    /// This node cannot serve the request; the leader (if known) can.
    #[error("not the leader (leader: {leader_id:?})")]
    NotLeader {
        leader_id: Option<u64>,
        leader_addr: Option<String>,
    },
    /// No quorum, shutting down, or the request timed out in Raft.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// This replica's state differs from the other members' (`divergence`):
    /// it serves nothing until it is rebuilt; the others can.
    #[error("replica diverged: {0}")]
    Diverged(String),
    /// This member belongs to a cluster incarnation a forced new cluster
    /// replaced (`incarnation`): it serves nothing until wiped and re-added.
    #[error("member superseded: {0}")]
    Superseded(String),
    /// Storage or internal failure.
    #[error("internal error: {0}")]
    Internal(String),
}

impl OmError {
    /// The same error about the field `outer.FIELD` (an item of a list:
    /// `keys[3]` turns field `key` into `keys[3].key`).
    pub fn within(self, outer: &str) -> Self {
        match self {
            OmError::Request {
                kind,
                reason,
                field,
                message,
            } => OmError::Request {
                kind,
                reason,
                field: if field.is_empty() {
                    outer.to_string()
                } else {
                    format!("{outer}.{field}")
                },
                message,
            },
            other => other,
        }
    }

    fn request(
        kind: ErrorKind,
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        OmError::Request {
            kind,
            reason: reason.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn invalid(
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::request(ErrorKind::InvalidArgument, reason, field, message)
    }

    pub fn not_found(
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::request(ErrorKind::NotFound, reason, field, message)
    }

    pub fn exists(
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::request(ErrorKind::AlreadyExists, reason, field, message)
    }

    pub fn exhausted(
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::request(ErrorKind::ResourceExhausted, reason, field, message)
    }

    pub fn precondition(
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::request(ErrorKind::FailedPrecondition, reason, field, message)
    }

    /// The stable reason code, as clients see it.
    pub fn reason(&self) -> &str {
        match self {
            OmError::Request { reason, .. } => reason,
            OmError::Denied { .. } => "ACCESS_DENIED",
            OmError::NotLeader { .. } => "NOT_LEADER",
            OmError::Unavailable(_) => "UNAVAILABLE",
            OmError::Diverged(_) => "REPLICA_DIVERGED",
            OmError::Superseded(_) => "SUPERSEDED",
            OmError::Internal(_) => "INTERNAL",
        }
    }
}

impl From<rocksdb::Error> for OmError {
    fn from(e: rocksdb::Error) -> Self {
        // A checksum mismatch or a failed read stops the member.
        crate::fault::check(&e);
        OmError::Internal(format!("storage: {e}"))
    }
}

impl From<prost::DecodeError> for OmError {
    fn from(e: prost::DecodeError) -> Self {
        OmError::Internal(format!("corrupt record: {e}"))
    }
}
