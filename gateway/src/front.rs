//! What every S3 request passes before s3s: a request id, sent back as
//! `x-amz-request-id` on every answer and as `<RequestId>` in every error
//! body (the operations' and s3s's own) (so a client can quote it and it can be
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
            name_in_error_body(&mut resp, &id);
            Ok(resp)
        })
    }
}

/// Puts the request id into an error body s3s wrote itself (signature and
/// routing errors, NotImplemented), which carries none; the operations'
/// errors already do.
fn name_in_error_body(resp: &mut HttpResponse, id: &RequestId) {
    if resp.status().as_u16() < 400 {
        return;
    }
    let Some(body) = resp.body().bytes() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return;
    };
    if text.contains("<RequestId>") {
        return;
    }
    let Some(at) = text.rfind("</Error>") else {
        return;
    };
    let with = format!(
        "{}<RequestId>{}</RequestId>{}",
        &text[..at],
        id.0,
        &text[at..]
    );
    if let Ok(n) = HeaderValue::from_str(&with.len().to_string())
        && resp.headers().contains_key(http::header::CONTENT_LENGTH)
    {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, n);
    }
    *resp.body_mut() = s3s::Body::from(with);
}

/// Refuses a presigned URL whose `X-Amz-Expires` is not 1..=604800
/// seconds: S3 answers 403 (s3s accepted any value and answered a negative
/// one 400). The query is read decoded, as s3s reads it, so a parameter
/// written percent-encoded (`X-Amz-%45xpires`) is the same parameter; one
/// given twice is refused.
fn presigned_expiry(query: Option<&str>) -> Result<(), S3Error> {
    let Some(query) = query else { return Ok(()) };
    let mut given = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "X-Amz-Expires")
        .map(|(_, v)| v);
    let Some(v) = given.next() else {
        return Ok(());
    };
    if given.next().is_some() {
        return Err(S3Error::with_message(
            S3ErrorCode::AccessDenied,
            "X-Amz-Expires is given more than once",
        ));
    }
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
    fn error_bodies_name_the_request() {
        let id = RequestId("00000000000000AB".into());
        let xml = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code></Error>";
        let mut r = http::Response::builder()
            .status(403)
            .body(s3s::Body::from(xml.to_string()))
            .unwrap();
        name_in_error_body(&mut r, &id);
        let b = r.body().bytes().unwrap();
        assert!(
            std::str::from_utf8(&b).unwrap().ends_with(
                "<Code>AccessDenied</Code><RequestId>00000000000000AB</RequestId></Error>"
            )
        );
        // An answer that names one already, or no error, is left alone.
        let mut ok = http::Response::builder()
            .status(200)
            .body(s3s::Body::from(xml.to_string()))
            .unwrap();
        name_in_error_body(&mut ok, &id);
        assert_eq!(ok.body().bytes().unwrap(), xml.as_bytes());
    }

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
        // Percent-encoded names and values are the same parameter.
        for bad in [
            "X-Amz-%45xpires=999999999",
            "X%2DAmz%2DExpires=999999999",
            "X-Amz-Expires=%39%39%39%39%39%39%39",
            "X-Amz-Expires=3600&X-Amz-%45xpires=3600",
        ] {
            let e = presigned_expiry(Some(bad)).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::AccessDenied, "{bad}");
        }
        assert!(presigned_expiry(Some("X-Amz-%45xpires=%33%36%30%30")).is_ok());
    }
}
