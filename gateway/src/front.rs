//! What every S3 request passes before s3s: a request id, sent back as
//! `x-amz-request-id` on every answer and as `<RequestId>` in the error
//! bodies the S3 operations produce (so a client can quote it and it can be
//! found in the gateway's log), and S3's bounds on a presigned URL's
//! lifetime, which s3s does not enforce (`X-Amz-Expires` is 1 to 604800
//! seconds: seven days).

use futures::future::BoxFuture;
use http::HeaderValue;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse, S3Error, S3ErrorCode};

/// The longest a presigned URL may live: seven days, as S3 allows.
pub const MAX_PRESIGNED_SECONDS: i64 = 7 * 24 * 3600;

/// One request's id (16 hex digits, as S3's).
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

impl RequestId {
    fn new() -> RequestId {
        RequestId(format!("{:016X}", rand::random::<u64>()))
    }
}

/// The S3 service behind the request id and the presigned-URL check.
#[derive(Clone)]
pub struct Front(pub S3Service);

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Front {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<HttpResponse, HttpError>>;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let id = RequestId::new();
        req.extensions_mut().insert(id.clone());
        let refused = presigned_expiry(req.uri().query()).err().map(|mut e| {
            e.set_request_id(id.0.clone());
            e.to_http_response()
        });
        let inner = self.0.clone();
        Box::pin(async move {
            let mut resp = match refused {
                Some(Ok(r)) => r,
                Some(Err(e)) => return Err(HttpError::new(Box::new(e))),
                None => hyper::service::Service::call(&inner, req).await?,
            };
            if let Ok(v) = HeaderValue::from_str(&id.0) {
                resp.headers_mut().insert("x-amz-request-id", v);
            }
            Ok(resp)
        })
    }
}

/// Refuses a presigned URL whose `X-Amz-Expires` is not 1..=604800
/// seconds: S3 answers 403 (s3s accepted any value and answered a negative
/// one 400).
fn presigned_expiry(query: Option<&str>) -> Result<(), S3Error> {
    let Some(query) = query else { return Ok(()) };
    let Some(v) = query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == "X-Amz-Expires")
        .map(|(_, v)| v)
    else {
        return Ok(());
    };
    match v.parse::<i64>() {
        Ok(n) if n > 0 && n <= MAX_PRESIGNED_SECONDS => Ok(()),
        Ok(n) if n > MAX_PRESIGNED_SECONDS => Err(S3Error::with_message(
            S3ErrorCode::AccessDenied,
            "X-Amz-Expires must be less than a week (in seconds), that is 604800",
        )),
        _ => Err(S3Error::with_message(
            S3ErrorCode::AccessDenied,
            "X-Amz-Expires must be a positive number of seconds",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_lifetimes_are_bounded() {
        assert!(presigned_expiry(None).is_ok());
        assert!(presigned_expiry(Some("list-type=2")).is_ok());
        assert!(presigned_expiry(Some("X-Amz-Date=x&X-Amz-Expires=3600&a=b")).is_ok());
        assert!(presigned_expiry(Some("X-Amz-Expires=604800")).is_ok());
        for bad in ["604801", "609901", "-7", "0", "x", ""] {
            let e = presigned_expiry(Some(&format!("X-Amz-Expires={bad}"))).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::AccessDenied, "{bad}");
        }
    }
}
