//! Handlers of multipart uploads: initiate, commit a part, complete, abort,
//! and list parts and uploads. Each validates its request (every rule names
//! the offending field), then proposes or reads through `OmService`.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::objects::{block_infos, bucket_names, conditions, key_response, object_names};
use super::{consistency, scan_stats, sized, unexpected, write_id};
use crate::apply::{BLOCK_SIZE, MAX_KEY_SIZE, MAX_PART_NUMBER, MAX_PART_SIZE, part_number};
use crate::error::OmError;
use crate::service::{OmService, UploadListing};
use crate::validate::{self, format_upload_id, normalize_etag};

fn upload_info(u: st::UploadResult) -> UploadInfo {
    let rec = u.upload.unwrap_or_default();
    UploadInfo {
        volume: u.volume,
        bucket: u.bucket,
        key: u.key,
        upload_id: format_upload_id(rec.upload_id),
        initiated_ms: rec.initiated_ms,
        content_type: rec.content_type,
        metadata: rec.metadata,
    }
}

fn part_info(p: st::PartRecord) -> PartInfo {
    PartInfo {
        part_number: p.part_number,
        size: p.size,
        etag: p.etag,
        blocks: block_infos(p.blocks),
        modification_time_ms: p.modification_time_ms,
    }
}

pub async fn initiate_multipart(
    svc: &OmService,
    r: InitiateMultipartUploadRequest,
) -> Result<InitiateMultipartUploadResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let op = Op::InitiateMultipart(st::InitiateMultipart {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        content_type: r.content_type,
        metadata: r.metadata,
        tags: r.tags,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Upload(u) => Ok(InitiateMultipartUploadResponse {
            upload: Some(upload_info(u)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn commit_part(
    svc: &OmService,
    r: CommitPartRequest,
) -> Result<CommitPartResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let upload_id = validate::upload_id("upload_id", &r.upload_id)?;
    part_number("part_number", r.part_number)?;
    if r.size > MAX_PART_SIZE {
        return Err(OmError::invalid(
            "ENTITY_TOO_LARGE",
            "size",
            format!("a part is at most 5 GiB, got {}", r.size),
        ));
    }
    let etag = normalize_etag(&r.etag);
    validate::md5_hex("etag", &etag)?;
    if r.session_id == 0 && !r.blocks.is_empty() {
        return Err(OmError::invalid(
            "INVALID_BLOCKS",
            "blocks",
            "blocks name a write session's blocks: give its session_id",
        ));
    }
    if r.blocks.len() > crate::apply::MAX_SESSION_BLOCKS {
        return Err(OmError::invalid(
            "INVALID_BLOCKS",
            "blocks",
            format!(
                "{} blocks listed; a part has at most {}",
                r.blocks.len(),
                crate::apply::MAX_SESSION_BLOCKS
            ),
        ));
    }
    let op = Op::CommitPart(st::CommitPart {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        upload_id,
        part_number: r.part_number,
        size: r.size,
        etag,
        block_size: BLOCK_SIZE,
        session_id: r.session_id,
        blocks: r
            .blocks
            .into_iter()
            .map(|b| st::BlockRecord {
                block_id: b.block_id,
                offset: b.offset,
                length: b.length,
            })
            .collect(),
    });
    match svc.propose(id, op).await? {
        command_result::Result::Part(p) => Ok(CommitPartResponse {
            part: p.part.map(part_info),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn complete_multipart(
    svc: &OmService,
    r: CompleteMultipartUploadRequest,
) -> Result<CompleteMultipartUploadResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let upload_id = validate::upload_id("upload_id", &r.upload_id)?;
    if r.parts.is_empty() || r.parts.len() > MAX_PART_NUMBER as usize {
        return Err(OmError::invalid(
            "INVALID_PARTS",
            "parts",
            format!(
                "1..={MAX_PART_NUMBER} parts must be listed, got {}",
                r.parts.len()
            ),
        ));
    }
    let mut parts = Vec::with_capacity(r.parts.len());
    let mut prev = 0;
    for p in r.parts {
        part_number("parts", p.part_number)?;
        if p.part_number <= prev {
            return Err(OmError::invalid(
                "INVALID_PART_ORDER",
                "parts",
                format!(
                    "parts must be listed in ascending order; {} follows {prev}",
                    p.part_number
                ),
            ));
        }
        prev = p.part_number;
        let etag = normalize_etag(&p.etag);
        validate::md5_hex("parts", &etag)?;
        parts.push(st::PartRef {
            part_number: p.part_number,
            etag,
        });
    }
    let op = Op::CompleteMultipart(st::CompleteMultipart {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        upload_id,
        parts,
        min_part_size: svc.min_part_size(),
        conditions: conditions(r.conditions)?,
        max_key_size: MAX_KEY_SIZE,
    });
    let key = key_response(svc, svc.propose(id, op).await?)?;
    Ok(CompleteMultipartUploadResponse { key: Some(key) })
}

pub async fn abort_multipart(
    svc: &OmService,
    r: AbortMultipartUploadRequest,
) -> Result<AbortMultipartUploadResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let upload_id = validate::upload_id("upload_id", &r.upload_id)?;
    let op = Op::AbortMultipart(st::AbortMultipart {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        upload_id,
    });
    svc.propose(id, op).await?;
    Ok(AbortMultipartUploadResponse {})
}

pub async fn list_parts(
    svc: &OmService,
    r: ListPartsRequest,
) -> Result<ListPartsResponse, OmError> {
    object_names(&r.volume, &r.bucket, &r.key)?;
    let upload_id = validate::upload_id("upload_id", &r.upload_id)?;
    if r.part_number_marker > MAX_PART_NUMBER {
        return Err(OmError::invalid(
            "INVALID_PART_NUMBER",
            "part_number_marker",
            format!("part numbers are 1..={MAX_PART_NUMBER}"),
        ));
    }
    let page = svc
        .list_parts(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.key,
            upload_id,
            r.part_number_marker,
            r.max_parts,
            |p| sized(part_info(p)),
        )
        .await?;
    Ok(ListPartsResponse {
        parts: page.parts,
        truncated: page.truncated,
        next_part_number_marker: page.next_marker,
        scan: Some(scan_stats(page.stats)),
    })
}

pub async fn list_uploads(
    svc: &OmService,
    r: ListMultipartUploadsRequest,
) -> Result<ListMultipartUploadsResponse, OmError> {
    bucket_names(&r.volume, &r.bucket)?;
    validate::optional_key("prefix", &r.prefix)?;
    validate::delimiter("delimiter", &r.delimiter)?;
    validate::optional_key("key_marker", &r.key_marker)?;
    // As in S3, an upload-id marker without a key marker is ignored (but it
    // must still be an upload id: every field is bounded).
    let marker = if r.upload_id_marker.is_empty() {
        None
    } else {
        Some(validate::upload_id(
            "upload_id_marker",
            &r.upload_id_marker,
        )?)
    };
    let upload_id_marker = marker.filter(|_| !r.key_marker.is_empty());
    let page = svc
        .list_uploads(
            consistency(&r.read),
            UploadListing {
                volume: r.volume.clone(),
                bucket: r.bucket.clone(),
                prefix: r.prefix,
                delimiter: r.delimiter,
                key_marker: r.key_marker,
                upload_id_marker,
                max_uploads: r.max_uploads,
            },
            |key, u| {
                sized(upload_info(st::UploadResult {
                    volume: r.volume.clone(),
                    bucket: r.bucket.clone(),
                    key,
                    upload: Some(u),
                }))
            },
        )
        .await?;
    Ok(ListMultipartUploadsResponse {
        uploads: page.uploads,
        common_prefixes: page.common_prefixes,
        truncated: page.truncated,
        next_key_marker: page.next_key_marker,
        next_upload_id_marker: page
            .next_upload_id_marker
            .map(format_upload_id)
            .unwrap_or_default(),
        scan: Some(scan_stats(page.stats)),
    })
}
