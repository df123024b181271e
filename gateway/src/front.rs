//! What every S3 request passes before s3s: a request id, sent back as
//! `x-amz-request-id` on every answer and as `<RequestId>` in every error
//! body (the operations' and s3s's own) (so a client can quote it and it can be
//! found in the gateway's log), S3's bounds on a presigned URL's
//! lifetime, which s3s does not enforce (`X-Amz-Expires` is 1 to 604800
//! seconds: seven days), and signature version 2: refused unless
//! `--allow-sigv2`, and then date-checked and bounded as SigV4 is; and a
//! SigV4 credential scope whose region s3s refuses, re-signed (`scope`);
//! and POST form uploads, refused before their file is read unless signed,
//! then streamed as PUTs (`post`, `form`).

use futures::future::BoxFuture;
use http::HeaderValue;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse, S3Error, S3ErrorCode};

use crate::post;

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

/// The S3 service behind the request id and the presigned-URL and
/// signature-version checks.
#[derive(Clone)]
pub struct Front {
    pub service: S3Service,
    /// Secrets, to re-sign a credential scope s3s refuses (`scope`).
    pub auth: std::sync::Arc<crate::auth::Auth>,
    /// Whether SigV2 requests are accepted (`--allow-sigv2`).
    pub allow_sigv2: bool,
    /// Bytes of POST form uploads held at once (`post`).
    pub post_budget: crate::post::Budget,
    /// The base domains of virtual-host style requests (a form's bucket).
    pub domains: Option<std::sync::Arc<crate::host::Domains>>,
}

/// Most a signed request's date may differ from the gateway's clock, as S3.
pub const MAX_SKEW_SECONDS: i64 = 15 * 60;

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Front {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<HttpResponse, HttpError>>;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let id = RequestId::new();
        req.extensions_mut().insert(id.clone());
        let front = self.clone();
        Box::pin(async move {
            let mut resp = match front.pass(req).await {
                Ok(r) => r,
                Err(mut e) => {
                    e.set_request_id(id.0.clone());
                    e.to_http_response()
                        .map_err(|e| HttpError::new(Box::new(e)))?
                }
            };
            if let Ok(v) = HeaderValue::from_str(&id.0) {
                resp.headers_mut().insert("x-amz-request-id", v);
            }
            name_in_error_body(&mut resp, &id);
            Ok(resp)
        })
    }
}

impl Front {
    /// The checks s3s does not make, then s3s; an `Err` is a refusal.
    async fn pass(
        self,
        mut req: http::Request<hyper::body::Incoming>,
    ) -> Result<HttpResponse, S3Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        presigned_expiry(req.uri().query())?;
        sig_v2(req.headers(), req.uri().query(), self.allow_sigv2, now)?;
        let unanswered = |e: HttpError| {
            tracing::debug!(error = ?e, "s3s gave no answer");
            S3Error::new(S3ErrorCode::InternalError)
        };
        if let Some(boundary) = post::form_boundary(&req) {
            let signed = post::admit(req, &boundary, self.allow_sigv2).await?;
            let d = self.domains.as_deref();
            let (admitted, reply) = crate::form::stream(signed, &boundary, &self.auth, d).await?;
            let resp = self.service.call(admitted.req).await.map_err(unanswered);
            return reply.answer(resp?);
        }
        crate::scope::resign(&mut req, &self.auth).await?;
        if crate::length::unsized_upload(&req) {
            let admitted = crate::length::admit(req, &self.auth, &self.post_budget).await?;
            let resp = self.service.call(admitted.req).await.map_err(unanswered);
            drop(admitted.permit);
            return resp;
        }
        hyper::service::Service::call(&self.service, req)
            .await
            .map_err(unanswered)
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

/// A 403 AccessDenied saying `why`.
fn denied(why: &'static str) -> S3Error {
    S3Error::with_message(S3ErrorCode::AccessDenied, why)
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
        return Err(denied("X-Amz-Expires is given more than once"));
    }
    match v.parse::<i64>() {
        Ok(n) if n > 0 && n <= MAX_PRESIGNED_SECONDS => Ok(()),
        Ok(n) if n > MAX_PRESIGNED_SECONDS => Err(denied(
            "X-Amz-Expires must be less than a week (in seconds), that is 604800",
        )),
        _ => Err(denied("X-Amz-Expires must be a positive number of seconds")),
    }
}

/// Refuses a request signed with AWS signature version 2 (an `AWS `
/// Authorization header, or a presigned URL's `AWSAccessKeyId` and
/// `Signature`) unless `allow`; an allowed one must be dated within
/// `MAX_SKEW_SECONDS` of `now` (its `x-amz-date` or `Date`), and a presigned
/// one expire at most 7 days ahead (s3s checks neither for SigV2).
fn sig_v2(
    headers: &http::HeaderMap,
    query: Option<&str>,
    allow: bool,
    now: i64,
) -> Result<(), S3Error> {
    let header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS ") && !v.starts_with("AWS4-"));
    let expires = query.and_then(|q| {
        let mut signed = false;
        let mut key = false;
        let mut expires = None;
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            match &*k {
                "Signature" => signed = true,
                "AWSAccessKeyId" => key = true,
                "Expires" => expires = Some(v.into_owned()),
                _ => {}
            }
        }
        (signed && key).then_some(expires)
    });
    if !header && expires.is_none() {
        return Ok(());
    }
    if !allow {
        return Err(denied(
            "signature version 2 is turned off on this gateway: sign requests with SigV4",
        ));
    }
    if let Some(expires) = expires {
        let at = expires.as_deref().and_then(|e| e.parse::<i64>().ok());
        return match at {
            Some(at) if at - now <= MAX_PRESIGNED_SECONDS => Ok(()),
            Some(_) => Err(denied(
                "a presigned URL may expire at most a week (604800 seconds) ahead",
            )),
            None => Err(denied(
                "a SigV2 presigned URL needs Expires, in seconds since the epoch",
            )),
        };
    }
    let date = headers
        .get("x-amz-date")
        .or_else(|| headers.get(http::header::DATE))
        .and_then(|v| v.to_str().ok())
        .and_then(|d| chrono::DateTime::parse_from_rfc2822(d).ok())
        .map(|d| d.timestamp());
    match date {
        Some(d) if (d - now).abs() <= MAX_SKEW_SECONDS => Ok(()),
        Some(_) => Err(S3Error::with_message(
            S3ErrorCode::RequestTimeTooSkewed,
            "the difference between the request time and the server's time is too large",
        )),
        None => Err(denied("a SigV2 request needs a Date or x-amz-date header")),
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

    /// SigV2 is refused unless allowed; allowed, a request dated more
    /// than 15 minutes off (a 2001 date, say) or a presigned URL expiring
    /// more than a week ahead is refused. SigV4 and anonymous requests pass.
    #[test]
    fn sigv2_is_off_unless_allowed_and_then_dated() {
        let now = 1_800_000_000; // 2027-01-15T08:00:00Z
        let h = |pairs: &[(&'static str, &str)]| {
            let mut m = http::HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, http::HeaderValue::from_str(v).unwrap());
            }
            m
        };
        let v2 = ("authorization", "AWS AKID:c2lnbmF0dXJl");
        let fresh = ("date", "Fri, 15 Jan 2027 08:05:00 +0000");
        let old = ("date", "Mon, 01 Jan 2001 00:00:00 +0000");
        let code = |r: Result<(), S3Error>| r.unwrap_err().code().clone();
        // Off (the default).
        assert_eq!(
            code(sig_v2(&h(&[v2, fresh]), None, false, now)),
            S3ErrorCode::AccessDenied
        );
        let presigned = format!("AWSAccessKeyId=AKID&Expires={}&Signature=x%2By", now + 60);
        assert_eq!(
            code(sig_v2(&h(&[]), Some(&presigned), false, now)),
            S3ErrorCode::AccessDenied
        );
        // On: dated, and bounded.
        assert!(sig_v2(&h(&[v2, fresh]), None, true, now).is_ok());
        assert_eq!(
            code(sig_v2(&h(&[v2, old]), None, true, now)),
            S3ErrorCode::RequestTimeTooSkewed
        );
        assert_eq!(
            code(sig_v2(&h(&[v2]), None, true, now)),
            S3ErrorCode::AccessDenied
        );
        assert!(sig_v2(&h(&[]), Some(&presigned), true, now).is_ok());
        let far = format!(
            "AWSAccessKeyId=AKID&Expires={}&Signature=x",
            now + 8 * 86_400
        );
        assert_eq!(
            code(sig_v2(&h(&[]), Some(&far), true, now)),
            S3ErrorCode::AccessDenied
        );
        // SigV4, anonymous and plain queries are not SigV2.
        let v4 = (
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/20270115/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
        );
        assert!(sig_v2(&h(&[v4]), None, false, now).is_ok());
        assert!(sig_v2(&h(&[]), Some("list-type=2&prefix=a"), false, now).is_ok());
        assert!(sig_v2(&h(&[]), None, false, now).is_ok());
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
