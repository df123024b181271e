//! The S3 API over om. `OmS3` implements s3s's `S3` trait: s3s parses and
//! authenticates each request (SigV4 headers, presigned URLs, aws-chunked
//! bodies) and serializes each answer; every operation here asks om, as the
//! request's user, for all metadata and moves object data through the block
//! store. Operations not listed below answer s3s's default, NotImplemented.
//!
//! Each operation is counted by name and outcome
//! (`om_s3_requests_total{operation,status}`) and timed
//! (`om_s3_request_seconds{operation}`).

use std::sync::Arc;
use std::time::Instant;

use om_client::OmClient;
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::auth::Auth;
use crate::blocks::BlockStore;
use crate::front::RequestId;

mod buckets;
pub(crate) mod codec;
mod conditions;
mod copy;
pub(crate) mod data;
mod delete;
mod lifecycle;
mod listing;
mod multipart;
mod objects;
mod snapshots;
mod stored;
mod tagging;

/// The gateway's S3 implementation.
pub struct OmS3 {
    auth: Arc<Auth>,
    store: Arc<dyn BlockStore>,
    volume: String,
}

impl OmS3 {
    /// Buckets are the buckets of om volume `volume`.
    pub fn new(auth: Arc<Auth>, store: Arc<dyn BlockStore>, volume: String) -> OmS3 {
        OmS3 {
            auth,
            store,
            volume,
        }
    }

    /// The om client acting for the request's user.
    async fn om<T>(&self, req: &S3Request<T>) -> S3Result<Arc<OmClient>> {
        self.auth.client(req.credentials.as_ref()).await
    }
}

/// Counts and times one operation's outcome; an error carries the
/// request's id.
fn observe<T>(
    op: &'static str,
    started: Instant,
    id: Option<RequestId>,
    mut r: S3Result<T>,
) -> S3Result<T> {
    let status = match &mut r {
        Ok(_) => "OK".to_string(),
        Err(e) => {
            if let Some(id) = id {
                tracing::debug!(request_id = %id.0, code = e.code().as_str(), "{op} refused");
                e.set_request_id(id.0);
            }
            e.code().as_str().to_string()
        }
    };
    metrics::counter!("om_s3_requests_total", "operation" => op, "status" => status).increment(1);
    metrics::histogram!("om_s3_request_seconds", "operation" => op)
        .record(started.elapsed().as_secs_f64());
    r
}

/// The `S3` trait, each method delegating to its module and observed.
macro_rules! operations {
    ($($method:ident($input:ident -> $output:ident) = $name:literal $func:path;)*) => {
        #[async_trait::async_trait]
        impl S3 for OmS3 {
            $(
                async fn $method(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    let started = Instant::now();
                    let id = req.extensions.get::<RequestId>().cloned();
                    observe($name, started, id, $func(self, req).await)
                }
            )*
        }
    };
}

operations! {
    list_buckets(ListBucketsInput -> ListBucketsOutput) = "ListBuckets" buckets::list;
    create_bucket(CreateBucketInput -> CreateBucketOutput) = "CreateBucket" buckets::create;
    head_bucket(HeadBucketInput -> HeadBucketOutput) = "HeadBucket" buckets::head;
    delete_bucket(DeleteBucketInput -> DeleteBucketOutput) = "DeleteBucket" buckets::delete;
    get_bucket_location(GetBucketLocationInput -> GetBucketLocationOutput)
        = "GetBucketLocation" buckets::location;
    put_bucket_versioning(PutBucketVersioningInput -> PutBucketVersioningOutput)
        = "PutBucketVersioning" buckets::put_versioning;
    get_bucket_versioning(GetBucketVersioningInput -> GetBucketVersioningOutput)
        = "GetBucketVersioning" buckets::get_versioning;
    put_bucket_lifecycle_configuration(
        PutBucketLifecycleConfigurationInput -> PutBucketLifecycleConfigurationOutput
    ) = "PutBucketLifecycleConfiguration" lifecycle::put;
    get_bucket_lifecycle_configuration(
        GetBucketLifecycleConfigurationInput -> GetBucketLifecycleConfigurationOutput
    ) = "GetBucketLifecycleConfiguration" lifecycle::get;
    delete_bucket_lifecycle(DeleteBucketLifecycleInput -> DeleteBucketLifecycleOutput)
        = "DeleteBucketLifecycle" lifecycle::delete;

    put_object(PutObjectInput -> PutObjectOutput) = "PutObject" objects::put;
    get_object(GetObjectInput -> GetObjectOutput) = "GetObject" objects::get;
    head_object(HeadObjectInput -> HeadObjectOutput) = "HeadObject" objects::head;
    delete_object(DeleteObjectInput -> DeleteObjectOutput) = "DeleteObject" delete::one;
    delete_objects(DeleteObjectsInput -> DeleteObjectsOutput) = "DeleteObjects" delete::many;
    copy_object(CopyObjectInput -> CopyObjectOutput) = "CopyObject" copy::object;

    put_object_tagging(PutObjectTaggingInput -> PutObjectTaggingOutput)
        = "PutObjectTagging" tagging::put;
    get_object_tagging(GetObjectTaggingInput -> GetObjectTaggingOutput)
        = "GetObjectTagging" tagging::get;
    delete_object_tagging(DeleteObjectTaggingInput -> DeleteObjectTaggingOutput)
        = "DeleteObjectTagging" tagging::delete;
    put_bucket_tagging(PutBucketTaggingInput -> PutBucketTaggingOutput)
        = "PutBucketTagging" tagging::put_bucket;
    get_bucket_tagging(GetBucketTaggingInput -> GetBucketTaggingOutput)
        = "GetBucketTagging" tagging::get_bucket;
    delete_bucket_tagging(DeleteBucketTaggingInput -> DeleteBucketTaggingOutput)
        = "DeleteBucketTagging" tagging::delete_bucket;

    list_objects(ListObjectsInput -> ListObjectsOutput) = "ListObjects" listing::objects_v1;
    list_objects_v2(ListObjectsV2Input -> ListObjectsV2Output) = "ListObjectsV2" listing::objects_v2;
    list_object_versions(ListObjectVersionsInput -> ListObjectVersionsOutput)
        = "ListObjectVersions" listing::versions;

    create_multipart_upload(CreateMultipartUploadInput -> CreateMultipartUploadOutput)
        = "CreateMultipartUpload" multipart::create;
    upload_part(UploadPartInput -> UploadPartOutput) = "UploadPart" multipart::upload_part;
    upload_part_copy(UploadPartCopyInput -> UploadPartCopyOutput)
        = "UploadPartCopy" multipart::upload_part_copy;
    complete_multipart_upload(CompleteMultipartUploadInput -> CompleteMultipartUploadOutput)
        = "CompleteMultipartUpload" multipart::complete;
    abort_multipart_upload(AbortMultipartUploadInput -> AbortMultipartUploadOutput)
        = "AbortMultipartUpload" multipart::abort;
    list_parts(ListPartsInput -> ListPartsOutput) = "ListParts" multipart::list_parts;
    list_multipart_uploads(ListMultipartUploadsInput -> ListMultipartUploadsOutput)
        = "ListMultipartUploads" multipart::list_uploads;
}
