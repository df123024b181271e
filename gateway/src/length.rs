//! Uploads without a Content-Length: a PUT (PutObject, UploadPart) sent
//! with `Transfer-Encoding: chunked` and no length, which some clients
//! send when they stream. s3s needs the length before it reads the body
//! (411 MissingContentLength, as AWS answers); RGW and MinIO take them.
//!
//! The front end checks the request's SigV4 signature first
//! (`scope::verify`), so nothing of an unauthenticated body is read, then
//! reads the body into memory, taking its bytes from the upload memory
//! budget as they arrive (`--post-memory-bytes`:
//! 503 SlowDown when it is taken, 400 EntityTooLarge past it: a larger
//! object needs a Content-Length or a multipart upload), and hands s3s the
//! request with its Content-Length. s3s then checks the signature again and
//! the payload's hash, as for any PUT. A body signed chunk by chunk
//! (aws-chunked) says its decoded length and never comes here.

use bytes::BytesMut;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Method, Request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use s3s::{S3Error, S3ErrorCode};

use crate::auth::Auth;
use crate::post::{Admitted, Budget};

/// Whether `req` is a PUT whose body comes without a length.
pub fn unsized_upload<B>(req: &Request<B>) -> bool {
    let h = req.headers();
    req.method() == Method::PUT
        && !h.contains_key(CONTENT_LENGTH)
        && !h.contains_key("x-amz-decoded-content-length")
        && h.get_all(TRANSFER_ENCODING).iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("chunked"))
            })
        })
}

fn error(code: S3ErrorCode, why: &'static str) -> S3Error {
    S3Error::with_message(code, why)
}

/// Reads the body of the unsized upload `req` once its signature is
/// known right, and gives it its Content-Length.
pub async fn admit(
    req: Request<Incoming>,
    auth: &Auth,
    budget: &Budget,
) -> Result<Admitted, S3Error> {
    if !crate::scope::verify(&req, auth).await? {
        return Err(error(
            S3ErrorCode::MissingContentLength,
            "an upload without Content-Length must be signed with SigV4; else send its length",
        ));
    }
    let (mut parts, mut body) = req.into_parts();
    let mut buf = BytesMut::new();
    let mut permit = None;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|_| error(S3ErrorCode::IncompleteBody, "the body ended early"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = (buf.len() + data.len()) as u64;
        if total > budget.bytes() {
            return Err(error(
                S3ErrorCode::EntityTooLarge,
                "an upload without Content-Length may be at most --post-memory-bytes: \
                 send its length, or use a multipart upload",
            ));
        }
        if !budget.hold(&mut permit, total) {
            return Err(error(
                S3ErrorCode::SlowDown,
                "too many uploads without Content-Length at once: retry",
            ));
        }
        buf.extend_from_slice(&data);
    }
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(buf.len()));
    let req = Request::from_parts(parts, s3s::Body::from(buf.freeze()));
    Ok(Admitted { req, permit })
}
