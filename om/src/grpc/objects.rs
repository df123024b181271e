//! Handlers of the object-writing RPCs: sessions, copies, open-key listing
//! and block reclamation (multipart uploads: `multipart`). Each validates its request (every
//! rule names the offending field), then proposes or reads through
//! `OmService`.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{consistency, key_info, scan_stats, sized, unexpected, write_id};
use crate::apply::{BLOCK_SIZE, MAX_ACK_IDS, blocks_per_call};
use crate::error::OmError;
pub use crate::limits::MAX_RECORD_BLOCKS;
use crate::service::OmService;
use crate::validate::{self, format_deleted_id, normalize_etag};

pub fn block_infos(blocks: Vec<st::BlockRecord>) -> Vec<BlockInfo> {
    blocks
        .into_iter()
        .map(|b| BlockInfo {
            block_id: b.block_id,
            offset: b.offset,
            length: b.length,
        })
        .collect()
}

pub(super) fn bucket_names(volume: &str, bucket: &str) -> Result<(), OmError> {
    validate::resource_name("volume", volume)?;
    validate::resource_name("bucket", bucket)
}

pub(super) fn object_names(volume: &str, bucket: &str, key: &str) -> Result<(), OmError> {
    bucket_names(volume, bucket)?;
    validate::key_name("key", key)
}

/// Validates and normalizes write conditions.
pub fn conditions(c: Option<KeyConditions>) -> Result<Option<st::KeyConditions>, OmError> {
    let Some(c) = c else { return Ok(None) };
    let if_match = normalize_etag(&c.if_match);
    validate::condition_etag("conditions.if_match", &if_match)?;
    let if_none_match = normalize_etag(&c.if_none_match);
    validate::condition_etag("conditions.if_none_match", &if_none_match)?;
    Ok(Some(st::KeyConditions {
        if_match,
        if_none_match_any: c.if_none_match_any,
        expected_update_id: c.expected_update_id,
        if_match_any: c.if_match_any,
        if_none_match,
    }))
}

/// Validates and normalizes a delete's conditions.
pub fn delete_conditions(c: DeleteConditions) -> Result<st::DeleteConditions, OmError> {
    let if_match = normalize_etag(&c.if_match);
    validate::condition_etag("conditions.if_match", &if_match)?;
    Ok(st::DeleteConditions {
        if_match,
        if_match_any: c.if_match_any,
        if_modified_s: c.if_modified_s,
        if_size: c.if_size,
    })
}

/// The key a write answers, with the expiry a lifecycle rule gives it (S3
/// answers `x-amz-expiration` to PutObject, CopyObject and
/// CompleteMultipartUpload). The rules are read from this member's state
/// after the write applied: the same answer LookupKey gives.
pub(super) fn key_response(svc: &OmService, r: command_result::Result) -> Result<KeyInfo, OmError> {
    match r {
        command_result::Result::Key(k) => {
            let rec = k.key.unwrap_or_default();
            let expiry = svc.expiration_of(&k.volume, &k.bucket, &k.name, &rec)?;
            let mut info = key_info(&k.volume, &k.bucket, k.name, rec);
            if let Some((at_ms, rule_id)) = expiry {
                info.expiration_ms = at_ms;
                info.expiration_rule_id = rule_id;
            }
            Ok(info)
        }
        other => Err(unexpected(other)),
    }
}

pub async fn open_key(svc: &OmService, r: OpenKeyRequest) -> Result<OpenKeyResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let op = Op::OpenKey(st::OpenKey {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        content_type: r.content_type,
        metadata: r.metadata,
        blocks: r.blocks,
        block_size: BLOCK_SIZE,
        tags: r.tags,
    });
    match svc.propose(id, op).await? {
        command_result::Result::OpenKey(o) => Ok(OpenKeyResponse {
            session_id: o.session_id,
            opened_ms: o.opened_ms,
            blocks: block_infos(o.blocks),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn allocate_block(
    svc: &OmService,
    r: AllocateBlockRequest,
) -> Result<AllocateBlockResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    blocks_per_call("count", r.count)?;
    let op = Op::AllocateBlock(st::AllocateBlock {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        session_id: r.session_id,
        count: r.count.max(1),
        max_session_blocks: crate::apply::MAX_SESSION_BLOCKS as u32,
    });
    match svc.propose(id, op).await? {
        command_result::Result::OpenKey(o) => Ok(AllocateBlockResponse {
            blocks: block_infos(o.blocks),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn commit_key(
    svc: &OmService,
    r: CommitKeyRequest,
) -> Result<CommitKeyResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let etag = normalize_etag(&r.etag);
    validate::etag("etag", &etag)?;
    if r.blocks.len() > crate::apply::MAX_SESSION_BLOCKS {
        return Err(OmError::invalid(
            "INVALID_BLOCKS",
            "blocks",
            format!(
                "{} blocks listed; a key has at most {}",
                r.blocks.len(),
                crate::apply::MAX_SESSION_BLOCKS
            ),
        ));
    }
    let op = Op::CommitKey(st::CommitKey {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        session_id: r.session_id,
        size: r.size,
        blocks: r
            .blocks
            .into_iter()
            .map(|b| st::BlockRecord {
                block_id: b.block_id,
                offset: b.offset,
                length: b.length,
            })
            .collect(),
        etag,
        replace_metadata: r.replace_metadata,
        metadata: r.metadata,
        content_type: r.content_type,
        conditions: conditions(r.conditions)?,
    });
    let key = key_response(svc, svc.propose(id, op).await?)?;
    Ok(CommitKeyResponse { key: Some(key) })
}

pub async fn abort_key(svc: &OmService, r: AbortKeyRequest) -> Result<AbortKeyResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let op = Op::AbortKey(st::AbortKey {
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        session_id: r.session_id,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Empty(_) => Ok(AbortKeyResponse {}),
        other => Err(unexpected(other)),
    }
}

pub async fn list_open_keys(
    svc: &OmService,
    r: ListOpenKeysRequest,
) -> Result<ListOpenKeysResponse, OmError> {
    bucket_names(&r.volume, &r.bucket)?;
    validate::optional_key("prefix", &r.prefix)?;
    crate::listing::check_token_len(&r.continuation_token)?;
    let page = svc
        .list_open_keys(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.prefix,
            r.max_keys,
            &r.continuation_token,
            |name, o| {
                sized(OpenKeyInfo {
                    name,
                    session_id: o.session_id,
                    opened_ms: o.opened_ms,
                    allocated_blocks: o.allocated,
                    client_id: o.client_id,
                })
            },
        )
        .await?;
    Ok(ListOpenKeysResponse {
        truncated: !page.next_continuation_token.is_empty(),
        keys: page.keys,
        next_continuation_token: page.next_continuation_token,
        total: page.total,
        scan: Some(scan_stats(page.stats)),
    })
}

pub async fn copy_key(svc: &OmService, r: CopyKeyRequest) -> Result<CopyKeyResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    validate::resource_name("src_volume", &r.src_volume)?;
    validate::resource_name("src_bucket", &r.src_bucket)?;
    validate::key_name("src_key", &r.src_key)?;
    object_names(&r.volume, &r.bucket, &r.key)?;
    let src_if_match = normalize_etag(&r.src_if_match);
    validate::etag("src_if_match", &src_if_match)?;
    let src_if_none_match = normalize_etag(&r.src_if_none_match);
    if src_if_none_match != "*" {
        validate::etag("src_if_none_match", &src_if_none_match)?;
    }
    let content_md5 = normalize_etag(&r.content_md5);
    if !content_md5.is_empty() {
        validate::md5_hex("content_md5", &content_md5)?;
    }
    let replace = r.metadata_directive() == MetadataDirective::Replace;
    if replace {
        validate::metadata("metadata", &r.metadata)?;
        validate::content_type("content_type", &r.content_type)?;
    }
    let replace_tags = r.tagging_directive() == TaggingDirective::Replace;
    if replace_tags {
        validate::tags("tags", &r.tags)?;
    }
    super::versions::optional_version_id("src_version_id", &r.src_version_id)?;
    // Copying an older version onto its key restores it (S3's way).
    if !replace
        && r.src_version_id.is_empty()
        && r.src_volume == r.volume
        && r.src_bucket == r.bucket
        && r.src_key == r.key
    {
        return Err(OmError::invalid(
            "COPY_TO_ITSELF",
            "key",
            "copying a key onto itself needs metadata_directive REPLACE",
        ));
    }
    let op = Op::CopyKey(st::CopyKey {
        src_volume: r.src_volume,
        src_bucket: r.src_bucket,
        src_key: r.src_key,
        src_version_id: r.src_version_id,
        volume: r.volume,
        bucket: r.bucket,
        key: r.key,
        src_if_match,
        src_if_none_match,
        src_if_modified_since_ms: r.src_if_modified_since_ms,
        src_if_unmodified_since_ms: r.src_if_unmodified_since_ms,
        metadata_directive: u32::from(replace),
        metadata: if replace {
            r.metadata
        } else {
            Default::default()
        },
        content_type: if replace {
            r.content_type
        } else {
            String::new()
        },
        content_md5,
        conditions: conditions(r.conditions)?,
        tagging_directive: u32::from(replace_tags),
        tags: if replace_tags {
            r.tags
        } else {
            Default::default()
        },
    });
    let key = key_response(svc, svc.propose(id, op).await?)?;
    Ok(CopyKeyResponse { key: Some(key) })
}

pub async fn list_deleted_blocks(
    svc: &OmService,
    r: ListDeletedBlocksRequest,
) -> Result<ListDeletedBlocksResponse, OmError> {
    let after = if r.after.is_empty() {
        None
    } else {
        Some(validate::deleted_id("after", &r.after)?)
    };
    let page = svc
        .list_deleted_blocks(
            consistency(&r.read),
            after,
            r.max_entries,
            |(index, seq), rec| {
                sized(DeletedBlocksEntry {
                    id: format_deleted_id(index, seq),
                    blocks: block_infos(rec.blocks),
                    origin: rec.origin,
                })
            },
        )
        .await?;
    Ok(ListDeletedBlocksResponse {
        next_after: page
            .last
            .map(|(index, seq)| format_deleted_id(index, seq))
            .unwrap_or_default(),
        entries: page.entries,
        truncated: page.truncated,
        scan: Some(scan_stats(page.stats)),
    })
}

pub async fn ack_deleted_blocks(
    svc: &OmService,
    r: AckDeletedBlocksRequest,
) -> Result<AckDeletedBlocksResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    if r.ids.is_empty() || r.ids.len() > MAX_ACK_IDS {
        return Err(OmError::invalid(
            "INVALID_ID_COUNT",
            "ids",
            format!("1..={MAX_ACK_IDS} ids per call, got {}", r.ids.len()),
        ));
    }
    let ids = r
        .ids
        .iter()
        .map(|id| {
            validate::deleted_id("ids", id)
                .map(|(log_index, seq)| st::DeletedBlocksId { log_index, seq })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let op = Op::AckDeletedBlocks(st::AckDeletedBlocks { ids });
    match svc.propose(id, op).await? {
        command_result::Result::Count(c) => Ok(AckDeletedBlocksResponse {
            acknowledged: c.count,
        }),
        other => Err(unexpected(other)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prost::Message;

    use crate::limits::MAX_PART_NUMBER;

    use super::*;
    use crate::apply::{BLOCK_SIZE, MAX_PART_SIZE, MAX_SESSION_BLOCKS};
    use crate::listing::{MAX_TOKEN_CHARS, PAGE_OVERHEAD_BYTES};
    use crate::service::MAX_MEMBERS;
    use crate::validate::{MAX_ADDRESS_BYTES, MAX_KEY_BYTES};

    /// What a tonic (and grpc-go, grpc-java) client decodes by default.
    const CLIENT_LIMIT: usize = 4 * 1024 * 1024;

    /// `n` blocks with the longest encodings their fields can have.
    fn blocks(n: usize) -> Vec<BlockInfo> {
        (0..n)
            .map(|_| BlockInfo {
                block_id: u64::MAX,
                offset: u64::MAX,
                length: BLOCK_SIZE,
            })
            .collect()
    }

    /// 2048 bytes of metadata spread over as many entries as distinct
    /// names allow: the most encoding overhead.
    fn metadata() -> BTreeMap<String, String> {
        (0..682)
            .map(|i| (format!("{i:03}"), String::new()))
            .collect()
    }

    fn largest_key() -> KeyInfo {
        KeyInfo {
            volume: "v".repeat(63),
            bucket: "b".repeat(63),
            name: "k".repeat(MAX_KEY_BYTES),
            size: u64::MAX,
            blocks: blocks(MAX_RECORD_BLOCKS),
            etag: format!("{}-10000", "e".repeat(32)),
            metadata: metadata(),
            content_type: "c".repeat(256),
            creation_time_ms: u64::MAX,
            modification_time_ms: u64::MAX,
            object_id: u64::MAX,
            update_id: u64::MAX,
            version_id: "f".repeat(crate::apply::versions::VERSION_ID_CHARS),
            delete_marker: true,
            is_latest: true,
            noncurrent_since_ms: u64::MAX,
            tag_count: u32::MAX,
            expiration_ms: u64::MAX,
            expiration_rule_id: "\u{10000}".repeat(crate::lifecycle::MAX_RULE_ID_CHARS),
            part_sizes: vec![5 << 30; crate::apply::MAX_PART_NUMBER as usize],
        }
    }

    fn largest_stats() -> Option<ScanStats> {
        Some(ScanStats {
            seeks: u64::MAX,
            nexts: u64::MAX,
            tombstones_skipped: u64::MAX,
        })
    }

    /// The largest single item of every response stays well under what a
    /// default client decodes, alone or as the one item of a page with
    /// every other field at its largest: a page that holds only its first
    /// item can always be read.
    #[test]
    fn largest_records_fit_a_default_client() {
        assert!(
            metadata()
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
                <= 2048
        );
        let key = largest_key();
        assert!(key.encoded_len() < 1024 * 1024, "{}", key.encoded_len());
        let page = ListKeysResponse {
            keys: vec![key.clone()],
            truncated: true,
            next_start_after: "k".repeat(MAX_KEY_BYTES),
            common_prefixes: Vec::new(),
            next_continuation_token: "0".repeat(MAX_TOKEN_CHARS),
            scan: largest_stats(),
        };
        assert!(page.encoded_len() < CLIENT_LIMIT);
        for len in [
            LookupKeyResponse {
                key: Some(key.clone()),
            }
            .encoded_len(),
            CommitKeyResponse {
                key: Some(key.clone()),
            }
            .encoded_len(),
            CopyKeyResponse {
                key: Some(key.clone()),
            }
            .encoded_len(),
            CompleteMultipartUploadResponse {
                key: Some(key.clone()),
            }
            .encoded_len(),
        ] {
            assert!(len < CLIENT_LIMIT);
        }
        let file = FileStatus {
            path: "p".repeat(MAX_KEY_BYTES),
            is_directory: false,
            size: u64::MAX,
            blocks: blocks(MAX_RECORD_BLOCKS),
            etag: key.etag.clone(),
            creation_time_ms: u64::MAX,
            modification_time_ms: u64::MAX,
            object_id: u64::MAX,
            update_id: u64::MAX,
            content_type: key.content_type.clone(),
            metadata: metadata(),
        };
        let statuses = ListStatusResponse {
            entries: vec![file.clone()],
            truncated: true,
            next_continuation_token: "0".repeat(MAX_TOKEN_CHARS),
            scan: largest_stats(),
        };
        assert!(statuses.encoded_len() < CLIENT_LIMIT);
        assert!(GetFileStatusResponse { status: Some(file) }.encoded_len() < CLIENT_LIMIT);
        let released = ListDeletedBlocksResponse {
            entries: vec![DeletedBlocksEntry {
                id: "0".repeat(24),
                blocks: blocks(MAX_RECORD_BLOCKS),
                origin: "o".repeat(4 * MAX_KEY_BYTES),
            }],
            truncated: true,
            next_after: "0".repeat(24),
            scan: largest_stats(),
        };
        assert!(released.encoded_len() < CLIENT_LIMIT);
        let open = ListOpenKeysResponse {
            keys: vec![OpenKeyInfo {
                name: "k".repeat(MAX_KEY_BYTES),
                session_id: u64::MAX,
                opened_ms: u64::MAX,
                allocated_blocks: vec![u64::MAX; MAX_SESSION_BLOCKS],
                client_id: "c".repeat(128),
            }],
            truncated: true,
            next_continuation_token: "0".repeat(MAX_TOKEN_CHARS),
            total: u64::MAX,
            scan: largest_stats(),
        };
        assert!(open.encoded_len() < CLIENT_LIMIT);
        // A part is at most 5 GiB: 20 blocks.
        let part = PartInfo {
            part_number: MAX_PART_NUMBER,
            size: MAX_PART_SIZE,
            etag: "e".repeat(32),
            blocks: blocks(MAX_PART_SIZE.div_ceil(BLOCK_SIZE) as usize),
            modification_time_ms: u64::MAX,
        };
        assert!(part.encoded_len() < 1024);
        // Sessions hand out at most 64 blocks per call.
        let opened = CreateFileResponse {
            session_id: u64::MAX,
            opened_ms: u64::MAX,
            blocks: blocks(crate::apply::MAX_BLOCKS_PER_CALL as usize),
            path: "p".repeat(MAX_KEY_BYTES),
        };
        assert!(opened.encoded_len() < 4 * 1024);
    }

    /// Everything a listing response carries besides its items fits the
    /// room the page keeps for it.
    #[test]
    fn page_trailers_fit_the_reserved_overhead() {
        let token = "0".repeat(MAX_TOKEN_CHARS);
        let marker = "m".repeat(MAX_KEY_BYTES);
        let trailers = [
            ListKeysResponse {
                truncated: true,
                next_start_after: marker.clone(),
                next_continuation_token: token.clone(),
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListStatusResponse {
                truncated: true,
                next_continuation_token: token.clone(),
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListOpenKeysResponse {
                truncated: true,
                next_continuation_token: token.clone(),
                total: u64::MAX,
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListMultipartUploadsResponse {
                truncated: true,
                next_key_marker: marker.clone(),
                next_upload_id_marker: "0".repeat(16),
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListPartsResponse {
                truncated: true,
                next_part_number_marker: MAX_PART_NUMBER,
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListDeletedBlocksResponse {
                truncated: true,
                next_after: "0".repeat(24),
                scan: largest_stats(),
                ..Default::default()
            }
            .encoded_len(),
            ListVolumesResponse {
                truncated: true,
                next_start_after: "v".repeat(63),
                ..Default::default()
            }
            .encoded_len(),
            ListBucketsResponse {
                truncated: true,
                next_start_after: "b".repeat(63),
                ..Default::default()
            }
            .encoded_len(),
        ];
        for (i, t) in trailers.iter().enumerate() {
            assert!(
                *t <= PAGE_OVERHEAD_BYTES,
                "trailer {i}: {t} > {PAGE_OVERHEAD_BYTES}"
            );
        }
    }

    /// Responses that are not paginated are bounded by the request limits.
    #[test]
    fn unpaginated_responses_are_bounded() {
        // DeleteKeys: at most 1000 outcomes, each a key and a short message
        // naming it (quoting at most the volume, bucket and key).
        let outcome = KeyOutcome {
            key: "k".repeat(MAX_KEY_BYTES),
            reason: "r".repeat(32),
            message: "m".repeat(2 * MAX_KEY_BYTES),
            version_id: "f".repeat(crate::apply::versions::VERSION_ID_CHARS),
            delete_marker: true,
        };
        let deleted = DeleteKeysResponse {
            results: vec![outcome; 1000],
        };
        assert!(
            deleted.encoded_len() < CLIENT_LIMIT,
            "{}",
            deleted.encoded_len()
        );
        // Cluster status: at most MAX_MEMBERS members with bounded addresses.
        let member = ClusterMember {
            node_id: u64::MAX,
            raft_addr: "a".repeat(MAX_ADDRESS_BYTES),
            grpc_addr: "a".repeat(MAX_ADDRESS_BYTES),
            voter: true,
            matched_index: u64::MAX,
            matched_known: true,
        };
        let status = ClusterStatusResponse {
            node_id: u64::MAX,
            role: "candidate".into(),
            term: u64::MAX,
            leader_id: u64::MAX,
            has_leader: true,
            last_log_index: u64::MAX,
            committed_index: u64::MAX,
            applied_index: u64::MAX,
            snapshot_index: u64::MAX,
            purged_index: u64::MAX,
            members: vec![member; MAX_MEMBERS],
            cluster_id: "a".repeat(crate::cluster_id::MAX_BYTES),
        };
        assert!(status.encoded_len() < 64 * 1024, "{}", status.encoded_len());
    }
}
