//! The standard headers S3 keeps with an object and returns on GET and HEAD:
//! Cache-Control, Content-Disposition, Content-Encoding, Content-Language
//! and Expires. om keeps a key's content type and a metadata map; these
//! ride in that map under names user metadata cannot have (`s3:` and the
//! header's name: `:` is not allowed in an HTTP header name, so no
//! `x-amz-meta-` header can name one). GET's `response-*` parameters
//! override them in the answer, as S3's do.

use std::collections::BTreeMap;

use s3s::dto::{Metadata, Timestamp};

use super::codec;

const CACHE_CONTROL: &str = "s3:cache-control";
const CONTENT_DISPOSITION: &str = "s3:content-disposition";
const CONTENT_ENCODING: &str = "s3:content-encoding";
const CONTENT_LANGUAGE: &str = "s3:content-language";
/// Milliseconds since the epoch.
const EXPIRES: &str = "s3:expires";

/// The stored headers of one object.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stored {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub expires: Option<Timestamp>,
}

impl Stored {
    /// The headers of a write, as a request gives them. `aws-chunked` is a
    /// transfer detail of the request, not the object's encoding: it is
    /// dropped from Content-Encoding (S3 does the same).
    pub fn from_request(
        cache_control: Option<&String>,
        content_disposition: Option<&String>,
        content_encoding: Option<&String>,
        content_language: Option<&String>,
        expires: Option<&Timestamp>,
    ) -> Stored {
        let encoding = content_encoding.and_then(|e| {
            let kept: Vec<&str> = e
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
                .collect();
            (!kept.is_empty()).then(|| kept.join(", "))
        });
        Stored {
            cache_control: cache_control.cloned(),
            content_disposition: content_disposition.cloned(),
            content_encoding: encoding,
            content_language: content_language.cloned(),
            expires: expires.cloned(),
        }
    }

    /// om's metadata map for a write: the user's metadata and these.
    pub fn with_user(&self, user: Option<&Metadata>) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> = user
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut set = |name: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(name.to_string(), v.clone());
            }
        };
        set(CACHE_CONTROL, &self.cache_control);
        set(CONTENT_DISPOSITION, &self.content_disposition);
        set(CONTENT_ENCODING, &self.content_encoding);
        set(CONTENT_LANGUAGE, &self.content_language);
        if let Some(t) = &self.expires {
            m.insert(EXPIRES.to_string(), codec::ms(t).to_string());
        }
        m
    }

    /// Splits om's metadata map into these headers and the user's
    /// metadata (none when empty).
    pub fn split(metadata: &BTreeMap<String, String>) -> (Stored, Option<Metadata>) {
        let get = |name: &str| metadata.get(name).cloned();
        let stored = Stored {
            cache_control: get(CACHE_CONTROL),
            content_disposition: get(CONTENT_DISPOSITION),
            content_encoding: get(CONTENT_ENCODING),
            content_language: get(CONTENT_LANGUAGE),
            expires: metadata
                .get(EXPIRES)
                .and_then(|v| v.parse().ok())
                .map(codec::ts),
        };
        let user: Metadata = metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("s3:"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (stored, (!user.is_empty()).then_some(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_beside_user_metadata() {
        let user: Metadata = [("color".to_string(), "blue".to_string())].into();
        let t = codec::ts(1_800_000_000_000);
        let s = Stored::from_request(
            Some(&"public, max-age=14400".to_string()),
            Some(&"attachment".to_string()),
            Some(&"gzip".to_string()),
            Some(&"en".to_string()),
            Some(&t),
        );
        let m = s.with_user(Some(&user));
        assert_eq!(m.len(), 6);
        let (back, u) = Stored::split(&m);
        assert_eq!(back, s);
        assert_eq!(u, Some(user));
        let (none, u) = Stored::split(&BTreeMap::new());
        assert_eq!((none, u), (Stored::default(), None));
    }

    #[test]
    fn aws_chunked_is_not_an_encoding() {
        let enc = |e: &str| {
            Stored::from_request(None, None, Some(&e.to_string()), None, None).content_encoding
        };
        assert_eq!(enc("gzip").as_deref(), Some("gzip"));
        assert_eq!(enc("deflate, gzip").as_deref(), Some("deflate, gzip"));
        assert_eq!(enc("gzip, aws-chunked").as_deref(), Some("gzip"));
        assert_eq!(enc("aws-chunked, gzip").as_deref(), Some("gzip"));
        assert_eq!(enc("aws-chunked"), None);
        assert_eq!(enc("aws-chunked, aws-chunked"), None);
    }
}
