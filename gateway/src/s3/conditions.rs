//! Conditional reads and byte ranges, as S3 evaluates them (RFC 9110 with
//! S3's precedence): If-Match, then If-Unmodified-Since only without it
//! (412); If-None-Match, then If-Modified-Since only without it (304 on a
//! read, 412 for a copy source). Times compare at whole seconds, what an
//! HTTP date carries.

use std::ops::Range as Span;

use s3s::dto::{ETagCondition, Range, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::codec;

/// A request's conditions on the object it reads.
#[derive(Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

/// What the conditions say about an object.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    NotModified,
    PreconditionFailed,
}

fn matches(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value().trim_matches('"') == etag.trim_matches('"'),
    }
}

impl Conditions<'_> {
    /// The verdict for an object with `etag`, last modified at `modified_ms`.
    pub fn check(&self, etag: &str, modified_ms: u64) -> Verdict {
        let modified = modified_ms / 1000;
        let secs = |t: &Timestamp| codec::ms(t) / 1000;
        if let Some(c) = self.if_match {
            if !matches(c, etag) {
                return Verdict::PreconditionFailed;
            }
        } else if let Some(t) = self.if_unmodified_since
            && modified > secs(t)
        {
            return Verdict::PreconditionFailed;
        }
        if let Some(c) = self.if_none_match {
            if matches(c, etag) {
                return Verdict::NotModified;
            }
        } else if let Some(t) = self.if_modified_since
            && modified <= secs(t)
        {
            return Verdict::NotModified;
        }
        Verdict::Proceed
    }

    /// `check` as the error a read answers (304 or 412). A 304 carries the
    /// object's `ETag` and `Last-Modified`, as RFC 9110 (15.4.5) and S3 do.
    pub fn for_read(&self, etag: &str, modified_ms: u64) -> S3Result<()> {
        match self.check(etag, modified_ms) {
            Verdict::Proceed => Ok(()),
            Verdict::NotModified => Err(not_modified(etag, modified_ms)),
            Verdict::PreconditionFailed => Err(s3_error!(PreconditionFailed)),
        }
    }

    /// `check` as a copy source answers it: every failure is a 412.
    pub fn for_copy_source(&self, etag: &str, modified_ms: u64) -> S3Result<()> {
        match self.check(etag, modified_ms) {
            Verdict::Proceed => Ok(()),
            _ => Err(s3_error!(PreconditionFailed)),
        }
    }
}

/// S3's 304 for an object with `etag`, last modified at `modified_ms`.
fn not_modified(etag: &str, modified_ms: u64) -> S3Error {
    let mut e = S3Error::new(S3ErrorCode::NotModified);
    let mut h = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", etag.trim_matches('"'))) {
        h.insert(http::header::ETAG, v);
    }
    if let Some(t) = i64::try_from(modified_ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
    {
        let date = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(v) = http::HeaderValue::from_str(&date) {
            h.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(h);
    e
}

/// The bytes a `Range` header selects of an object of `size` bytes (all of
/// them without one); unsatisfiable is InvalidRange (416).
pub fn select(range: Option<&Range>, size: u64) -> S3Result<(Span<u64>, bool)> {
    match range {
        None => Ok((0..size, false)),
        Some(r) => Ok((r.check(size)?, true)),
    }
}

/// A `Content-Range` header value.
pub fn content_range(span: &Span<u64>, size: u64) -> String {
    format!("bytes {}-{}/{size}", span.start, span.end.saturating_sub(1))
}

/// An `x-amz-copy-source-range` (`bytes=first-last`, both required) of a
/// source of `size` bytes.
pub fn copy_source_range(h: Option<&str>, size: u64) -> S3Result<Span<u64>> {
    let Some(h) = h else { return Ok(0..size) };
    let bad = || {
        s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range must be bytes=first-last"
        )
    };
    let (first, last) = h
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = first.parse().map_err(|_| bad())?;
    let last: u64 = last.parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidRange,
            "the copy source range is outside the {size}-byte source"
        ));
    }
    Ok(first..last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;

    fn tag(s: &str) -> ETagCondition {
        ETagCondition::ETag(ETag::Strong(s.to_string()))
    }

    #[test]
    fn etag_conditions() {
        let m = tag("abc");
        let other = tag("xyz");
        let c = Conditions {
            if_match: Some(&m),
            ..Default::default()
        };
        assert_eq!(c.check("abc", 0), Verdict::Proceed);
        assert_eq!(c.check("\"abc\"", 0), Verdict::Proceed);
        let c = Conditions {
            if_match: Some(&other),
            ..Default::default()
        };
        assert_eq!(c.check("abc", 0), Verdict::PreconditionFailed);
        let c = Conditions {
            if_none_match: Some(&m),
            ..Default::default()
        };
        assert_eq!(c.check("abc", 0), Verdict::NotModified);
        let any = ETagCondition::Any;
        let c = Conditions {
            if_none_match: Some(&any),
            ..Default::default()
        };
        assert_eq!(c.check("abc", 0), Verdict::NotModified);
        assert!(c.for_copy_source("abc", 0).is_err());
        let e = c.for_read("abc", 1_000).unwrap_err();
        let h = e.headers().expect("a 304 names the object");
        assert_eq!(h.get("etag").unwrap(), "\"abc\"");
        assert_eq!(
            h.get("last-modified").unwrap(),
            "Thu, 01 Jan 1970 00:00:01 GMT"
        );
    }

    #[test]
    fn time_conditions_and_precedence() {
        let t = codec::ts(10_500); // 10 s after the epoch, and a half
        let before = codec::ts(9_000);
        let c = Conditions {
            if_modified_since: Some(&t),
            ..Default::default()
        };
        // Modified at 10.9 s: the same second as 10.5 s is not "since".
        assert_eq!(c.check("e", 10_900), Verdict::NotModified);
        assert_eq!(c.check("e", 11_000), Verdict::Proceed);
        let c = Conditions {
            if_unmodified_since: Some(&before),
            ..Default::default()
        };
        assert_eq!(c.check("e", 10_000), Verdict::PreconditionFailed);
        assert_eq!(c.check("e", 9_999), Verdict::Proceed);
        // If-Match holds: If-Unmodified-Since is not looked at.
        let m = tag("e");
        let c = Conditions {
            if_match: Some(&m),
            if_unmodified_since: Some(&before),
            ..Default::default()
        };
        assert_eq!(c.check("e", 10_000), Verdict::Proceed);
        // If-None-Match fails to match: If-Modified-Since is not looked at.
        let other = tag("x");
        let c = Conditions {
            if_none_match: Some(&other),
            if_modified_since: Some(&t),
            ..Default::default()
        };
        assert_eq!(c.check("e", 10_000), Verdict::Proceed);
    }

    #[test]
    fn ranges() {
        let r = Range::Int {
            first: 2,
            last: Some(4),
        };
        assert_eq!(select(Some(&r), 10).unwrap(), (2..5, true));
        assert_eq!(select(None, 10).unwrap(), (0..10, false));
        let past = Range::Int {
            first: 10,
            last: None,
        };
        assert_eq!(
            select(Some(&past), 10).unwrap_err().code(),
            &S3ErrorCode::InvalidRange
        );
        let suffix = Range::Suffix { length: 3 };
        assert_eq!(select(Some(&suffix), 10).unwrap().0, 7..10);
        assert_eq!(content_range(&(7..10), 10), "bytes 7-9/10");
    }

    #[test]
    fn copy_source_ranges() {
        assert_eq!(copy_source_range(Some("bytes=0-4"), 10).unwrap(), 0..5);
        assert_eq!(copy_source_range(None, 10).unwrap(), 0..10);
        assert!(copy_source_range(Some("bytes=5-"), 10).is_err());
        assert!(copy_source_range(Some("bytes=5-10"), 10).is_err());
        assert!(copy_source_range(Some("bytes=6-5"), 10).is_err());
    }
}
