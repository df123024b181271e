//! Handlers of volumes and buckets: create, get, list, delete, tags.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{bucket_info, consistency, sized, unexpected, volume_info, write_id};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

pub async fn create_volume(
    svc: &OmService,
    r: CreateVolumeRequest,
) -> Result<CreateVolumeResponse, OmError> {
    validate::resource_name("name", &r.name)?;
    let id = write_id(&r.header, &r)?;
    match svc
        .propose(
            id,
            Op::CreateVolume(st::CreateVolume {
                name: r.name,
                owner: r.owner,
                quota_bytes: r.quota_bytes,
                quota_namespace: r.quota_namespace,
                metadata: r.metadata,
            }),
        )
        .await?
    {
        command_result::Result::Volume(v) => Ok(CreateVolumeResponse {
            volume: Some(volume_info(v)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn get_volume(
    svc: &OmService,
    r: GetVolumeRequest,
) -> Result<GetVolumeResponse, OmError> {
    validate::resource_name("name", &r.name)?;
    let v = svc.get_volume(consistency(&r.read), &r.name).await?;
    Ok(GetVolumeResponse {
        volume: Some(volume_info(v)),
    })
}

pub async fn list_volumes(
    svc: &OmService,
    r: ListVolumesRequest,
) -> Result<ListVolumesResponse, OmError> {
    validate::optional_key("prefix", &r.prefix)?;
    validate::optional_key("start_after", &r.start_after)?;
    let page = svc
        .list_volumes(
            consistency(&r.read),
            &r.prefix,
            &r.start_after,
            r.max_results,
            |v| sized(volume_info(v)),
        )
        .await?;
    Ok(ListVolumesResponse {
        volumes: page.items.into_iter().map(|(_, v)| v).collect(),
        truncated: page.truncated,
        next_start_after: page.next_start_after,
    })
}

pub async fn delete_volume(
    svc: &OmService,
    r: DeleteVolumeRequest,
) -> Result<DeleteVolumeResponse, OmError> {
    validate::resource_name("name", &r.name)?;
    let id = write_id(&r.header, &r)?;
    svc.propose(id, Op::DeleteVolume(st::DeleteVolume { name: r.name }))
        .await?;
    Ok(DeleteVolumeResponse {})
}

pub async fn create_bucket(
    svc: &OmService,
    r: CreateBucketRequest,
) -> Result<CreateBucketResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("name", &r.name)?;
    let layout = match BucketLayout::try_from(r.layout) {
        Ok(BucketLayout::Unspecified) | Ok(BucketLayout::ObjectStore) => {
            crate::apply::LAYOUT_OBJECT_STORE
        }
        Ok(BucketLayout::FileSystemOptimized) => crate::apply::LAYOUT_FSO,
        Err(_) => {
            return Err(OmError::invalid(
                "INVALID_LAYOUT",
                "layout",
                format!("unknown bucket layout {}", r.layout),
            ));
        }
    };
    let id = write_id(&r.header, &r)?;
    match svc
        .propose(
            id,
            Op::CreateBucket(st::CreateBucket {
                volume: r.volume,
                name: r.name,
                layout,
                metadata: r.metadata,
                quota_bytes: r.quota_bytes,
                quota_namespace: r.quota_namespace,
            }),
        )
        .await?
    {
        command_result::Result::Bucket(b) => Ok(CreateBucketResponse {
            bucket: Some(bucket_info(b)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn get_bucket(
    svc: &OmService,
    r: GetBucketRequest,
) -> Result<GetBucketResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("name", &r.name)?;
    let b = svc
        .get_bucket(consistency(&r.read), &r.volume, &r.name)
        .await?;
    Ok(GetBucketResponse {
        bucket: Some(bucket_info(b)),
    })
}

pub async fn set_bucket_tags(
    svc: &OmService,
    r: SetBucketTagsRequest,
) -> Result<SetBucketTagsResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    validate::bucket_tags("tags", &r.tags)?;
    let op = Op::SetBucketTags(st::SetBucketTags {
        volume: r.volume,
        bucket: r.bucket,
        tags: r.tags,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Bucket(b) => Ok(SetBucketTagsResponse {
            bucket: Some(bucket_info(b)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn list_buckets(
    svc: &OmService,
    r: ListBucketsRequest,
) -> Result<ListBucketsResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::optional_key("prefix", &r.prefix)?;
    validate::optional_key("start_after", &r.start_after)?;
    let page = svc
        .list_buckets(
            consistency(&r.read),
            &r.volume,
            &r.prefix,
            &r.start_after,
            r.max_results,
            |b| sized(bucket_info(b)),
        )
        .await?;
    Ok(ListBucketsResponse {
        buckets: page.items.into_iter().map(|(_, b)| b).collect(),
        truncated: page.truncated,
        next_start_after: page.next_start_after,
    })
}

pub async fn delete_bucket(
    svc: &OmService,
    r: DeleteBucketRequest,
) -> Result<DeleteBucketResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("name", &r.name)?;
    let id = write_id(&r.header, &r)?;
    svc.propose(
        id,
        Op::DeleteBucket(st::DeleteBucket {
            volume: r.volume,
            name: r.name,
        }),
    )
    .await?;
    Ok(DeleteBucketResponse {})
}
