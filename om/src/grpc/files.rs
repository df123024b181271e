//! Handlers of the FILE_SYSTEM_OPTIMIZED RPCs: directories, file sessions,
//! status, delete, rename and ListStatus.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::objects::{block_infos, bucket_names};
use super::{consistency, scan_stats, sized, unexpected, write_id};
use crate::error::OmError;
use crate::service::{OmService, Status, StatusListing};
use crate::validate;

fn dir_status(path: String, d: st::DirectoryRecord) -> FileStatus {
    FileStatus {
        path,
        is_directory: true,
        creation_time_ms: d.creation_time_ms,
        modification_time_ms: d.modification_time_ms,
        object_id: d.object_id,
        update_id: d.update_id,
        ..Default::default()
    }
}

fn file_status(path: String, k: st::KeyRecord) -> FileStatus {
    FileStatus {
        path,
        is_directory: false,
        size: k.size,
        blocks: block_infos(k.blocks),
        etag: k.etag,
        creation_time_ms: k.creation_time_ms,
        modification_time_ms: k.modification_time_ms,
        object_id: k.object_id,
        update_id: k.update_id,
        content_type: k.content_type,
        metadata: k.metadata,
    }
}

fn status(s: Status) -> FileStatus {
    match s {
        Status::Dir { path, rec } => dir_status(path, rec),
        Status::File { path, rec } => file_status(path, rec),
    }
}

fn status_result(r: command_result::Result) -> Result<FileStatus, OmError> {
    match r {
        command_result::Result::FileStatus(f) => Ok(if f.is_directory {
            dir_status(f.path, f.directory.unwrap_or_default())
        } else {
            file_status(f.path, f.file.unwrap_or_default())
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn create_directory(
    svc: &OmService,
    r: CreateDirectoryRequest,
) -> Result<CreateDirectoryResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    bucket_names(&r.volume, &r.bucket)?;
    let path = validate::fs_path_not_root("path", &r.path)?;
    let op = Op::CreateDirectory(st::CreateDirectory {
        volume: r.volume,
        bucket: r.bucket,
        path,
    });
    let s = status_result(svc.propose(id, op).await?)?;
    Ok(CreateDirectoryResponse { status: Some(s) })
}

pub async fn create_file(
    svc: &OmService,
    r: CreateFileRequest,
) -> Result<CreateFileResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    bucket_names(&r.volume, &r.bucket)?;
    let path = validate::fs_path_not_root("path", &r.path)?;
    let op = Op::CreateFile(st::CreateFile {
        volume: r.volume,
        bucket: r.bucket,
        path: path.clone(),
        recursive: r.recursive,
        overwrite: r.overwrite,
        blocks: r.blocks,
        content_type: r.content_type,
        metadata: r.metadata,
        block_size: crate::apply::BLOCK_SIZE,
    });
    match svc.propose(id, op).await? {
        command_result::Result::OpenKey(o) => Ok(CreateFileResponse {
            session_id: o.session_id,
            opened_ms: o.opened_ms,
            blocks: block_infos(o.blocks),
            path,
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn get_file_status(
    svc: &OmService,
    r: GetFileStatusRequest,
) -> Result<GetFileStatusResponse, OmError> {
    bucket_names(&r.volume, &r.bucket)?;
    let path = validate::fs_path("path", &r.path)?;
    let s = svc
        .file_status(consistency(&r.read), &r.volume, &r.bucket, &path)
        .await?;
    Ok(GetFileStatusResponse {
        status: Some(status(s)),
    })
}

pub async fn delete_path(
    svc: &OmService,
    r: DeletePathRequest,
) -> Result<DeletePathResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    bucket_names(&r.volume, &r.bucket)?;
    let path = validate::fs_path_not_root("path", &r.path)?;
    let op = Op::DeletePath(st::DeletePath {
        volume: r.volume,
        bucket: r.bucket,
        path,
        recursive: r.recursive,
    });
    svc.propose(id, op).await?;
    Ok(DeletePathResponse {})
}

pub async fn rename_path(
    svc: &OmService,
    r: RenamePathRequest,
) -> Result<RenamePathResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    bucket_names(&r.volume, &r.bucket)?;
    let from = validate::fs_path_not_root("from", &r.from)?;
    let to = validate::fs_path_not_root("to", &r.to)?;
    if from == to {
        return Err(OmError::invalid(
            "SAME_NAME",
            "to",
            "the new path equals the old one",
        ));
    }
    if to.starts_with(&format!("{from}/")) {
        return Err(OmError::invalid(
            "RENAME_INTO_ITSELF",
            "to",
            format!("{to} lies under {from}"),
        ));
    }
    let op = Op::RenamePath(st::RenamePath {
        volume: r.volume,
        bucket: r.bucket,
        from,
        to,
        max_path_depth: crate::fs::MAX_PATH_DEPTH as u32,
        max_path_bytes: validate::MAX_KEY_BYTES as u32,
    });
    let s = status_result(svc.propose(id, op).await?)?;
    Ok(RenamePathResponse { status: Some(s) })
}

pub async fn list_status(
    svc: &OmService,
    r: ListStatusRequest,
) -> Result<ListStatusResponse, OmError> {
    bucket_names(&r.volume, &r.bucket)?;
    let path = validate::fs_path("path", &r.path)?;
    if !r.start_after.is_empty() {
        validate::key_name("start_after", &r.start_after)?;
        if r.start_after.contains('/') {
            return Err(OmError::invalid(
                "INVALID_PATH",
                "start_after",
                "start_after is a name within the listed directory",
            ));
        }
    }
    crate::listing::check_token_len(&r.continuation_token)?;
    let omit_blocks = r.omit_blocks;
    let page = svc
        .list_status(
            consistency(&r.read),
            StatusListing {
                volume: r.volume,
                bucket: r.bucket,
                path,
                start_after: r.start_after,
                max: r.max_entries,
                recursive: r.recursive,
                continuation_token: r.continuation_token,
            },
            |s| {
                let s = match s {
                    Status::File { path, mut rec } if omit_blocks => {
                        rec.blocks = Vec::new();
                        rec.part_sizes = Vec::new();
                        Status::File { path, rec }
                    }
                    other => other,
                };
                sized(status(s))
            },
        )
        .await?;
    Ok(ListStatusResponse {
        entries: page.entries,
        truncated: !page.next_continuation_token.is_empty(),
        next_continuation_token: page.next_continuation_token,
        scan: Some(scan_stats(page.stats)),
    })
}
