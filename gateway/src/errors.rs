//! What om's errors are in S3's terms, in one place: om answers a stable
//! machine-readable reason (`ClientError::Api { reason, .. }`), and each
//! reason a gateway can meet maps to the S3 error code a client expects.
//! What no reason names falls back on the gRPC code.
//!
//! Messages of client errors are om's (they name the field at fault, never a
//! secret); internal errors are logged here and answered without detail.

use http::{HeaderMap, HeaderValue};
use om_client::ClientError;
use s3s::{S3Error, S3ErrorCode};
use tonic::Code;

/// The S3 error code of an om refusal.
pub fn s3_code(code: Code, reason: &str, field: &str) -> S3ErrorCode {
    use S3ErrorCode as S;
    match reason {
        "BUCKET_NOT_FOUND" | "VOLUME_NOT_FOUND" => S::NoSuchBucket,
        "KEY_NOT_FOUND" | "PATH_NOT_FOUND" | "SOURCE_IS_DELETE_MARKER" => S::NoSuchKey,
        "VERSION_NOT_FOUND" => S::NoSuchVersion,
        // S3 answers NoSuchUpload for any upload id it did not hand out,
        // well-formed or not.
        "UPLOAD_NOT_FOUND" | "INVALID_UPLOAD_ID" => S::NoSuchUpload,
        "NO_SUCH_LIFECYCLE_CONFIGURATION" => S::NoSuchLifecycleConfiguration,
        "INVALID_PART" | "INVALID_PARTS" => S::InvalidPart,
        "INVALID_PART_ORDER" => S::InvalidPartOrder,
        "ENTITY_TOO_SMALL" => S::EntityTooSmall,
        "ENTITY_TOO_LARGE" | "KEY_TOO_LARGE" => S::EntityTooLarge,
        "BUCKET_ALREADY_EXISTS" => S::BucketAlreadyExists,
        "BUCKET_NOT_EMPTY" => S::BucketNotEmpty,
        "ACCESS_DENIED" | "UNAUTHENTICATED" | "CREDENTIALS_REQUIRED" | "INVALID_IMPERSONATION" => {
            S::AccessDenied
        }
        "IF_MATCH_FAILED"
        | "IF_NONE_MATCH_FAILED"
        | "UPDATE_ID_MISMATCH"
        | "SOURCE_CONDITION_FAILED" => S::PreconditionFailed,
        "INVALID_TAG" | "TOO_MANY_TAGS" => S::InvalidTag,
        "KEY_TOO_LONG" => S::KeyTooLongError,
        "METADATA_TOO_LARGE" => S::MetadataTooLarge,
        "INVALID_NAME" if field == "bucket" || field == "name" => S::InvalidBucketName,
        "DELETE_MARKER" => S::MethodNotAllowed,
        "COPY_TO_ITSELF" | "MALFORMED_REQUEST" => S::InvalidRequest,
        "UNSUPPORTED_LIFECYCLE_ACTION" => S::NotImplemented,
        "QUOTA_EXCEEDED" => S::Custom("QuotaExceeded".into()),
        "TOO_MANY_AUTH_FAILURES" => S::SlowDown,
        "STALE_STATE" | "NOT_LEADER" | "UNAVAILABLE" => S::ServiceUnavailable,
        _ => match code {
            Code::InvalidArgument | Code::OutOfRange => S::InvalidArgument,
            Code::NotFound => S::NoSuchKey,
            Code::PermissionDenied | Code::Unauthenticated => S::AccessDenied,
            Code::FailedPrecondition | Code::AlreadyExists => S::InvalidRequest,
            Code::ResourceExhausted => S::SlowDown,
            Code::Unavailable | Code::DeadlineExceeded | Code::Aborted => S::ServiceUnavailable,
            _ => S::InternalError,
        },
    }
}

/// An om error as the S3 error answered for it. A delete marker's
/// NOT_FOUND carries `x-amz-delete-marker: true` and the marker's version
/// id; any other missing key `x-amz-delete-marker: false`.
pub fn from_om(e: ClientError) -> S3Error {
    match e {
        ClientError::Api {
            code,
            reason,
            field,
            message,
            delete_marker,
        } => {
            let s3 = s3_code(code, &reason, &field);
            let mut err = match s3 {
                S3ErrorCode::InternalError => {
                    tracing::warn!(?code, %reason, %field, %message, "om error without an S3 code");
                    S3Error::new(s3)
                }
                S3ErrorCode::Custom(_) => {
                    let mut err = S3Error::with_message(s3, message);
                    err.set_status_code(http::StatusCode::FORBIDDEN);
                    err
                }
                _ => S3Error::with_message(s3, message),
            };
            if let Some(version) = delete_marker {
                err.set_headers(delete_marker_headers(&version, true));
            } else if reason == "KEY_NOT_FOUND" {
                // No delete marker stands there: say so, as RGW does (AWS
                // says nothing; clients that read the header see `false`).
                let mut h = HeaderMap::new();
                h.insert("x-amz-delete-marker", HeaderValue::from_static("false"));
                err.set_headers(h);
            }
            err
        }
        ClientError::Unavailable(why) => {
            tracing::warn!(%why, "om unavailable");
            S3Error::with_message(S3ErrorCode::ServiceUnavailable, "om is unavailable")
        }
        ClientError::Endpoint(why) => {
            tracing::error!(%why, "bad om endpoint");
            S3Error::new(S3ErrorCode::InternalError)
        }
    }
}

/// `x-amz-delete-marker` (when `marker`) and `x-amz-version-id` headers.
pub fn delete_marker_headers(version: &str, marker: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    if marker {
        h.insert("x-amz-delete-marker", HeaderValue::from_static("true"));
    }
    if let Ok(v) = HeaderValue::from_str(version) {
        h.insert("x-amz-version-id", v);
    }
    h
}

/// A block store failure: logged with its detail, answered as InternalError.
pub fn from_io(what: &str, e: &std::io::Error) -> S3Error {
    tracing::error!(error = %e, "block store: {what}");
    S3Error::with_message(S3ErrorCode::InternalError, "the block store failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: Code, reason: &str) -> ClientError {
        ClientError::Api {
            code,
            reason: reason.to_string(),
            field: String::new(),
            message: "m".to_string(),
            delete_marker: None,
        }
    }

    #[test]
    fn reasons_map_to_s3_codes() {
        use S3ErrorCode as S;
        let cases = [
            (Code::NotFound, "BUCKET_NOT_FOUND", S::NoSuchBucket),
            (Code::NotFound, "VOLUME_NOT_FOUND", S::NoSuchBucket),
            (Code::NotFound, "KEY_NOT_FOUND", S::NoSuchKey),
            (Code::NotFound, "VERSION_NOT_FOUND", S::NoSuchVersion),
            (Code::NotFound, "UPLOAD_NOT_FOUND", S::NoSuchUpload),
            (Code::InvalidArgument, "INVALID_UPLOAD_ID", S::NoSuchUpload),
            (Code::InvalidArgument, "INVALID_PART", S::InvalidPart),
            (
                Code::InvalidArgument,
                "INVALID_PART_ORDER",
                S::InvalidPartOrder,
            ),
            (Code::InvalidArgument, "ENTITY_TOO_SMALL", S::EntityTooSmall),
            (Code::InvalidArgument, "ENTITY_TOO_LARGE", S::EntityTooLarge),
            (
                Code::AlreadyExists,
                "BUCKET_ALREADY_EXISTS",
                S::BucketAlreadyExists,
            ),
            (
                Code::FailedPrecondition,
                "BUCKET_NOT_EMPTY",
                S::BucketNotEmpty,
            ),
            (Code::PermissionDenied, "ACCESS_DENIED", S::AccessDenied),
            (
                Code::FailedPrecondition,
                "IF_MATCH_FAILED",
                S::PreconditionFailed,
            ),
            (
                Code::FailedPrecondition,
                "IF_NONE_MATCH_FAILED",
                S::PreconditionFailed,
            ),
            (
                Code::FailedPrecondition,
                "SOURCE_CONDITION_FAILED",
                S::PreconditionFailed,
            ),
            (
                Code::NotFound,
                "NO_SUCH_LIFECYCLE_CONFIGURATION",
                S::NoSuchLifecycleConfiguration,
            ),
            (Code::InvalidArgument, "INVALID_TAG", S::InvalidTag),
            (Code::InvalidArgument, "SOMETHING_NEW", S::InvalidArgument),
            (Code::Unavailable, "SOMETHING_NEW", S::ServiceUnavailable),
            (Code::Internal, "INTERNAL", S::InternalError),
        ];
        for (code, reason, want) in cases {
            assert_eq!(s3_code(code, reason, ""), want, "{reason}");
        }
        assert_eq!(
            s3_code(Code::InvalidArgument, "INVALID_NAME", "bucket"),
            S3ErrorCode::InvalidBucketName
        );
        assert_eq!(
            s3_code(Code::InvalidArgument, "INVALID_NAME", "key"),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn errors_carry_codes_and_delete_markers() {
        let e = from_om(api(Code::NotFound, "KEY_NOT_FOUND"));
        assert_eq!(e.code(), &S3ErrorCode::NoSuchKey);
        assert_eq!(e.message(), Some("m"));

        let mut marker = api(Code::NotFound, "KEY_NOT_FOUND");
        if let ClientError::Api { delete_marker, .. } = &mut marker {
            *delete_marker = Some("v1".to_string());
        }
        let e = from_om(marker);
        let h = e.headers().expect("headers");
        assert_eq!(h.get("x-amz-delete-marker").unwrap(), "true");
        assert_eq!(h.get("x-amz-version-id").unwrap(), "v1");

        let e = from_om(ClientError::Unavailable("no leader".into()));
        assert_eq!(e.code(), &S3ErrorCode::ServiceUnavailable);
        assert!(!e.message().unwrap_or("").contains("no leader"));

        let e = from_om(api(Code::FailedPrecondition, "QUOTA_EXCEEDED"));
        assert_eq!(e.status_code(), Some(http::StatusCode::FORBIDDEN));
    }
}
