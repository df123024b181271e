//! Handlers of the object-tagging RPCs (S3's PutObjectTagging,
//! GetObjectTagging and DeleteObjectTagging). Tags are checked here
//! (`validate::tags`) and again in apply; DeleteKeyTagging is a
//! PutKeyTagging of the empty set.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{Refused, consistency, unexpected, versions, write_id};
use crate::apply::tagging::taggable;
use crate::apply::versions::version_id;
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

fn object_names(volume: &str, bucket: &str, key: &str, vid: &str) -> Result<(), OmError> {
    super::objects::bucket_names(volume, bucket)?;
    validate::key_name("key", key)?;
    versions::optional_version_id("version_id", vid)
}

/// Proposes the new tag set of one version; answers its version id.
async fn set(
    svc: &OmService,
    id: crate::service::WriteId,
    r: st::PutKeyTagging,
) -> Result<String, OmError> {
    match svc.propose(id, Op::PutKeyTagging(r)).await? {
        command_result::Result::Key(k) => Ok(version_id(&k.key.unwrap_or_default())),
        other => Err(unexpected(other)),
    }
}

pub async fn put(
    svc: &OmService,
    r: PutKeyTaggingRequest,
) -> Result<PutKeyTaggingResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key, &r.version_id)?;
    let version_id = set(
        svc,
        id,
        st::PutKeyTagging {
            volume: r.volume,
            bucket: r.bucket,
            key: r.key,
            version_id: r.version_id,
            tags: r.tags,
        },
    )
    .await?;
    Ok(PutKeyTaggingResponse { version_id })
}

pub async fn delete(
    svc: &OmService,
    r: DeleteKeyTaggingRequest,
) -> Result<DeleteKeyTaggingResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key, &r.version_id)?;
    let version_id = set(
        svc,
        id,
        st::PutKeyTagging {
            volume: r.volume,
            bucket: r.bucket,
            key: r.key,
            version_id: r.version_id,
            tags: Default::default(),
        },
    )
    .await?;
    Ok(DeleteKeyTaggingResponse { version_id })
}

/// GetKeyTagging; a current version that is a delete marker is NOT_FOUND
/// with the marker's detail, as LookupKey answers it.
pub async fn get(
    svc: &OmService,
    r: GetKeyTaggingRequest,
) -> Result<GetKeyTaggingResponse, Refused> {
    object_names(&r.volume, &r.bucket, &r.key, &r.version_id)?;
    let rec = svc
        .tagged_version(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.key,
            &r.version_id,
        )
        .await?;
    let path = format!("{}/{}/{}", r.volume, r.bucket, r.key);
    match taggable(&rec, &r.version_id, &path) {
        Err(e) if rec.delete_marker && r.version_id.is_empty() => {
            Err(Refused::delete_marker(e, version_id(&rec)))
        }
        Err(e) => Err(e.into()),
        Ok(()) => Ok(GetKeyTaggingResponse {
            version_id: version_id(&rec),
            tags: rec.tags,
        }),
    }
}
