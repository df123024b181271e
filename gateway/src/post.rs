//! POST form uploads (`PostObject`, a browser's upload) read nothing of
//! the file before the form is known to be signed, and cost no more
//! memory than a PUT.
//!
//! s3s parses the form, verifies its policy signature before it reads the
//! file, but then reads the whole file into memory (up to its
//! `post_object_max_file_size`) before the operation runs; an unsigned form
//! was read whole before the access check refused it. So the front end
//! reads the form's fields itself, at most `MAX_FORM_FIELDS_BYTES`, up to
//! the file part, and
//! - refuses a form that carries no signature (`x-amz-signature`, or
//!   `signature` of SigV2 when `--allow-sigv2`): om has no anonymous user,
//!   so it could only be refused after the upload; one with a policy but
//!   no signature is malformed (400 InvalidArgument);
//! - refuses a form without Content-Length (411);
//! - hands a signed form to `form`, which checks its policy and streams
//!   its file as a PUT.
//!
//! So unsigned forms cost at most the fields' bytes, signed ones what a
//! PUT costs. The budget here (`--post-memory-bytes`) bounds the uploads
//! without a length (`length`), which are held whole.

use std::sync::Arc;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use s3s::{S3Error, S3ErrorCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most bytes of a form before its file part (S3 bounds a POST policy to
/// 20 KB; the other fields are a few names and values).
pub const MAX_FORM_FIELDS_BYTES: usize = 64 * 1024;
/// Most fields a form may have before its file part.
pub const MAX_FORM_PARTS: usize = 64;
/// The budget is counted in units of this many bytes.
const UNIT: u64 = 1024;

/// The upload memory budget: bytes of POST uploads, and of uploads without
/// a Content-Length (`length`), held at once.
#[derive(Clone)]
pub struct Budget {
    bytes: u64,
    units: Arc<Semaphore>,
}

impl Budget {
    pub fn new(bytes: u64) -> Budget {
        let units = (bytes / UNIT).clamp(1, u64::from(u32::MAX));
        Budget {
            bytes: units * UNIT,
            units: Arc::new(Semaphore::new(units as usize)),
        }
    }

    /// The most one form may be (and all of them together).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Makes `held` hold `total` bytes, taking what more that needs (a body
    /// read as it arrives); `false` when the budget has not that much free.
    pub fn hold(&self, held: &mut Option<OwnedSemaphorePermit>, total: u64) -> bool {
        let want = total.div_ceil(UNIT).max(1);
        let have = held.as_ref().map_or(0, |p| p.num_permits() as u64);
        if want <= have {
            return true;
        }
        let Some(more) = u32::try_from(want - have)
            .ok()
            .and_then(|n| self.units.clone().try_acquire_many_owned(n).ok())
        else {
            return false;
        };
        match held {
            Some(h) => h.merge(more),
            None => *held = Some(more),
        }
        true
    }
}

/// The boundary of a `multipart/form-data` POST, or `None` for any other
/// request.
pub fn form_boundary<B>(req: &Request<B>) -> Option<String> {
    if req.method() != http::Method::POST {
        return None;
    }
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    let mut parts = ct.split(';');
    if !parts
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    parts.find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// What the bytes read so far of a form say.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// More bytes are needed.
    More,
    /// The file part's headers end at this offset; the form's fields.
    File(usize, Form),
    Malformed(&'static str),
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The fields of a form before its file part (names in lower case), and
/// the file's name.
#[derive(Debug, PartialEq, Eq)]
pub struct Form {
    pub fields: Vec<(String, String)>,
    pub filename: Option<String>,
}

impl Form {
    /// The value of the field `name` (lower case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The parameter `param` of a part's `Content-Disposition: form-data;
/// name="..."; filename="..."`.
fn disposition(headers: &str, param: &str) -> Option<String> {
    let line = headers.split("\r\n").find(|l| {
        l.split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("content-disposition"))
    })?;
    let (_, v) = line.split_once(':')?;
    v.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.trim() == param).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Reads the fields of a form (as s3s does: parts until the one named
/// `file`) from `buf`, the first bytes of its body.
fn scan(buf: &[u8], boundary: &str) -> Scan {
    let delim = format!("--{boundary}");
    let Some(first) = find(buf, delim.as_bytes(), 0) else {
        return Scan::More;
    };
    let mut at = first + delim.len();
    let mut fields = Vec::new();
    loop {
        match buf.get(at..at + 2) {
            None => return Scan::More,
            Some(b"\r\n") => at += 2,
            Some(_) => return Scan::Malformed("the form ends before its file part"),
        }
        let Some(head_end) = find(buf, b"\r\n\r\n", at) else {
            return Scan::More;
        };
        let Ok(headers) = std::str::from_utf8(&buf[at..head_end]) else {
            return Scan::Malformed("a form part's headers are not UTF-8");
        };
        let Some(name) = disposition(headers, "name").map(|n| n.to_ascii_lowercase()) else {
            return Scan::Malformed("a form part has no name");
        };
        let body = head_end + 4;
        if name == "file" {
            let filename = disposition(headers, "filename");
            return Scan::File(body, Form { fields, filename });
        }
        if fields.len() >= MAX_FORM_PARTS {
            return Scan::Malformed("the form has too many fields");
        }
        let end_delim = format!("\r\n{delim}");
        let Some(end) = find(buf, end_delim.as_bytes(), body) else {
            return Scan::More;
        };
        let value = String::from_utf8_lossy(&buf[body..end]).into_owned();
        fields.push((name, value));
        at = end + end_delim.len();
    }
}

fn error(code: S3ErrorCode, why: &'static str) -> S3Error {
    S3Error::with_message(code, why)
}

/// A request checked and ready for s3s: its body (a form's file as a PUT's,
/// streamed; or an unsized upload's whole body), and its share of the
/// budget, held until the request ends.
pub struct Admitted {
    pub req: Request<s3s::Body>,
    pub permit: Option<OwnedSemaphorePermit>,
}

/// A signed form whose fields were read (`form` checks it).
pub struct SignedForm {
    pub parts: http::request::Parts,
    /// The bytes read: the fields, the file part's headers, perhaps some
    /// of the file.
    pub read: Vec<u8>,
    /// The rest of the body.
    pub body: Incoming,
    /// The form's Content-Length.
    pub len: u64,
    /// Where the file begins in `read`.
    pub file_at: usize,
    pub form: Form,
}

/// Reads the fields of the form POST `req` (boundary `boundary`) and
/// admits it for `form` to check, or refuses it before reading its file.
pub async fn admit(
    req: Request<Incoming>,
    boundary: &str,
    allow_sigv2: bool,
) -> Result<SignedForm, S3Error> {
    let len = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            error(
                S3ErrorCode::MissingContentLength,
                "a POST form upload needs a Content-Length",
            )
        })?;
    let (parts, mut body) = req.into_parts();
    let mut buf: Vec<u8> = Vec::new();
    let (file_at, form) = loop {
        match scan(&buf, boundary) {
            Scan::File(at, form) => break (at, form),
            Scan::Malformed(why) => return Err(error(S3ErrorCode::MalformedPOSTRequest, why)),
            Scan::More => {}
        }
        if buf.len() > MAX_FORM_FIELDS_BYTES {
            return Err(error(
                S3ErrorCode::MalformedPOSTRequest,
                "the form's fields before its file exceed 64 KiB",
            ));
        }
        match body.frame().await {
            None => {
                return Err(error(
                    S3ErrorCode::MalformedPOSTRequest,
                    "the form ends before its file part",
                ));
            }
            Some(Err(_)) => {
                return Err(error(
                    S3ErrorCode::IncompleteBody,
                    "the form's body ended early",
                ));
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    };
    if file_at > MAX_FORM_FIELDS_BYTES {
        return Err(error(
            S3ErrorCode::MalformedPOSTRequest,
            "the form's fields before its file exceed 64 KiB",
        ));
    }
    match (
        form.get("x-amz-signature"),
        form.get("signature"),
        form.get("policy"),
    ) {
        (Some(_), _, _) => {}
        (None, Some(_), _) if !allow_sigv2 => {
            return Err(error(
                S3ErrorCode::AccessDenied,
                "signature version 2 is turned off on this gateway: sign requests with SigV4",
            ));
        }
        (None, Some(_), _) => {}
        // A policy without its signature is a malformed form (S3: 400).
        (None, None, Some(_)) => {
            return Err(error(
                S3ErrorCode::InvalidArgument,
                "the form has a policy but no signature (x-amz-signature, or SigV2's signature)",
            ));
        }
        (None, None, None) => {
            return Err(error(
                S3ErrorCode::AccessDenied,
                "anonymous requests are not accepted: sign the form's policy",
            ));
        }
    }
    Ok(SignedForm {
        parts,
        read: buf,
        body,
        len,
        file_at,
        form,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&str, &str)], file: &str) -> Vec<u8> {
        let mut b = String::new();
        for (k, v) in fields {
            b.push_str(&format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
            ));
        }
        b.push_str(&format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\
             Content-Type: text/plain\r\n\r\n{file}\r\n--XyZ--\r\n"
        ));
        b.into_bytes()
    }

    #[test]
    fn fields_are_read_up_to_the_file() {
        let b = form(&[("key", "k"), ("X-Amz-Signature", "ab")], "data");
        let Scan::File(at, form) = scan(&b, "XyZ") else {
            panic!("{:?}", scan(&b, "XyZ"));
        };
        assert!(b[at..].starts_with(b"data\r\n--XyZ--"));
        assert_eq!(form.filename.as_deref(), Some("f"));
        assert_eq!(form.get("key"), Some("k"));
        assert_eq!(
            form.fields,
            vec![
                ("key".to_string(), "k".to_string()),
                ("x-amz-signature".to_string(), "ab".to_string())
            ]
        );
        // Any prefix short of the file part's headers needs more.
        let head = at - 1;
        for n in 0..head {
            assert_eq!(scan(&b[..n], "XyZ"), Scan::More, "{n}");
        }
        // A form with no file part, or a part without a name, is refused.
        let no_file =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--XyZ--\r\n";
        assert!(matches!(scan(no_file, "XyZ"), Scan::Malformed(_)));
        let nameless = b"--XyZ\r\nContent-Type: text/plain\r\n\r\nk\r\n--XyZ--\r\n";
        assert!(matches!(scan(nameless, "XyZ"), Scan::Malformed(_)));
    }

    #[test]
    fn boundaries_are_found() {
        let r = |ct: &str| {
            Request::builder()
                .method("POST")
                .header("content-type", ct)
                .body(())
                .unwrap()
        };
        assert_eq!(
            form_boundary(&r("multipart/form-data; boundary=XyZ")).as_deref(),
            Some("XyZ")
        );
        assert_eq!(
            form_boundary(&r("Multipart/Form-Data; charset=x; boundary=\"a b\"")).as_deref(),
            Some("a b")
        );
        assert_eq!(form_boundary(&r("application/xml")), None);
        let put = Request::builder()
            .method("PUT")
            .header("content-type", "multipart/form-data; boundary=x")
            .body(())
            .unwrap();
        assert_eq!(form_boundary(&put), None);
    }

    #[test]
    fn the_budget_bounds_uploads_in_all() {
        let b = Budget::new(10 * 1024);
        assert_eq!(b.bytes(), 10 * 1024);
        let (mut one, mut two, mut three) = (None, None, None);
        assert!(b.hold(&mut one, 6 * 1024));
        assert!(!b.hold(&mut two, 6 * 1024));
        assert!(b.hold(&mut two, 4 * 1024));
        drop(one);
        assert!(b.hold(&mut three, 6 * 1024));
    }

    #[test]
    fn a_body_read_as_it_arrives_holds_what_it_read() {
        let b = Budget::new(10 * 1024);
        let mut held = None;
        assert!(b.hold(&mut held, 100));
        assert!(b.hold(&mut held, 5 * 1024));
        assert_eq!(held.as_ref().unwrap().num_permits(), 5);
        let mut other = None;
        assert!(b.hold(&mut other, 4 * 1024));
        assert!(!b.hold(&mut held, 7 * 1024), "past what is free");
        drop(other);
        assert!(b.hold(&mut held, 10 * 1024));
        drop(held);
        let mut all = None;
        assert!(b.hold(&mut all, 10 * 1024), "all of it given back");
    }
}
