//! Any region name in a SigV4 credential scope. S3 clients sign for the
//! region they are configured with, and some defaults are not AWS region
//! names: s3cmd signs `US`. s3s verifies such a signature but then refuses
//! the request (`invalid credential region`): it takes only `[a-z0-9-]+`.
//!
//! So the front end checks a request whose scope names another region
//! itself, with the access key's secret, exactly as s3s would (the
//! canonical request of SigV4, the path re-encoded and then as sent), and,
//! only if the signature is right, signs it again for the region's
//! lower-case form (other characters become `-`: `US` → `us`). s3s then
//! verifies the new signature as it verifies any other, dates and all. A
//! wrong signature is refused here, as s3s would refuse it. The region only
//! names the scope: om-s3 serves one region whatever it is called.
//!
//! Requests signed for a valid region pass untouched, at the cost of
//! reading one header. A body signed chunk by chunk (`STREAMING-AWS4-…`)
//! with such a region is refused: each chunk's signature names the scope.

use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderValue, Method, Request};
use s3s::{S3Error, S3ErrorCode};
use sha2::{Digest, Sha256};

use crate::auth::Auth;
use crate::uri;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Whether s3s takes `region` as it is.
fn valid(region: &str) -> bool {
    !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The name a region is re-signed for: lower case, other characters `-`.
fn normalized(region: &str) -> String {
    region
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect()
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256>>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// A credential scope: `KEY/DATE/REGION/SERVICE/aws4_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scope {
    key: String,
    date: String,
    region: String,
    service: String,
}

impl Scope {
    fn parse(s: &str) -> Option<Scope> {
        // The access key may hold no `/`; the rest are fixed.
        let mut parts = s.rsplitn(5, '/');
        let terminator = parts.next()?;
        let service = parts.next()?;
        let region = parts.next()?;
        let date = parts.next()?;
        let key = parts.next()?;
        (terminator == "aws4_request").then(|| Scope {
            key: key.to_string(),
            date: date.to_string(),
            region: region.to_string(),
            service: service.to_string(),
        })
    }

    fn with_region(&self, region: String) -> Scope {
        Scope {
            region,
            ..self.clone()
        }
    }

    fn credential(&self) -> String {
        format!(
            "{}/{}/{}/{}/aws4_request",
            self.key, self.date, self.region, self.service
        )
    }

    /// The signing key of this scope.
    fn signing_key(&self, secret: &str) -> [u8; 32] {
        let k = hmac(format!("AWS4{secret}").as_bytes(), self.date.as_bytes());
        let k = hmac(&k, self.region.as_bytes());
        let k = hmac(&k, self.service.as_bytes());
        hmac(&k, b"aws4_request")
    }

    /// The signature of `canonical` at `amz_date` under this scope.
    fn sign(&self, secret: &str, amz_date: &str, canonical: &str) -> String {
        let to_sign = format!(
            "{ALGORITHM}\n{amz_date}\n{}/{}/{}/aws4_request\n{}",
            self.date,
            self.region,
            self.service,
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        hex::encode(hmac(&self.signing_key(secret), to_sign.as_bytes()))
    }
}

/// The parts of a request a canonical request is made of.
struct Parts<'a> {
    method: &'a Method,
    /// The path as sent (still percent-encoded).
    path: &'a str,
    /// The query's pairs, decoded, in their order.
    query: Vec<(String, String)>,
    headers: &'a HeaderMap,
    /// `host` when HTTP/2 sends it as `:authority`.
    authority: Option<&'a str>,
}

impl Parts<'_> {
    /// The canonical request, with the path re-encoded from its decoded
    /// form (`raw` false) or as sent (`raw` true), as s3s tries both.
    fn canonical(&self, signed: &[&str], payload: &str, raw: bool) -> Option<String> {
        let mut c = String::with_capacity(256);
        c.push_str(self.method.as_str());
        c.push('\n');
        if raw {
            c.push_str(self.path);
        } else {
            let decoded = uri::decode(self.path, false)?;
            uri::encode_into(&mut c, &decoded, true);
        }
        c.push('\n');
        let mut q: Vec<(String, String)> = self
            .query
            .iter()
            .filter(|(k, _)| k != "X-Amz-Signature")
            .map(|(k, v)| (uri::encode(k, false), uri::encode(v, false)))
            .collect();
        q.sort_by(|a, b| a.0.cmp(&b.0));
        let q: Vec<String> = q.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        c.push_str(&q.join("&"));
        c.push('\n');
        for name in signed {
            let mut values: Vec<String> = self
                .headers
                .get_all(*name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            if values.is_empty()
                && *name == "host"
                && let Some(a) = self.authority
            {
                values.push(a.to_string());
            }
            c.push_str(name);
            c.push(':');
            c.push_str(&values.join(","));
            c.push('\n');
        }
        c.push('\n');
        c.push_str(&signed.join(";"));
        c.push('\n');
        c.push_str(payload);
        Some(c)
    }
}

fn mismatch() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::SignatureDoesNotMatch,
        "The request signature we calculated does not match the signature you provided.",
    )
}

fn invalid(why: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidRequest, why.to_string())
}

/// The scope region of a SigV4 request, and where it is: header auth or a
/// presigned query. `None` for anything else.
enum Signed {
    Header {
        scope: Scope,
        signed: Vec<String>,
        signature: String,
    },
    Query {
        scope: Scope,
        signed: Vec<String>,
        signature: String,
        date: String,
    },
}

fn parse_header(v: &str) -> Option<Signed> {
    let rest = v.strip_prefix(ALGORITHM)?.strip_prefix(' ')?;
    let (mut scope, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => scope = Scope::parse(v),
            "SignedHeaders" => signed = Some(v.split(';').map(str::to_string).collect()),
            "Signature" => signature = Some(v.to_string()),
            _ => {}
        }
    }
    Some(Signed::Header {
        scope: scope?,
        signed: signed?,
        signature: signature?,
    })
}

fn parse_query(query: &[(String, String)]) -> Option<Signed> {
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if get("X-Amz-Algorithm")? != ALGORITHM {
        return None;
    }
    Some(Signed::Query {
        scope: Scope::parse(&get("X-Amz-Credential")?)?,
        signed: get("X-Amz-SignedHeaders")?
            .split(';')
            .map(str::to_string)
            .collect(),
        signature: get("X-Amz-Signature")?,
        date: get("X-Amz-Date")?,
    })
}

/// A SigV4 request whose signature the front end checked.
struct Checked {
    signed: Signed,
    secret: s3s::auth::SecretKey,
    /// Whether the client signed the path as sent (else re-encoded).
    raw: bool,
    /// The query's pairs, decoded, in their order.
    query: Vec<(String, String)>,
}

fn parts<'a, B>(req: &'a Request<B>, query: Vec<(String, String)>) -> Parts<'a> {
    let authority = req.uri().authority().map(|a| a.as_str());
    Parts {
        method: req.method(),
        path: req.uri().path(),
        query,
        headers: req.headers(),
        authority: if req.version() >= http::Version::HTTP_2 {
            authority
        } else {
            None
        },
    }
}

/// Checks `req`'s SigV4 signature (header or presigned query) with the
/// access key's secret, as s3s would: `None` for a request that is not
/// SigV4 or is malformed (s3s says how), and, unless `any_region`, for one
/// whose region s3s takes. A wrong signature is refused.
async fn check<B>(
    req: &Request<B>,
    auth: &Auth,
    any_region: bool,
) -> Result<Option<Checked>, S3Error> {
    let header = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // The cheap test first: no SigV4 is s3s's alone.
    let in_header = header.is_some_and(|h| h.starts_with(ALGORITHM));
    let query_text = req.uri().query().unwrap_or("");
    let in_query = !in_header && query_text.contains("X-Amz-Credential");
    if !in_header && !in_query {
        return Ok(None);
    }
    let query: Vec<(String, String)> = form_urlencoded::parse(query_text.as_bytes())
        .into_owned()
        .collect();
    let signed = match (in_header, header) {
        (true, Some(h)) => parse_header(h),
        _ => parse_query(&query),
    };
    let Some(signed) = signed else {
        return Ok(None);
    };
    let (Signed::Header { scope, .. } | Signed::Query { scope, .. }) = &signed;
    if !any_region && valid(&scope.region) {
        return Ok(None);
    }
    let secret = auth.secret(&scope.key).await?;
    let parts = parts(req, query.clone());
    // Which path form the client signed: s3s tries the re-encoded one, then
    // the raw one, and so does this.
    let verified = |scope: &Scope, signed: &[String], payload: &str, date: &str, sig: &str| {
        let names: Vec<&str> = signed.iter().map(String::as_str).collect();
        [false, true].into_iter().find(|raw| {
            parts
                .canonical(&names, payload, *raw)
                .is_some_and(|c| scope.sign(secret.expose(), date, &c) == sig)
        })
    };
    let raw = match &signed {
        Signed::Header {
            scope,
            signed,
            signature,
        } => {
            let headers = req.headers();
            let payload = headers
                .get("x-amz-content-sha256")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| invalid("missing header: x-amz-content-sha256"))?;
            if payload.starts_with("STREAMING-AWS4-") && !valid(&scope.region) {
                return Err(invalid(
                    "a body signed chunk by chunk (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) needs a \
                     region of lower-case letters, digits and '-' in its credential scope",
                ));
            }
            let date = headers
                .get("x-amz-date")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| invalid("missing header: x-amz-date"))?;
            verified(scope, signed, payload, date, signature)
        }
        Signed::Query {
            scope,
            signed,
            signature,
            date,
        } => verified(scope, signed, "UNSIGNED-PAYLOAD", date, signature),
    };
    let raw = raw.ok_or_else(mismatch)?;
    Ok(Some(Checked {
        signed,
        secret,
        raw,
        query,
    }))
}

/// The credential of a POST form whose policy signature is right: what
/// signs the PUT the form becomes (`form`).
pub struct FormSigner {
    scope: Scope,
    secret: s3s::auth::SecretKey,
}

/// Checks a SigV4 POST form's signature: the policy, base64 as sent,
/// signed with the signing key of the form's `x-amz-credential`, with the
/// access key's secret. A wrong one is SignatureDoesNotMatch.
pub async fn verify_form(
    credential: &str,
    policy: &str,
    signature: &str,
    auth: &Auth,
) -> Result<FormSigner, S3Error> {
    let scope = Scope::parse(credential).ok_or_else(|| {
        invalid("x-amz-credential is not ACCESS-KEY/DATE/REGION/SERVICE/aws4_request")
    })?;
    let secret = auth.secret(&scope.key).await?;
    let right = hex::encode(hmac(&scope.signing_key(secret.expose()), policy.as_bytes()));
    if !right.eq_ignore_ascii_case(signature) {
        return Err(mismatch());
    }
    Ok(FormSigner { scope, secret })
}

/// Checks a SigV2 POST form's signature (`--allow-sigv2`): the policy,
/// base64 as sent, signed with HMAC-SHA1 under the access key's secret,
/// base64. The PUT it becomes is signed with SigV4 for that key, in
/// `SIGV2_FORM_REGION` (SigV2 names none).
pub async fn verify_form_v2(
    access_key: &str,
    policy: &str,
    signature: &str,
    auth: &Auth,
) -> Result<FormSigner, S3Error> {
    use base64::Engine as _;
    let secret = auth.secret(access_key).await?;
    let mut m = <Hmac<sha1::Sha1>>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes any key length");
    m.update(policy.as_bytes());
    let right = base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes());
    if right != signature {
        return Err(mismatch());
    }
    Ok(FormSigner {
        scope: Scope {
            key: access_key.to_string(),
            date: String::new(),
            region: SIGV2_FORM_REGION.to_string(),
            service: "s3".to_string(),
        },
        secret,
    })
}

/// The region a SigV2 form's PUT is signed in.
const SIGV2_FORM_REGION: &str = "us-east-1";

impl FormSigner {
    /// Signs `req` (a PUT whose body the gateway streams, so
    /// `UNSIGNED-PAYLOAD`) as the form's credential at `now`: sets
    /// `x-amz-date`, `x-amz-content-sha256` and `Authorization`, signing
    /// those and `host`. The scope is dated `now` (the form's own date may
    /// be as old as its policy allows) and names the form's region, or its
    /// normalized name where s3s would refuse it.
    pub fn sign_put<B>(
        &self,
        req: &mut Request<B>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), S3Error> {
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let region = if valid(&self.scope.region) {
            self.scope.region.clone()
        } else {
            normalized(&self.scope.region)
        };
        let scope = Scope {
            key: self.scope.key.clone(),
            date: now.format("%Y%m%d").to_string(),
            region,
            service: "s3".to_string(),
        };
        let h = req.headers_mut();
        h.insert(
            "x-amz-date",
            HeaderValue::from_str(&amz_date).map_err(|_| mismatch())?,
        );
        h.insert(
            "x-amz-content-sha256",
            HeaderValue::from_static("UNSIGNED-PAYLOAD"),
        );
        let names = ["host", "x-amz-content-sha256", "x-amz-date"];
        let c = parts(req, Vec::new())
            .canonical(&names, "UNSIGNED-PAYLOAD", true)
            .ok_or_else(mismatch)?;
        let value = format!(
            "{ALGORITHM} Credential={}, SignedHeaders={}, Signature={}",
            scope.credential(),
            names.join(";"),
            scope.sign(self.secret.expose(), &amz_date, &c)
        );
        let value = HeaderValue::from_str(&value).map_err(|_| mismatch())?;
        req.headers_mut().insert(http::header::AUTHORIZATION, value);
        Ok(())
    }
}

/// Checks `req`'s SigV4 signature before anything of its body is read:
/// `Ok(true)` when it is right, `Ok(false)` when the request is not SigV4
/// (unsigned, SigV2, malformed), and a refusal when it is wrong. s3s checks
/// it again, with the payload's hash, as it reads the body.
pub async fn verify<B>(req: &Request<B>, auth: &Auth) -> Result<bool, S3Error> {
    Ok(check(req, auth, true).await?.is_some())
}

/// Re-signs `req` for its region's normalized name when its SigV4 scope
/// names a region s3s refuses and its signature is right; leaves every
/// other request as it is (s3s checks those). Refuses a wrong signature.
pub async fn resign<B>(req: &mut Request<B>, auth: &Auth) -> Result<(), S3Error> {
    let Some(Checked {
        signed,
        secret,
        raw,
        query,
    }) = check(req, auth, false).await?
    else {
        return Ok(());
    };
    let parts = parts(req, query);
    match signed {
        Signed::Header {
            scope,
            signed,
            signature: _,
        } => {
            let headers = req.headers();
            let payload = headers
                .get("x-amz-content-sha256")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(mismatch)?;
            let date = headers
                .get("x-amz-date")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(mismatch)?;
            let names: Vec<&str> = signed.iter().map(String::as_str).collect();
            let to = scope.with_region(normalized(&scope.region));
            let c = parts.canonical(&names, payload, raw).ok_or_else(mismatch)?;
            let value = format!(
                "{ALGORITHM} Credential={}, SignedHeaders={}, Signature={}",
                to.credential(),
                signed.join(";"),
                to.sign(secret.expose(), date, &c)
            );
            let value = HeaderValue::from_str(&value).map_err(|_| mismatch())?;
            req.headers_mut().insert(http::header::AUTHORIZATION, value);
        }
        Signed::Query {
            scope,
            signed,
            signature: _,
            date,
        } => {
            let names: Vec<&str> = signed.iter().map(String::as_str).collect();
            // The credential is part of the signed query: sign the query
            // that names the new region.
            let to = scope.with_region(normalized(&scope.region));
            let mut query = parts.query.clone();
            for (k, v) in &mut query {
                if k == "X-Amz-Credential" {
                    *v = to.credential();
                }
            }
            let parts = Parts { query, ..parts };
            let c = parts
                .canonical(&names, "UNSIGNED-PAYLOAD", raw)
                .ok_or_else(mismatch)?;
            let sig = to.sign(secret.expose(), &date, &c);
            let mut q = form_urlencoded::Serializer::new(String::new());
            for (k, v) in &parts.query {
                if k == "X-Amz-Signature" {
                    q.append_pair(k, &sig);
                } else {
                    q.append_pair(k, v);
                }
            }
            let pq = format!("{}?{}", req.uri().path(), q.finish());
            let mut uri = req.uri().clone().into_parts();
            uri.path_and_query = Some(pq.parse().map_err(|_| mismatch())?);
            *req.uri_mut() = http::Uri::from_parts(uri).map_err(|_| mismatch())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published SigV4 example (GET Object with a range,
    /// docs.aws.amazon.com, "Signature Calculations for the Authorization
    /// Header"): the canonical request and signing key here give its
    /// signature.
    #[test]
    fn aws_example_signature() {
        let mut h = HeaderMap::new();
        h.insert(
            "host",
            HeaderValue::from_static("examplebucket.s3.amazonaws.com"),
        );
        h.insert("range", HeaderValue::from_static("bytes=0-9"));
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        h.insert("x-amz-content-sha256", HeaderValue::from_static(empty));
        h.insert("x-amz-date", HeaderValue::from_static("20130524T000000Z"));
        let parts = Parts {
            method: &Method::GET,
            path: "/test.txt",
            query: vec![],
            headers: &h,
            authority: None,
        };
        let names = ["host", "range", "x-amz-content-sha256", "x-amz-date"];
        let c = parts.canonical(&names, empty, false).unwrap();
        let scope =
            Scope::parse("AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request").unwrap();
        assert_eq!(
            scope.sign(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20130524T000000Z",
                &c
            ),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn regions_are_normalized() {
        assert!(valid("us-east-1"));
        assert!(!valid("US"));
        assert!(!valid(""));
        assert!(!valid("eu_west"));
        assert_eq!(normalized("US"), "us");
        assert_eq!(normalized("eu_West.1"), "eu-west-1");
        let s = Scope::parse("AK/20270115/US/s3/aws4_request").unwrap();
        assert_eq!(s.region, "US");
        assert_eq!(
            s.with_region("us".into()).credential(),
            "AK/20270115/us/s3/aws4_request"
        );
        assert!(Scope::parse("AK/20270115/US/s3/other").is_none());
    }

    #[test]
    fn canonical_queries_are_sorted_and_encoded() {
        let h = HeaderMap::new();
        let parts = Parts {
            method: &Method::GET,
            path: "/b/a%20key",
            query: vec![
                ("prefix".into(), "x y".into()),
                ("X-Amz-Signature".into(), "s".into()),
                ("acl".into(), String::new()),
            ],
            headers: &h,
            authority: None,
        };
        let c = parts.canonical(&[], "UNSIGNED-PAYLOAD", false).unwrap();
        assert_eq!(
            c,
            "GET\n/b/a%20key\nacl=&prefix=x%20y\n\n\nUNSIGNED-PAYLOAD"
        );
    }
}
