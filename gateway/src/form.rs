//! POST form uploads, signed with SigV4 (or SigV2, with `--allow-sigv2`),
//! streamed as PUTs are.
//!
//! s3s reads a form's file whole into memory before the operation runs. So
//! the front end does what s3s would before the file, itself, on the fields
//! read by `post` (at most 64 KiB):
//! - checks the policy's signature with the access key's secret
//!   (SignatureDoesNotMatch): SigV4's `x-amz-signature` with the signing key
//!   of `x-amz-credential`, or SigV2's `signature`, an HMAC-SHA1 of the
//!   policy, for `AWSAccessKeyId`; then its expiry (AccessDenied), each
//!   condition and the bucket (AccessDenied, "Policy Condition failed", as
//!   S3 answers), that every field is named by a condition (AccessDenied),
//!   and the file's length against `content-length-range` (EntityTooLarge,
//!   EntityTooSmall), the length being the form's less what comes before
//!   the file and the closing `\r\n--BOUNDARY--\r\n`; a policy that cannot
//!   be read is InvalidPolicyDocument;
//! - then hands s3s a PUT of the file to the form's key (`${filename}`
//!   replaced by the file's name), its fields as the PUT's headers
//!   (Content-Type, metadata and the rest), signed anew for the form's
//!   credential with `UNSIGNED-PAYLOAD`: s3s checks it and the access as
//!   for any PUT, and the data path streams the file into blocks;
//! - and answers as S3 answers a form: 204, or `success_action_status`
//!   200 or 201 (with a `PostResponse`), or a 303 to
//!   `success_action_redirect`.
//!
//! The file must be the form's last part, closed as browsers and SDKs
//! close it: the bytes after it are checked before its last bytes are
//! handed on, so a form that ends otherwise stores nothing
//! (MalformedPOSTRequest).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, ETAG, LOCATION};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use s3s::post_policy::{PostPolicy, PostPolicyCondition};
use s3s::{HttpResponse, S3Error, S3ErrorCode};

use crate::auth::Auth;
use crate::post::{Admitted, Form, SignedForm};

/// What may follow the file part: its closing delimiter, and a little
/// more a client may add after it (an epilogue is not expected).
const MAX_TRAILER: usize = 4096;
/// S3's largest single PUT, 5 GiB (the data path's `MAX_PUT_SIZE`).
const MAX_FILE: u64 = 5 << 30;

fn error(code: S3ErrorCode, why: impl Into<String>) -> S3Error {
    S3Error::with_message(code, why.into())
}

/// How to answer a form once its PUT is answered.
pub struct Reply {
    bucket: String,
    key: String,
    redirect: Option<String>,
    status: Option<String>,
    /// Set by the file's stream when the form turned out malformed.
    malformed: Arc<Mutex<Option<&'static str>>>,
}

/// Form fields sent as the PUT's headers of the same name.
const HEADERS: &[&str] = &[
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-md5",
    "content-type",
    "expires",
    "x-amz-storage-class",
    "x-amz-website-redirect-location",
    "x-amz-sdk-checksum-algorithm",
];

/// Fields no condition needs to name (as s3s and S3 have it).
fn exempt(name: &str) -> bool {
    matches!(
        name,
        "x-amz-signature" | "signature" | "awsaccesskeyid" | "file" | "submit" | "policy"
    ) || name.starts_with("x-amz-server-side-encryption")
        || name.starts_with("x-ignore-")
}

/// The header a form field becomes, if any.
fn header_of(name: &str) -> Option<HeaderName> {
    let h = if name == "acl" {
        "x-amz-acl"
    } else if HEADERS.contains(&name)
        || name.starts_with("x-amz-meta-")
        || name.starts_with("x-amz-checksum-")
        || name.starts_with("x-amz-grant-")
        || name.starts_with("x-amz-server-side-encryption")
    {
        name
    } else {
        return None;
    };
    HeaderName::from_bytes(h.as_bytes()).ok()
}

/// Checks `policy`'s conditions against the form's fields (its key as
/// stored, `${filename}` replaced, as S3 checks it), the bucket the form
/// was sent to and its file's length.
fn check_conditions(
    policy: &PostPolicy,
    form: &Form,
    key: &str,
    bucket: &str,
    file_len: u64,
) -> Result<(), S3Error> {
    if let Some(b) = form.get("bucket")
        && b != bucket
    {
        return Err(error(
            S3ErrorCode::AccessDenied,
            format!(
                "Invalid according to Policy: the form's bucket field {b:?} is not the bucket \
                 it was sent to, {bucket:?}"
            ),
        ));
    }
    let value = |field: &str| match field {
        "bucket" => Some(bucket),
        "key" => Some(key),
        _ => form.get(field),
    };
    for c in &policy.conditions {
        match c {
            PostPolicyCondition::Eq { field, value: want } => {
                if value(field) != Some(want.as_str()) {
                    return Err(error(
                        S3ErrorCode::AccessDenied,
                        format!(
                            "Invalid according to Policy: Policy Condition failed: \
                             [\"eq\", \"${field}\", {want:?}]"
                        ),
                    ));
                }
            }
            PostPolicyCondition::StartsWith { field, prefix } => {
                if !value(field).unwrap_or("").starts_with(prefix.as_str()) {
                    return Err(error(
                        S3ErrorCode::AccessDenied,
                        format!(
                            "Invalid according to Policy: Policy Condition failed: \
                             [\"starts-with\", \"${field}\", {prefix:?}]"
                        ),
                    ));
                }
            }
            PostPolicyCondition::ContentLengthRange { min, max } => {
                if file_len > *max {
                    return Err(error(
                        S3ErrorCode::EntityTooLarge,
                        "Your proposed upload exceeds the maximum allowed size",
                    ));
                }
                if file_len < *min {
                    return Err(error(
                        S3ErrorCode::EntityTooSmall,
                        "Your proposed upload is smaller than the minimum allowed size",
                    ));
                }
            }
        }
    }
    for (name, _) in &form.fields {
        let named = policy.conditions.iter().any(|c| match c {
            PostPolicyCondition::Eq { field, .. }
            | PostPolicyCondition::StartsWith { field, .. } => field == name,
            PostPolicyCondition::ContentLengthRange { .. } => false,
        });
        if !exempt(name) && !named {
            return Err(error(
                S3ErrorCode::AccessDenied,
                format!(
                    "Invalid according to Policy: Extra input fields: {name} (each field of \
                     the form must be named by a condition of its policy)"
                ),
            ));
        }
    }
    Ok(())
}

/// The policy (base64, as sent), decoded once: its expiration must be as
/// S3 wants it, `YYYY-MM-DDThh:mm:ss[.fff]Z` (s3s also takes other forms,
/// a space for the `T` or an offset, which S3 refuses).
fn read_policy(policy_b64: &str) -> Result<PostPolicy, String> {
    use base64::Engine as _;
    let json = base64::engine::general_purpose::STANDARD
        .decode(policy_b64.trim())
        .map_err(|e| e.to_string())?;
    let json = String::from_utf8(json).map_err(|e| e.to_string())?;
    let doc: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let exp = doc
        .get("expiration")
        .and_then(|e| e.as_str())
        .ok_or("no expiration")?;
    if !is_iso8601_utc(exp) {
        return Err(format!(
            "its expiration {exp:?} is not YYYY-MM-DDThh:mm:ss[.fff]Z"
        ));
    }
    PostPolicy::from_json(&json).map_err(|e| e.to_string())
}

/// `YYYY-MM-DDThh:mm:ss[.fff]Z`.
fn is_iso8601_utc(exp: &str) -> bool {
    let b = exp.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    fixed
        && match &b[19..] {
            [b'Z'] => true,
            [b'.', frac @ .., b'Z'] => !frac.is_empty() && frac.iter().all(u8::is_ascii_digit),
            _ => false,
        }
}

/// `\r\n--BOUNDARY`, which no bytes of a file part may hold (it would end
/// the part), looked for in the file's bytes as they pass, across chunks.
struct Delimiter {
    finder: memchr::memmem::Finder<'static>,
    /// The last bytes passed, one fewer than the delimiter's.
    last: Vec<u8>,
}

impl Delimiter {
    fn new(boundary: &str) -> Delimiter {
        Delimiter {
            finder: memchr::memmem::Finder::new(format!("\r\n--{boundary}").as_bytes())
                .into_owned(),
            last: Vec::new(),
        }
    }

    /// Whether the delimiter is within the bytes passed so far and `next`.
    fn within(&mut self, next: &[u8]) -> bool {
        let keep = self.finder.needle().len() - 1;
        let mut seam = std::mem::take(&mut self.last);
        seam.extend_from_slice(&next[..next.len().min(keep)]);
        if self.finder.find(&seam).is_some() || self.finder.find(next).is_some() {
            return true;
        }
        if next.len() >= keep {
            seam.clear();
            seam.extend_from_slice(&next[next.len() - keep..]);
        } else {
            let cut = seam.len().saturating_sub(keep);
            seam.drain(..cut);
        }
        self.last = seam;
        false
    }
}

/// The file part of a form as the PUT's body: `left` bytes of it, the last
/// of them held back until what follows them is known to be the form's
/// closing delimiter.
struct FilePart {
    first: Option<Bytes>,
    body: Incoming,
    left: u64,
    held: Option<Bytes>,
    trailer: Vec<u8>,
    close: Vec<u8>,
    delimiter: Delimiter,
    malformed: Arc<Mutex<Option<&'static str>>>,
    done: bool,
}

impl FilePart {
    fn fail(&self, why: &'static str) -> std::io::Error {
        *self.malformed.lock().expect("not poisoned") = Some(why);
        std::io::Error::other(why)
    }

    async fn next(mut self) -> Result<Option<(Bytes, FilePart)>, std::io::Error> {
        if self.done {
            return Ok(None);
        }
        loop {
            let chunk = match self.first.take() {
                Some(b) => b,
                None => match self.body.frame().await {
                    None => break,
                    Some(Err(_)) => {
                        return Err(std::io::Error::other("the form's body ended early"));
                    }
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => d,
                        Err(_) => continue,
                    },
                },
            };
            if chunk.is_empty() {
                continue;
            }
            if self.left == 0 {
                self.trailer.extend_from_slice(&chunk);
                if self.trailer.len() > MAX_TRAILER {
                    return Err(self.fail("the form goes on after its file part"));
                }
                continue;
            }
            let mut file = chunk;
            let n = usize::try_from(self.left)
                .unwrap_or(usize::MAX)
                .min(file.len());
            let extra = file.split_off(n);
            if self.delimiter.within(&file) {
                return Err(self
                    .fail("the form goes on after its file part: the file must be its last part"));
            }
            self.left -= n as u64;
            self.trailer.extend_from_slice(&extra);
            if self.left > 0 {
                return Ok(Some((file, self)));
            }
            self.held = Some(file);
        }
        if self.left > 0 {
            return Err(std::io::Error::other("the form's body ended early"));
        }
        if self.trailer != self.close {
            return Err(self.fail(
                "the file must be the form's last part, followed only by \
                 \\r\\n--BOUNDARY--\\r\\n",
            ));
        }
        self.done = true;
        match self.held.take() {
            Some(h) if !h.is_empty() => Ok(Some((h, self))),
            _ => Ok(None),
        }
    }
}

/// The bucket a form was sent to: the host's (virtual-host style), else
/// the path's first segment.
fn bucket_of(
    parts: &http::request::Parts,
    domains: Option<&crate::host::Domains>,
) -> Option<String> {
    let path = parts.uri.path().trim_matches('/');
    if !path.is_empty() {
        return crate::uri::decode(path, false).filter(|b| !b.contains('/'));
    }
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))?;
    domains?.bucket(host).map(str::to_string)
}

/// Checks the SigV4 form `signed` (boundary `boundary`) and turns it into
/// a streamed PUT of its file, and how to answer it; refuses it before
/// reading any more of it when its policy does not allow it.
pub async fn stream(
    signed: SignedForm,
    boundary: &str,
    auth: &Auth,
    domains: Option<&crate::host::Domains>,
) -> Result<(Admitted, Reply), S3Error> {
    let SignedForm {
        mut parts,
        mut read,
        body,
        len: form_len,
        file_at,
        form,
    } = signed;
    let field = |name: &str| {
        form.get(name).ok_or_else(|| {
            error(
                S3ErrorCode::InvalidArgument,
                format!("a signed form needs the field {name}"),
            )
        })
    };
    let policy_b64 = field("policy")?;
    let signer = match form.get("x-amz-signature") {
        Some(signature) => {
            let algorithm = field("x-amz-algorithm")?;
            if algorithm != "AWS4-HMAC-SHA256" {
                return Err(error(
                    S3ErrorCode::InvalidArgument,
                    format!("x-amz-algorithm {algorithm:?} is not AWS4-HMAC-SHA256"),
                ));
            }
            crate::scope::verify_form(field("x-amz-credential")?, policy_b64, signature, auth)
                .await?
        }
        // SigV2 (`post::admit` let it through only with --allow-sigv2).
        None => {
            crate::scope::verify_form_v2(
                field("awsaccesskeyid")?,
                policy_b64,
                field("signature")?,
                auth,
            )
            .await?
        }
    };
    let policy = read_policy(policy_b64).map_err(|e| {
        error(
            S3ErrorCode::InvalidPolicyDocument,
            format!("the form's policy cannot be read: {e}"),
        )
    })?;
    let now = chrono::Utc::now();
    let expires: time::OffsetDateTime = policy.expiration.clone().into();
    if now.timestamp() >= expires.unix_timestamp() {
        return Err(error(
            S3ErrorCode::AccessDenied,
            "Invalid according to Policy: Policy expired.",
        ));
    }
    let close = format!("\r\n--{boundary}--\r\n").into_bytes();
    let file_len = form_len
        .checked_sub(file_at as u64 + close.len() as u64)
        .ok_or_else(|| {
            error(
                S3ErrorCode::MalformedPOSTRequest,
                "the form is shorter than its fields and closing delimiter",
            )
        })?;
    if file_len > MAX_FILE {
        return Err(error(
            S3ErrorCode::EntityTooLarge,
            "a form's file may be at most 5 GiB: use a multipart upload",
        ));
    }
    let bucket = bucket_of(&parts, domains).ok_or_else(|| {
        error(
            S3ErrorCode::InvalidRequest,
            "a form is sent to a bucket: POST /BUCKET or to BUCKET.DOMAIN",
        )
    })?;
    let key = field("key")?.replace("${filename}", form.filename.as_deref().unwrap_or(""));
    check_conditions(&policy, &form, &key, &bucket, file_len)?;
    if key.is_empty() {
        return Err(error(
            S3ErrorCode::InvalidArgument,
            "the form's key is empty",
        ));
    }

    // The PUT: the form's path and the key, its fields as headers.
    let mut path = parts.uri.path().trim_end_matches('/').to_string();
    path.push('/');
    crate::uri::encode_into(&mut path, &key, true);
    let uri = match (parts.uri.scheme(), parts.uri.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}{path}"),
        _ => path,
    };
    parts.uri = uri
        .parse()
        .map_err(|_| error(S3ErrorCode::InvalidArgument, "the form's key makes no URI"))?;
    parts.method = Method::PUT;
    let sent: Vec<HeaderName> = parts.headers.keys().cloned().collect();
    for name in sent {
        let n = name.as_str();
        if n != "host" && n != "user-agent" && n != "connection" {
            parts.headers.remove(&name);
        }
    }
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(file_len));
    for (name, value) in &form.fields {
        let Some(h) = header_of(name) else { continue };
        let v = HeaderValue::from_bytes(value.trim().as_bytes()).map_err(|_| {
            error(
                S3ErrorCode::InvalidArgument,
                format!("the form field {name} holds characters a header cannot"),
            )
        })?;
        parts.headers.append(h, v);
    }
    let malformed = Arc::new(Mutex::new(None));
    let rest = read.split_off(file_at);
    drop(read);
    let file = FilePart {
        first: (!rest.is_empty()).then(|| Bytes::from(rest)),
        body,
        left: file_len,
        held: None,
        trailer: Vec::new(),
        delimiter: Delimiter::new(boundary),
        close,
        malformed: malformed.clone(),
        done: false,
    };
    let stream = futures::stream::try_unfold(file, FilePart::next);
    let stream = futures::StreamExt::map(stream, |r| r.map(Frame::data));
    let mut req = Request::from_parts(
        parts,
        s3s::Body::http_body_unsync(http_body_util::StreamBody::new(stream)),
    );
    signer.sign_put(&mut req, now)?;
    Ok((
        Admitted { req, permit: None },
        Reply {
            bucket,
            key,
            redirect: form
                .get("success_action_redirect")
                .or_else(|| form.get("redirect"))
                .map(str::to_string),
            status: form.get("success_action_status").map(str::to_string),
            malformed,
        },
    ))
}

/// `s` with XML's special characters escaped.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Reply {
    /// The form's answer, from its PUT's.
    pub fn answer(self, put: HttpResponse) -> Result<HttpResponse, S3Error> {
        if let Some(why) = self.malformed.lock().expect("not poisoned").take() {
            return Err(error(S3ErrorCode::MalformedPOSTRequest, why));
        }
        if !put.status().is_success() {
            return Ok(put);
        }
        let etag = put.headers().get(ETAG).cloned();
        let etag_text = etag
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut resp = HttpResponse::new(s3s::Body::empty());
        for name in [ETAG.as_str(), "x-amz-version-id"] {
            if let Some(v) = put.headers().get(name) {
                resp.headers_mut().insert(name, v.clone());
            }
        }
        let location = format!(
            "/{}/{}",
            crate::uri::encode(&self.bucket, false),
            crate::uri::encode(&self.key, true)
        );
        if let Some(to) = self.redirect {
            let mut url = url::Url::parse(&to)
                .ok()
                .filter(|_| !to.chars().any(char::is_control))
                .ok_or_else(|| {
                    error(
                        S3ErrorCode::InvalidArgument,
                        "success_action_redirect is not a URL",
                    )
                })?;
            url.query_pairs_mut()
                .append_pair("bucket", &self.bucket)
                .append_pair("key", &self.key)
                .append_pair("etag", &etag_text);
            *resp.status_mut() = StatusCode::SEE_OTHER;
            let v = HeaderValue::from_str(url.as_str())
                .map_err(|_| S3Error::new(S3ErrorCode::InternalError))?;
            resp.headers_mut().insert(LOCATION, v);
            return Ok(resp);
        }
        if let Ok(v) = HeaderValue::from_str(&location) {
            resp.headers_mut().insert(LOCATION, v);
        }
        match self.status.as_deref() {
            Some("200") => *resp.status_mut() = StatusCode::OK,
            Some("201") => {
                *resp.status_mut() = StatusCode::CREATED;
                let body = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse>\
                     <Location>{}</Location><Bucket>{}</Bucket><Key>{}</Key>\
                     <ETag>{}</ETag></PostResponse>",
                    xml(&location),
                    xml(&self.bucket),
                    xml(&self.key),
                    xml(&etag_text)
                );
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/xml"),
                );
                *resp.body_mut() = s3s::Body::from(body);
            }
            _ => *resp.status_mut() = StatusCode::NO_CONTENT,
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&str, &str)]) -> Form {
        Form {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            filename: Some("photo.jpg".into()),
        }
    }

    fn key_of(f: &Form) -> &str {
        f.get("key").unwrap_or("")
    }

    #[test]
    fn the_key_is_checked_with_the_file_name_in_it() {
        let p = policy(r#"[["starts-with","$key","foo"]]"#);
        let f = form(&[("key", "${filename}")]);
        assert!(check_conditions(&p, &f, "foo.txt", "b", 1).is_ok());
        assert_eq!(
            check_conditions(&p, &f, "bar.txt", "b", 1)
                .unwrap_err()
                .code()
                .clone(),
            S3ErrorCode::AccessDenied
        );
    }

    #[test]
    fn the_expiration_is_iso_8601_as_s3_wants_it() {
        use base64::Engine as _;
        let b64 = |exp: &str| {
            base64::engine::general_purpose::STANDARD
                .encode(format!("{{\"expiration\":\"{exp}\",\"conditions\":[]}}"))
        };
        for ok in ["2099-01-01T00:00:00Z", "2099-01-01T00:00:00.000Z"] {
            assert!(read_policy(&b64(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "2099-01-01 00:00:00.123456+00:00",
            "2099-01-01T00:00:00+00:00",
            "2099-01-01T00:00:00",
            "2099-01-01T00:00:00.Z",
            "20990101T000000Z",
        ] {
            assert!(read_policy(&b64(bad)).is_err(), "{bad}");
        }
    }

    fn policy(conditions: &str) -> PostPolicy {
        PostPolicy::from_json(&format!(
            "{{\"expiration\":\"2099-01-01T00:00:00Z\",\"conditions\":{conditions}}}"
        ))
        .unwrap()
    }

    #[test]
    fn conditions_are_checked_on_the_fields_and_the_length() {
        let p = policy(
            r#"[{"bucket":"b"},["starts-with","$key","user/"],["content-length-range",1,100],
                {"x-amz-algorithm":"AWS4-HMAC-SHA256"},["starts-with","$x-amz-credential",""],
                ["starts-with","$x-amz-date",""]]"#,
        );
        let base = [
            ("key", "user/a"),
            ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
            ("x-amz-credential", "K/20270101/us-east-1/s3/aws4_request"),
            ("x-amz-date", "20270101T000000Z"),
            ("policy", "..."),
            ("x-amz-signature", "ab"),
        ];
        let code = |r: Result<(), S3Error>| r.unwrap_err().code().clone();
        assert!(check_conditions(&p, &form(&base), key_of(&form(&base)), "b", 10).is_ok());
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&base),
                key_of(&form(&base)),
                "other",
                10
            )),
            S3ErrorCode::AccessDenied
        );
        let mut wrong_key = base;
        wrong_key[0] = ("key", "admin/a");
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&wrong_key),
                key_of(&form(&wrong_key)),
                "b",
                10
            )),
            S3ErrorCode::AccessDenied
        );
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&base),
                key_of(&form(&base)),
                "b",
                101
            )),
            S3ErrorCode::EntityTooLarge
        );
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&base),
                key_of(&form(&base)),
                "b",
                0
            )),
            S3ErrorCode::EntityTooSmall
        );
        // A field no condition names, and a bucket field that disagrees.
        let mut extra = base.to_vec();
        extra.push(("x-amz-meta-color", "red"));
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&extra),
                key_of(&form(&extra)),
                "b",
                10
            )),
            S3ErrorCode::AccessDenied
        );
        let mut ignored = base.to_vec();
        ignored.push(("x-ignore-me", "1"));
        assert!(check_conditions(&p, &form(&ignored), key_of(&form(&ignored)), "b", 10).is_ok());
        let mut bucket = base.to_vec();
        bucket.push(("bucket", "c"));
        assert_eq!(
            code(check_conditions(
                &p,
                &form(&bucket),
                key_of(&form(&bucket)),
                "b",
                10
            )),
            S3ErrorCode::AccessDenied
        );
    }

    #[test]
    fn the_delimiter_is_found_across_chunks() {
        let whole = b"abc\r\n--XyZ\r\nmore";
        for cut in 0..whole.len() {
            for cut2 in cut..whole.len() {
                let mut d = Delimiter::new("XyZ");
                let found = d.within(&whole[..cut])
                    || d.within(&whole[cut..cut2])
                    || d.within(&whole[cut2..]);
                assert!(found, "{cut} {cut2}");
            }
        }
        let mut d = Delimiter::new("XyZ");
        assert!(!d.within(b"abc\r\n--X"));
        assert!(!d.within(b"y"));
        assert!(!d.within(b"\r\n--Xy\r\n-- XyZ"));
    }

    #[test]
    fn fields_become_headers() {
        assert_eq!(header_of("content-type").unwrap(), "content-type");
        assert_eq!(header_of("acl").unwrap(), "x-amz-acl");
        assert_eq!(header_of("x-amz-meta-a").unwrap(), "x-amz-meta-a");
        assert!(header_of("key").is_none());
        assert!(header_of("policy").is_none());
        assert!(header_of("x-amz-credential").is_none());
        assert!(header_of("success_action_status").is_none());
    }
}
