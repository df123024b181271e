//! Handlers of the quota RPCs: set or clear the space and namespace quotas
//! of a volume or a bucket (enforced in `apply::quota`).

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{bucket_info, unexpected, volume_info, write_id};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

pub async fn set_volume_quota(
    svc: &OmService,
    r: SetVolumeQuotaRequest,
) -> Result<SetVolumeQuotaResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("name", &r.name)?;
    let op = Op::SetVolumeQuota(st::SetVolumeQuota {
        name: r.name,
        quota_bytes: r.quota_bytes,
        quota_namespace: r.quota_namespace,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Volume(v) => Ok(SetVolumeQuotaResponse {
            volume: Some(volume_info(v)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn set_bucket_quota(
    svc: &OmService,
    r: SetBucketQuotaRequest,
) -> Result<SetBucketQuotaResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("name", &r.name)?;
    let op = Op::SetBucketQuota(st::SetBucketQuota {
        volume: r.volume,
        name: r.name,
        quota_bytes: r.quota_bytes,
        quota_namespace: r.quota_namespace,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Bucket(b) => Ok(SetBucketQuotaResponse {
            bucket: Some(bucket_info(b)),
        }),
        other => Err(unexpected(other)),
    }
}
