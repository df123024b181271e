//! Handlers of a bucket's snapshots: create, get, list, delete, rename.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{consistency, key_info, scan_stats, sized, unexpected, write_id};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

pub fn snapshot_info(s: st::SnapshotRecord) -> SnapshotInfo {
    SnapshotInfo {
        volume: s.volume,
        bucket: s.bucket,
        name: s.name,
        index: s.index,
        creation_time_ms: s.creation_time_ms,
        creator: s.creator,
        key_count: s.key_count,
        used_bytes: s.used_bytes,
    }
}

fn check_bucket(volume: &str, bucket: &str) -> Result<(), OmError> {
    validate::resource_name("volume", volume)?;
    validate::resource_name("bucket", bucket)
}

async fn propose_snapshot(
    svc: &OmService,
    id: super::WriteId,
    op: Op,
) -> Result<SnapshotInfo, OmError> {
    match svc.propose(id, op).await? {
        command_result::Result::Snapshot(s) => Ok(snapshot_info(s)),
        other => Err(unexpected(other)),
    }
}

pub async fn create(
    svc: &OmService,
    r: CreateSnapshotRequest,
) -> Result<CreateSnapshotResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    check_bucket(&r.volume, &r.bucket)?;
    validate::snapshot_name("name", &r.name)?;
    let op = Op::CreateSnapshot(st::CreateSnapshot {
        volume: r.volume,
        bucket: r.bucket,
        name: r.name,
    });
    Ok(CreateSnapshotResponse {
        snapshot: Some(propose_snapshot(svc, id, op).await?),
    })
}

pub async fn get(svc: &OmService, r: GetSnapshotRequest) -> Result<GetSnapshotResponse, OmError> {
    check_bucket(&r.volume, &r.bucket)?;
    validate::snapshot_name("name", &r.name)?;
    let s = svc
        .get_snapshot(consistency(&r.read), &r.volume, &r.bucket, &r.name)
        .await?;
    Ok(GetSnapshotResponse {
        snapshot: Some(snapshot_info(s)),
    })
}

pub async fn list(
    svc: &OmService,
    r: ListSnapshotsRequest,
) -> Result<ListSnapshotsResponse, OmError> {
    check_bucket(&r.volume, &r.bucket)?;
    if !r.start_after.is_empty() {
        validate::snapshot_name("start_after", &r.start_after)?;
    }
    let page = svc
        .list_snapshots(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.start_after,
            r.max_results,
            |s| sized(snapshot_info(s)),
        )
        .await?;
    Ok(ListSnapshotsResponse {
        snapshots: page.items.into_iter().map(|(_, s)| s).collect(),
        truncated: page.truncated,
        next_start_after: page.next_start_after,
    })
}

pub async fn delete(
    svc: &OmService,
    r: DeleteSnapshotRequest,
) -> Result<DeleteSnapshotResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    check_bucket(&r.volume, &r.bucket)?;
    validate::snapshot_name("name", &r.name)?;
    let op = Op::DeleteSnapshot(st::DeleteSnapshot {
        volume: r.volume,
        bucket: r.bucket,
        name: r.name,
    });
    propose_snapshot(svc, id, op).await?;
    Ok(DeleteSnapshotResponse {})
}

pub async fn rename(
    svc: &OmService,
    r: RenameSnapshotRequest,
) -> Result<RenameSnapshotResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    check_bucket(&r.volume, &r.bucket)?;
    validate::snapshot_name("name", &r.name)?;
    validate::snapshot_name("new_name", &r.new_name)?;
    let op = Op::RenameSnapshot(st::RenameSnapshot {
        volume: r.volume,
        bucket: r.bucket,
        name: r.name,
        new_name: r.new_name,
    });
    Ok(RenameSnapshotResponse {
        snapshot: Some(propose_snapshot(svc, id, op).await?),
    })
}

pub async fn diff(
    svc: &OmService,
    r: SnapshotDiffRequest,
) -> Result<SnapshotDiffResponse, OmError> {
    check_bucket(&r.volume, &r.bucket)?;
    validate::snapshot_name("from", &r.from)?;
    if !r.to.is_empty() {
        validate::snapshot_name("to", &r.to)?;
    }
    crate::listing::check_token_len(&r.continuation_token)?;
    let d = svc
        .snapshot_diff(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.from,
            &r.to,
            r.max_results,
            &r.continuation_token,
        )
        .await?;
    let info = |name: &str, k: Option<st::KeyRecord>| {
        k.map(|mut k| {
            k.blocks = Vec::new();
            k.part_sizes = Vec::new();
            key_info(&r.volume, &r.bucket, name.to_string(), k)
        })
    };
    let mut entries = Vec::with_capacity(d.page.changes.len());
    for c in d.page.changes {
        let key = String::from_utf8(c.name)
            .map_err(|_| OmError::Internal("a key name is not UTF-8".to_string()))?;
        entries.push(SnapshotDiffEntry {
            kind: c.kind as i32,
            before: info(&key, c.before),
            after: info(&key, c.after),
            key,
        });
    }
    Ok(SnapshotDiffResponse {
        entries,
        truncated: !d.next_continuation_token.is_empty(),
        next_continuation_token: d.next_continuation_token,
        changes_examined: d.page.examined,
        point_reads: d.page.point_reads,
        scan: Some(scan_stats(d.page.stats)),
    })
}
