//! CopyObject: om copies the key server-side (`copy_key`), sharing the
//! source's blocks, so no data moves and the copy keeps the source's ETag.
//! om wants the content's MD5 when the source's ETag is not one (a
//! multipart "-N" ETag): then the gateway reads the source once to hash it
//! and copies again, conditioned on the source still having that ETag.

use std::sync::Arc;

use futures::TryStreamExt;
use md5::{Digest, Md5};
use om_client::OmClient;
use om_client::v1::{
    CopyKeyRequest, KeyInfo, MetadataDirective as OmMetadata, TaggingDirective as OmTagging,
};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{self, etag, header_version, ts};
use super::data::{self, MAX_PUT_SIZE};
use super::objects::{self, expiration};
use super::stored::Stored;
use crate::blocks::BlockStore;
use crate::errors::{self, from_om};

/// The bucket, key and version a copy source names.
pub(super) fn source(c: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match c {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_ref().map(ToString::to_string),
        )),
        _ => Err(s3_error!(
            NotImplemented,
            "copy sources are buckets of this gateway"
        )),
    }
}

/// Hex MD5 of a key's whole content, read from the block store.
pub(super) async fn content_md5(store: &Arc<dyn BlockStore>, k: &KeyInfo) -> S3Result<String> {
    let mut s = data::read(store, &k.blocks, 0..k.size).await?;
    let mut h = Md5::new();
    while let Some(chunk) = s
        .try_next()
        .await
        .map_err(|e| errors::from_io("read", &e))?
    {
        h.update(&chunk);
    }
    Ok(hex::encode(h.finalize()))
}

fn directive(d: Option<&str>, replace: &str, what: &str) -> S3Result<bool> {
    match d {
        None => Ok(false),
        Some(d) if d.eq_ignore_ascii_case(replace) => Ok(true),
        Some(d) if d.eq_ignore_ascii_case("COPY") => Ok(false),
        Some(_) => Err(s3_error!(InvalidArgument, "{what} is COPY or REPLACE")),
    }
}

pub async fn object(
    s: &OmS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let i = req.input;
    if i.website_redirect_location.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "website redirects are not supported"
        ));
    }
    let (src_bucket, src_key, src_version) = source(&i.copy_source)?;
    let replace_meta = directive(
        i.metadata_directive.as_ref().map(MetadataDirective::as_str),
        MetadataDirective::REPLACE,
        "x-amz-metadata-directive",
    )?;
    let replace_tags = directive(
        i.tagging_directive.as_ref().map(TaggingDirective::as_str),
        TaggingDirective::REPLACE,
        "x-amz-tagging-directive",
    )?;
    let etag_of = |c: &Option<ETagCondition>| match c {
        None => String::new(),
        Some(ETagCondition::Any) => "*".to_string(),
        Some(ETagCondition::ETag(e)) => e.value().to_string(),
    };
    // om takes only ETags it could have made (an MD5, or an MD5 and a part
    // count) and refuses others as invalid; to S3 any other value is just
    // an ETag no object has: If-Match fails, If-None-Match holds.
    if i.copy_source_if_match
        .as_ref()
        .is_some_and(|c| matches!(c, ETagCondition::ETag(e) if !om_etag(e.value())))
    {
        return Err(s3_error!(PreconditionFailed));
    }
    let mut i = i;
    if i.copy_source_if_none_match
        .as_ref()
        .is_some_and(|c| matches!(c, ETagCondition::ETag(e) if !om_etag(e.value())))
    {
        i.copy_source_if_none_match = None;
    }
    let mut r = CopyKeyRequest {
        header: None,
        src_volume: s.volume.clone(),
        src_bucket: src_bucket.clone(),
        src_key: src_key.clone(),
        volume: s.volume.clone(),
        bucket: i.bucket.clone(),
        key: i.key.clone(),
        src_if_match: etag_of(&i.copy_source_if_match),
        src_if_none_match: etag_of(&i.copy_source_if_none_match),
        src_if_modified_since_ms: i
            .copy_source_if_modified_since
            .as_ref()
            .map_or(0, codec::ms),
        src_if_unmodified_since_ms: i
            .copy_source_if_unmodified_since
            .as_ref()
            .map_or(0, codec::ms),
        metadata_directive: if replace_meta {
            OmMetadata::Replace as i32
        } else {
            OmMetadata::Copy as i32
        },
        metadata: if replace_meta {
            Stored::from_request(
                i.cache_control.as_ref(),
                i.content_disposition.as_ref(),
                i.content_encoding.as_ref(),
                i.content_language.as_ref(),
                i.expires.as_ref(),
            )
            .with_user(i.metadata.as_ref())
        } else {
            Default::default()
        },
        content_type: if replace_meta {
            i.content_type.clone().unwrap_or_default()
        } else {
            String::new()
        },
        content_md5: String::new(),
        conditions: None,
        src_version_id: codec::request_version(src_version.as_deref()),
        tagging_directive: if replace_tags {
            OmTagging::Replace as i32
        } else {
            OmTagging::Copy as i32
        },
        tags: if replace_tags {
            codec::parse_tagging(i.tagging.as_deref())?
        } else {
            Default::default()
        },
    };
    let k = match om.copy_key(r.clone()).await {
        Ok(resp) => resp.key.unwrap_or_default(),
        Err(e) if e.reason() == "CONTENT_DIGEST_REQUIRED" => {
            let src = objects::lookup(
                &om,
                &s.volume,
                &src_bucket,
                &src_key,
                src_version.as_deref(),
            )
            .await?;
            if src.size > MAX_PUT_SIZE {
                return Err(s3_error!(
                    InvalidRequest,
                    "a copy of a multipart object larger than 5 GiB needs UploadPartCopy"
                ));
            }
            r.content_md5 = content_md5(&s.store, &src).await?;
            if r.src_if_match.is_empty() {
                r.src_if_match = src.etag.clone();
            }
            copy_again(&om, r).await?
        }
        Err(e) => return Err(from_om(e)),
    };
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: etag(&k.etag),
            last_modified: Some(ts(k.modification_time_ms)),
            ..Default::default()
        }),
        copy_source_version_id: src_version,
        version_id: header_version(&k.version_id),
        expiration: expiration(&k),
        ..Default::default()
    }))
}

/// Whether `e` is an ETag om makes: 32 hex digits, then maybe `-` and a
/// part count.
fn om_etag(e: &str) -> bool {
    let e = e.trim_matches('"');
    let (md5, parts) = match e.split_once('-') {
        Some((m, n)) => (m, Some(n)),
        None => (e, None),
    };
    md5.len() == 32
        && md5.bytes().all(|b| b.is_ascii_hexdigit())
        && parts.is_none_or(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

async fn copy_again(om: &OmClient, r: CopyKeyRequest) -> S3Result<KeyInfo> {
    Ok(om
        .copy_key(r)
        .await
        .map_err(from_om)?
        .key
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives() {
        assert!(!directive(None, "REPLACE", "d").unwrap());
        assert!(directive(Some("REPLACE"), "REPLACE", "d").unwrap());
        assert!(!directive(Some("COPY"), "REPLACE", "d").unwrap());
        assert!(directive(Some("MOVE"), "REPLACE", "d").is_err());
    }

    #[test]
    fn copy_sources() {
        let c = CopySource::Bucket {
            bucket: "b".into(),
            key: "k/x".into(),
            version_id: Some("v1".into()),
        };
        assert_eq!(
            source(&c).unwrap(),
            ("b".into(), "k/x".into(), Some("v1".into()))
        );
    }
}
