//! Buckets: the buckets of the gateway's om volume, created with the
//! OBJECT_STORE layout. Listing, creating, deleting, versioning.

use om_client::OmClient;
use om_client::v1::{
    AbortMultipartUploadRequest, BucketLayout, BucketVersioning, CreateBucketRequest,
    GetAclRequest, ListMultipartUploadsRequest, ListObjectVersionsRequest,
};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::ts;
use crate::errors::from_om;

/// Most buckets one ListBuckets answers (S3's page limit).
const MAX_BUCKETS: u32 = 10_000;

pub async fn list(
    s: &OmS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let om = s.om(&req).await?;
    let who = s.auth.identity(req.credentials.as_ref()).await?;
    let i = req.input;
    let max = match i.max_buckets {
        None => MAX_BUCKETS,
        Some(n) if (1..=MAX_BUCKETS as i32).contains(&n) => n as u32,
        Some(_) => return Err(s3_error!(InvalidArgument, "max-buckets is 1 to 10000")),
    };
    let prefix = i.prefix.clone().unwrap_or_default();
    let mut after = i.continuation_token.clone().unwrap_or_default();
    let mut buckets = Vec::new();
    let mut more;
    loop {
        let left = max - buckets.len() as u32;
        let page = om
            .list_buckets(&s.volume, &prefix, &after, left)
            .await
            .map_err(from_om)?;
        let got = page.buckets.len();
        buckets.extend(page.buckets.into_iter().map(|b| Bucket {
            name: Some(b.name),
            creation_date: Some(ts(b.creation_time_ms)),
            bucket_region: None,
        }));
        more = page.truncated;
        after = page.next_start_after;
        if !more || got == 0 || buckets.len() as u32 >= max || after.is_empty() {
            break;
        }
    }
    Ok(S3Response::new(ListBucketsOutput {
        continuation_token: more
            .then(|| buckets.last().and_then(|b| b.name.clone()))
            .flatten(),
        buckets: Some(buckets),
        owner: Some(Owner {
            display_name: Some(who.user.clone()),
            id: Some(who.user.clone()),
        }),
        prefix: i.prefix,
    }))
}

pub async fn create(
    s: &OmS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let om = s.om(&req).await?;
    let who = s.auth.identity(req.credentials.as_ref()).await?;
    let i = req.input;
    if i.create_bucket_configuration
        .as_ref()
        .is_some_and(|c| c.bucket.is_some() || c.location.is_some())
    {
        return Err(s3_error!(
            NotImplemented,
            "directory buckets are not supported"
        ));
    }
    let made = om
        .create_bucket_with(CreateBucketRequest {
            volume: s.volume.clone(),
            name: i.bucket.clone(),
            layout: BucketLayout::ObjectStore as i32,
            ..Default::default()
        })
        .await;
    match made {
        Ok(_) => Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", i.bucket)),
        })),
        Err(e) if e.reason() == "BUCKET_ALREADY_EXISTS" => {
            // S3 tells an owner apart from everyone else. In us-east-1 (the
            // only region this gateway answers for) creating a bucket one
            // already owns succeeds and changes nothing. om without
            // authorization records no owner (""): every caller owns it.
            let owner = om
                .get_acl(GetAclRequest {
                    read: None,
                    volume: s.volume.clone(),
                    bucket: i.bucket.clone(),
                })
                .await
                .ok()
                .map(|a| a.owner);
            if owner.is_some_and(|o| o.is_empty() || o == who.user) {
                return Ok(S3Response::new(CreateBucketOutput {
                    location: Some(format!("/{}", i.bucket)),
                }));
            }
            Err(S3Error::with_message(
                S3ErrorCode::BucketAlreadyExists,
                "the bucket name is taken by another user",
            ))
        }
        Err(e) => Err(from_om(e)),
    }
}

pub async fn head(
    s: &OmS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let om = s.om(&req).await?;
    om.get_bucket(&s.volume, &req.input.bucket)
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

pub async fn delete(
    s: &OmS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let om = s.om(&req).await?;
    let bucket = &req.input.bucket;
    match om.delete_bucket(&s.volume, bucket).await {
        Ok(()) => {}
        // S3 deletes a bucket whose only content is uploads in progress
        // (they are aborted); om refuses while any remains.
        Err(e) if e.reason() == "BUCKET_NOT_EMPTY" && abort_uploads(s, &om, bucket).await? => {
            om.delete_bucket(&s.volume, bucket).await.map_err(from_om)?;
        }
        Err(e) => return Err(from_om(e)),
    }
    Ok(S3Response::new(DeleteBucketOutput::default()))
}

/// Aborts every multipart upload in progress in `bucket`, when the bucket
/// holds no key or version (else S3 refuses to delete it anyway). Answers
/// whether it aborted any.
async fn abort_uploads(s: &OmS3, om: &OmClient, bucket: &str) -> S3Result<bool> {
    let keys = om
        .list_object_versions(ListObjectVersionsRequest {
            volume: s.volume.clone(),
            bucket: bucket.to_string(),
            max_keys: 1,
            omit_blocks: true,
            ..Default::default()
        })
        .await
        .map_err(from_om)?;
    if !keys.versions.is_empty() || !keys.common_prefixes.is_empty() {
        return Ok(false);
    }
    let mut aborted = false;
    loop {
        let page = om
            .list_multipart_uploads(ListMultipartUploadsRequest {
                volume: s.volume.clone(),
                bucket: bucket.to_string(),
                max_uploads: 1000,
                ..Default::default()
            })
            .await
            .map_err(from_om)?;
        if page.uploads.is_empty() {
            return Ok(aborted);
        }
        for u in page.uploads {
            match om
                .abort_multipart_upload(AbortMultipartUploadRequest {
                    header: None,
                    volume: s.volume.clone(),
                    bucket: bucket.to_string(),
                    key: u.key,
                    upload_id: u.upload_id,
                })
                .await
            {
                Ok(_) => aborted = true,
                Err(e) if e.reason() == "UPLOAD_NOT_FOUND" => {}
                Err(e) => return Err(from_om(e)),
            }
        }
    }
}

pub async fn location(
    s: &OmS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let om = s.om(&req).await?;
    om.get_bucket(&s.volume, &req.input.bucket)
        .await
        .map_err(from_om)?;
    // No LocationConstraint: us-east-1, what clients assume of a single region.
    Ok(S3Response::new(GetBucketLocationOutput::default()))
}

pub async fn put_versioning(
    s: &OmS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let cfg = i.versioning_configuration;
    if cfg
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let v = match cfg.status.as_ref().map(BucketVersioningStatus::as_str) {
        Some(BucketVersioningStatus::ENABLED) => BucketVersioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => BucketVersioning::Suspended,
        _ => return Err(s3_error!(MalformedXML, "Status is Enabled or Suspended")),
    };
    om.set_bucket_versioning(&s.volume, &i.bucket, v)
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

pub async fn get_versioning(
    s: &OmS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let om = s.om(&req).await?;
    let b = om
        .get_bucket(&s.volume, &req.input.bucket)
        .await
        .map_err(from_om)?;
    let status = match BucketVersioning::try_from(b.versioning) {
        Ok(BucketVersioning::Enabled) => Some(BucketVersioningStatus::ENABLED),
        Ok(BucketVersioning::Suspended) => Some(BucketVersioningStatus::SUSPENDED),
        _ => None,
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: status.map(BucketVersioningStatus::from_static),
        mfa_delete: None,
    }))
}
