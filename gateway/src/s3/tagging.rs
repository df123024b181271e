//! Object tags: om replaces, reads or removes the whole tag set of one
//! version of a key (`put_key_tagging`, `get_key_tagging`,
//! `delete_key_tagging`) and checks S3's rules on them. Bucket tags: om
//! replaces a bucket's whole set (`set_bucket_tags`; none removes them) and
//! answers it with the bucket.

use std::collections::BTreeMap;

use om_client::v1::{DeleteKeyTaggingRequest, GetKeyTaggingRequest, PutKeyTaggingRequest};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{self, header_version};
use crate::errors::from_om;

/// An S3 tag set as om's map; a key given twice is refused.
pub(super) fn tag_map(set: TagSet) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for t in set {
        let Some(k) = t.key else {
            return Err(s3_error!(InvalidTag, "a tag needs a Key"));
        };
        if tags.insert(k, t.value.unwrap_or_default()).is_some() {
            return Err(s3_error!(InvalidTag, "a tag key is given twice"));
        }
    }
    Ok(tags)
}

/// om's tags as an S3 tag set (in key order).
pub(super) fn tag_set(tags: BTreeMap<String, String>) -> TagSet {
    tags.into_iter()
        .map(|(k, v)| Tag {
            key: Some(k),
            value: Some(v),
        })
        .collect()
}

pub async fn put(
    s: &OmS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let i = req.input;
    let r = om
        .put_key_tagging(PutKeyTaggingRequest {
            header: None,
            volume: s.volume.clone(),
            bucket: i.bucket,
            key: i.key,
            version_id: codec::request_version(i.version_id.as_deref()),
            tags: tag_map(i.tagging.tag_set)?,
        })
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: header_version(&r.version_id),
    }))
}

pub async fn get(
    s: &OmS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let r = om
        .get_key_tagging(GetKeyTaggingRequest {
            read: None,
            volume: s.volume.clone(),
            bucket: i.bucket,
            key: i.key,
            version_id: codec::request_version(i.version_id.as_deref()),
        })
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_set(r.tags),
        version_id: header_version(&r.version_id),
    }))
}

pub async fn delete(
    s: &OmS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let i = req.input;
    let r = om
        .delete_key_tagging(DeleteKeyTaggingRequest {
            header: None,
            volume: s.volume.clone(),
            bucket: i.bucket,
            key: i.key,
            version_id: codec::request_version(i.version_id.as_deref()),
        })
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: header_version(&r.version_id),
    }))
}

/// PutBucketTagging: replaces the bucket's tags (S3's rules, at most 50).
pub async fn put_bucket(
    s: &OmS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    om.set_bucket_tags(&s.volume, &i.bucket, tag_map(i.tagging.tag_set)?)
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

/// GetBucketTagging: the bucket's tags; none is 404 NoSuchTagSet, as S3.
pub async fn get_bucket(
    s: &OmS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let om = s.om(&req).await?;
    let b = om
        .get_bucket(&s.volume, &req.input.bucket)
        .await
        .map_err(from_om)?;
    if b.tags.is_empty() {
        return Err(s3_error!(NoSuchTagSet, "the bucket has no tags"));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_set(b.tags),
    }))
}

/// DeleteBucketTagging: removes the bucket's tags.
pub async fn delete_bucket(
    s: &OmS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let om = s.om(&req).await?;
    om.set_bucket_tags(&s.volume, &req.input.bucket, BTreeMap::new())
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: Some(k.into()),
            value: Some(v.into()),
        }
    }

    #[test]
    fn tag_sets_round_trip() {
        let m = tag_map(vec![tag("b", "2"), tag("a", "1")]).unwrap();
        let back = tag_set(m);
        assert_eq!(back[0].key.as_deref(), Some("a"));
        assert_eq!(back[1].value.as_deref(), Some("2"));
        assert!(tag_map(vec![tag("a", "1"), tag("a", "2")]).is_err());
        assert!(tag_map(vec![Tag::default()]).is_err());
    }
}
