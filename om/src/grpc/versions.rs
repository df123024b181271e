//! Handlers of versioned buckets' RPCs (SetBucketVersioning,
//! ListObjectVersions) and the version-id checks of the others.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;
use prost::Message;
use tonic::Status;

use super::{bucket_info, consistency, key_info, scan_stats, sized, unexpected, write_id};
use crate::apply::versions;
use crate::error::OmError;
use crate::service::OmService;
use crate::service::versions::VersionListing;
use crate::validate;

/// An optional version id: empty, or well formed (INVALID_ARGUMENT
/// `INVALID_VERSION_ID` on `field`).
pub fn optional_version_id(field: &str, id: &str) -> Result<(), OmError> {
    if !id.is_empty() {
        versions::parse_version_id(id, field)?;
    }
    Ok(())
}

/// A NOT_FOUND for a key whose current version is a delete marker, with
/// S3's `x-amz-delete-marker` and the marker's version id in the detail
/// (`delete_marker`, `version_id`) and as `om-delete-marker` /
/// `om-version-id` metadata.
pub fn deleted(status: Status, version_id: &str) -> Status {
    let mut detail = ErrorDetail::decode(status.details()).unwrap_or_default();
    detail.delete_marker = true;
    detail.version_id = version_id.to_string();
    let mut out = Status::with_details(
        status.code(),
        status.message(),
        detail.encode_to_vec().into(),
    );
    *out.metadata_mut() = status.metadata().clone();
    out.metadata_mut().insert(
        "om-delete-marker",
        tonic::metadata::MetadataValue::from_static("true"),
    );
    if let Ok(v) = version_id.parse() {
        out.metadata_mut().insert("om-version-id", v);
    }
    out
}

pub async fn set_bucket_versioning(
    svc: &OmService,
    r: SetBucketVersioningRequest,
) -> Result<SetBucketVersioningResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let versioning = match r.versioning() {
        BucketVersioning::Enabled => versions::ENABLED,
        BucketVersioning::Suspended => versions::SUSPENDED,
        BucketVersioning::Unversioned => {
            return Err(OmError::invalid(
                "INVALID_VERSIONING",
                "versioning",
                "versioning is ENABLED or SUSPENDED; a bucket never returns to UNVERSIONED",
            ));
        }
    };
    let op = Op::SetBucketVersioning(st::SetBucketVersioning {
        volume: r.volume,
        bucket: r.bucket,
        versioning,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Bucket(b) => Ok(SetBucketVersioningResponse {
            bucket: Some(bucket_info(b)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn list_object_versions(
    svc: &OmService,
    r: ListObjectVersionsRequest,
) -> Result<ListObjectVersionsResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    validate::optional_key("prefix", &r.prefix)?;
    validate::optional_key("key_marker", &r.key_marker)?;
    validate::delimiter("delimiter", &r.delimiter)?;
    optional_version_id("version_id_marker", &r.version_id_marker)?;
    if r.key_marker.is_empty() && !r.version_id_marker.is_empty() {
        return Err(OmError::invalid(
            "VERSION_ID_MARKER_WITHOUT_KEY_MARKER",
            "version_id_marker",
            "a version-id marker needs a key marker",
        ));
    }
    crate::listing::check_token_len(&r.continuation_token)?;
    let omit_blocks = r.omit_blocks;
    let page = svc
        .list_object_versions(
            consistency(&r.read),
            VersionListing {
                volume: r.volume.clone(),
                bucket: r.bucket.clone(),
                prefix: r.prefix,
                delimiter: r.delimiter,
                key_marker: r.key_marker,
                version_id_marker: r.version_id_marker,
                continuation_token: r.continuation_token,
                max_keys: r.max_keys,
            },
            |name, mut k, latest| {
                if omit_blocks {
                    k.blocks = Vec::new();
                    k.part_sizes = Vec::new();
                }
                let mut info = key_info(&r.volume, &r.bucket, name, k);
                info.is_latest = latest;
                sized(info)
            },
        )
        .await?;
    Ok(ListObjectVersionsResponse {
        versions: page.versions,
        common_prefixes: page.common_prefixes,
        truncated: !page.next_continuation_token.is_empty(),
        next_key_marker: page.next_key_marker,
        next_version_id_marker: page.next_version_id_marker,
        next_continuation_token: page.next_continuation_token,
        scan: Some(scan_stats(page.stats)),
    })
}
