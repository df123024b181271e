//! Handlers of the lifecycle-configuration RPCs. Rules without an id get one
//! here (`lifecycle::assign_ids`), then are checked (`validate_request`: S3's
//! rules and om's limits) before proposing, and again in apply (`validate`).

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{consistency, unexpected, write_id};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

pub async fn put(
    svc: &OmService,
    r: PutBucketLifecycleRequest,
) -> Result<PutBucketLifecycleResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let mut rules = r.rules;
    crate::lifecycle::assign_ids(&mut rules);
    crate::lifecycle::validate_request(&rules)?;
    let op = Op::SetBucketLifecycle(st::SetBucketLifecycle {
        volume: r.volume,
        bucket: r.bucket,
        rules,
        delete: false,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Empty(_) => Ok(PutBucketLifecycleResponse {}),
        other => Err(unexpected(other)),
    }
}

pub async fn get(
    svc: &OmService,
    r: GetBucketLifecycleRequest,
) -> Result<GetBucketLifecycleResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let rec = svc
        .get_bucket_lifecycle(consistency(&r.read), &r.volume, &r.bucket)
        .await?;
    Ok(GetBucketLifecycleResponse {
        rules: rec.rules,
        modification_time_ms: rec.modification_time_ms,
        update_id: rec.update_id,
        configured_by: rec.configured_by.map(|c| c.user).unwrap_or_default(),
    })
}

pub async fn status(
    svc: &OmService,
    r: GetLifecycleStatusRequest,
) -> Result<GetLifecycleStatusResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let (status, rules) = svc
        .lifecycle_status(consistency(&r.read), &r.volume, &r.bucket)
        .await?;
    Ok(GetLifecycleStatusResponse { status, rules })
}

pub async fn delete(
    svc: &OmService,
    r: DeleteBucketLifecycleRequest,
) -> Result<DeleteBucketLifecycleResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let op = Op::SetBucketLifecycle(st::SetBucketLifecycle {
        volume: r.volume,
        bucket: r.bucket,
        rules: Vec::new(),
        delete: true,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Empty(_) => Ok(DeleteBucketLifecycleResponse {}),
        other => Err(unexpected(other)),
    }
}
