//! Small translations between om's fields and S3's: times, ETags, version
//! ids, URL encoding (`encoding-type=url`), tag headers and `Content-MD5`.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::{ETag, Timestamp};
use s3s::{S3Result, s3_error};

/// An om time (ms since the epoch) as an S3 timestamp.
pub fn ts(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// An S3 timestamp as ms since the epoch (0 before the epoch).
pub fn ms(t: &Timestamp) -> u64 {
    let t = time::OffsetDateTime::from(t.clone());
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// om's ETag (unquoted) as S3's.
pub fn etag(s: &str) -> Option<ETag> {
    let s = s.trim_matches('"');
    (!s.is_empty()).then(|| ETag::Strong(s.to_string()))
}

/// A version id for a response header: none for om's "null" version (a
/// bucket that never had versioning shows no version ids).
pub fn header_version(v: &str) -> Option<String> {
    (!v.is_empty() && v != "null").then(|| v.to_string())
}

/// A version id as a request names it: absent and "null" stay as given.
pub fn request_version(v: Option<&str>) -> String {
    v.unwrap_or_default().to_string()
}

/// Percent-encodes everything but unreserved characters and `/`, as S3's
/// `encoding-type=url` does.
pub fn url_encode(s: &str) -> String {
    crate::uri::encode(s, true)
}

/// `s` URL-encoded when `encode` is set.
pub fn maybe_encode(s: String, encode: bool) -> String {
    if encode { url_encode(&s) } else { s }
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded).
/// A key given twice is refused, as S3 does.
pub fn parse_tagging(h: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    let Some(h) = h.filter(|h| !h.is_empty()) else {
        return Ok(tags);
    };
    for pair in h.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(k), Some(v)) = (crate::uri::decode(k, true), crate::uri::decode(v, true)) else {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-tagging is not URL-encoded"
            ));
        };
        if tags.insert(k, v).is_some() {
            return Err(s3_error!(InvalidTag, "a tag key is given twice"));
        }
    }
    Ok(tags)
}

/// The 16 bytes of a `Content-MD5` header (base64).
pub fn content_md5(h: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    use base64::Engine;
    let Some(h) = h else { return Ok(None) };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(h.trim())
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
    let md5: [u8; 16] = bytes
        .try_into()
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes"))?;
    Ok(Some(md5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let t = ts(1_700_000_000_123);
        assert_eq!(ms(&t), 1_700_000_000_123);
        assert_eq!(ms(&ts(0)), 0);
    }

    #[test]
    fn etags_and_versions() {
        assert_eq!(etag("\"abc\""), Some(ETag::Strong("abc".into())));
        assert_eq!(etag(""), None);
        assert_eq!(header_version("null"), None);
        assert_eq!(header_version("0001"), Some("0001".into()));
    }

    #[test]
    fn url_encoding() {
        assert_eq!(url_encode("a b/c+d%é"), "a%20b/c%2Bd%25%C3%A9");
        assert_eq!(url_encode("plain-key_1.txt~"), "plain-key_1.txt~");
    }

    #[test]
    fn tagging_headers() {
        let t = parse_tagging(Some("k1=v1&k%202=v+2&empty=")).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t["k 2"], "v 2");
        assert_eq!(t["empty"], "");
        assert!(parse_tagging(Some("a=1&a=2")).is_err());
        assert!(parse_tagging(None).unwrap().is_empty());
    }

    #[test]
    fn content_md5_headers() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e
        let m = content_md5(Some("1B2M2Y8AsgTpgAmY7PhCfg=="))
            .unwrap()
            .unwrap();
        assert_eq!(hex::encode(m), "d41d8cd98f00b204e9800998ecf8427e");
        assert!(content_md5(Some("not base64!")).is_err());
        assert!(content_md5(Some("AAAA")).is_err());
        assert_eq!(content_md5(None).unwrap(), None);
    }
}
