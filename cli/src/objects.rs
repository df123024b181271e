//! `omctl` commands for writing keys in steps, copies, multipart uploads and
//! block reclamation.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::{Output, key_json, parse_meta, print_kv, split2, split3, table};

/// Size of the blocks om allocates; a commit fills them in order.
/// Size of the blocks om allocates (`om::apply::BLOCK_SIZE`).
pub const BLOCK_SIZE: u64 = 256 * 1024 * 1024;
/// Largest object S3 (and om) allows: 5 TiB.
pub const MAX_KEY_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;

/// Conditions on the key a write replaces.
#[derive(clap::Args, Default)]
pub struct CondArgs {
    /// Only if the key's current ETag is this.
    #[arg(long, default_value = "")]
    pub if_match: String,
    /// Only if the key does not exist (If-None-Match: *).
    #[arg(long)]
    pub if_none_match: bool,
    /// Only if the key was last written at this update id.
    #[arg(long, default_value_t = 0)]
    pub expected_update_id: u64,
}

impl CondArgs {
    pub fn to_proto(&self) -> Option<KeyConditions> {
        (!self.if_match.is_empty() || self.if_none_match || self.expected_update_id != 0).then(
            || KeyConditions {
                if_match: self.if_match.clone(),
                if_none_match_any: self.if_none_match,
                expected_update_id: self.expected_update_id,
                ..Default::default()
            },
        )
    }
}

#[derive(Subcommand)]
pub enum MpuCmd {
    /// Start a multipart upload of VOLUME/BUCKET/KEY; prints the upload id.
    Init {
        path: String,
        #[arg(long, default_value = "")]
        content_type: String,
        #[arg(long = "meta")]
        meta: Vec<String>,
    },
    /// Record an uploaded part (om allocates its blocks).
    Part {
        path: String,
        #[arg(long)]
        upload: String,
        #[arg(long)]
        part: u32,
        #[arg(long)]
        size: u64,
        /// Hex MD5 of the part's bytes.
        #[arg(long)]
        etag: String,
    },
    /// Complete an upload from PART=ETAG pairs in ascending part order.
    Complete {
        path: String,
        #[arg(long)]
        upload: String,
        parts: Vec<String>,
        #[command(flatten)]
        cond: CondArgs,
    },
    /// Abort an upload, freeing its parts.
    Abort {
        path: String,
        #[arg(long)]
        upload: String,
    },
    /// List the parts of an upload.
    Parts {
        path: String,
        #[arg(long)]
        upload: String,
        /// List parts after this part number.
        #[arg(long, default_value_t = 0)]
        marker: u32,
        #[arg(long, default_value_t = 0)]
        max: u32,
        #[arg(long)]
        all: bool,
    },
    /// List the uploads in progress in VOLUME/BUCKET.
    List {
        path: String,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long, default_value = "")]
        delimiter: String,
        #[arg(long, default_value = "")]
        key_marker: String,
        #[arg(long, default_value = "")]
        upload_id_marker: String,
        #[arg(long, default_value_t = 0)]
        max: u32,
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
pub enum BlocksCmd {
    /// Blocks awaiting reclamation, oldest first.
    List {
        /// Start after this entry id.
        #[arg(long, default_value = "")]
        after: String,
        #[arg(long, default_value_t = 0)]
        max: u32,
        #[arg(long)]
        all: bool,
    },
    /// Acknowledge entries whose blocks were freed.
    Ack { ids: Vec<String> },
}

/// Arguments of `omctl copy`.
#[derive(clap::Args)]
pub struct CopyArgs {
    /// Source VOLUME/BUCKET/KEY.
    pub src: String,
    /// Destination VOLUME/BUCKET/KEY.
    pub dst: String,
    #[arg(long, default_value = "")]
    pub src_if_match: String,
    #[arg(long, default_value = "")]
    pub src_if_none_match: String,
    #[arg(long, default_value_t = 0)]
    pub src_if_modified_since_ms: u64,
    #[arg(long, default_value_t = 0)]
    pub src_if_unmodified_since_ms: u64,
    /// Replace the metadata with --meta/--content-type instead of copying it.
    #[arg(long)]
    pub replace_metadata: bool,
    #[arg(long = "meta")]
    pub meta: Vec<String>,
    #[arg(long, default_value = "")]
    pub content_type: String,
    /// Hex MD5 of the content; needed when the source's ETag is multipart or missing.
    #[arg(long, default_value = "")]
    pub content_md5: String,
    #[command(flatten)]
    pub cond: CondArgs,
}

/// Lays `ids` out over `size` bytes, filling each block in order.
pub fn lay_out(ids: &[u64], size: u64) -> Result<Vec<BlockInfo>> {
    let mut out = Vec::new();
    let mut offset = 0;
    for &id in ids {
        if offset >= size {
            break;
        }
        let length = BLOCK_SIZE.min(size - offset);
        out.push(BlockInfo {
            block_id: id,
            offset,
            length,
        });
        offset += length;
    }
    if offset < size {
        bail!(
            "{} blocks hold at most {} bytes, size is {size}",
            ids.len(),
            ids.len() as u64 * BLOCK_SIZE
        );
    }
    Ok(out)
}

fn blocks_json(blocks: &[BlockInfo]) -> Value {
    blocks
        .iter()
        .map(|b| json!({"id": b.block_id, "offset": b.offset, "length": b.length}))
        .collect()
}

fn upload_json(u: &UploadInfo) -> Value {
    json!({"key": u.key, "upload_id": u.upload_id, "initiated_ms": u.initiated_ms,
        "content_type": u.content_type, "metadata": u.metadata})
}

fn part_json(p: &PartInfo) -> Value {
    json!({"part": p.part_number, "size": p.size, "etag": p.etag,
        "blocks": blocks_json(&p.blocks), "modified_ms": p.modification_time_ms})
}

fn print_rows(out: Output, v: Value, headers: &[&str], cols: &[&str], items: &str) {
    if out == Output::Json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let rows = v[items]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    cols.iter()
                        .map(|c| match &i[*c] {
                            Value::String(s) => s.clone(),
                            Value::Null => String::new(),
                            other => other.to_string(),
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    table(headers, rows);
}

pub async fn open(
    c: &OmClient,
    out: Output,
    path: &str,
    blocks: u32,
    content_type: String,
    meta: &[String],
) -> Result<()> {
    let (v, b, k) = split3(path)?;
    let r = c
        .open_key(OpenKeyRequest {
            volume: v.into(),
            bucket: b.into(),
            key: k.into(),
            content_type,
            metadata: parse_meta(meta)?,
            blocks,
            ..Default::default()
        })
        .await?;
    print_kv(
        out,
        json!({"session": r.session_id, "opened_ms": r.opened_ms,
            "blocks": r.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>()}),
    );
    Ok(())
}

pub async fn allocate(
    c: &OmClient,
    out: Output,
    path: &str,
    session: u64,
    count: u32,
) -> Result<()> {
    let (v, b, k) = split3(path)?;
    let r = c
        .allocate_block(AllocateBlockRequest {
            volume: v.into(),
            bucket: b.into(),
            key: k.into(),
            session_id: session,
            count,
            ..Default::default()
        })
        .await?;
    print_kv(
        out,
        json!({"session": session, "blocks": r.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>()}),
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub async fn commit(
    c: &OmClient,
    out: Output,
    path: &str,
    session: u64,
    size: u64,
    blocks: &str,
    etag: String,
    cond: &CondArgs,
) -> Result<()> {
    let (v, b, k) = split3(path)?;
    let ids = blocks
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .with_context(|| format!("block id {s:?}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let r = c
        .commit_key(CommitKeyRequest {
            volume: v.into(),
            bucket: b.into(),
            key: k.into(),
            session_id: session,
            size,
            blocks: lay_out(&ids, size)?,
            etag,
            conditions: cond.to_proto(),
            ..Default::default()
        })
        .await?;
    print_kv(out, key_json(&r.key.unwrap_or_default()));
    Ok(())
}

pub async fn list_open(
    c: &OmClient,
    out: Output,
    path: &str,
    prefix: String,
    max: u32,
    mut token: String,
    all: bool,
) -> Result<()> {
    let (v, b) = split2(path)?;
    let mut items = Vec::new();
    let (total, next) = loop {
        let r = c
            .list_open_keys(ListOpenKeysRequest {
                volume: v.into(),
                bucket: b.into(),
                prefix: prefix.clone(),
                max_keys: max,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await?;
        items.extend(r.keys.iter().map(|o| {
            json!({"name": o.name, "session": o.session_id, "opened_ms": o.opened_ms,
                "blocks": o.allocated_blocks.len()})
        }));
        if !(all && r.truncated) {
            break (r.total, r.next_continuation_token);
        }
        token = r.next_continuation_token;
    };
    let v = json!({"items": items, "total": total, "next_token": next});
    print_rows(
        out,
        v,
        &["NAME", "SESSION", "OPENED_MS", "BLOCKS"],
        &["name", "session", "opened_ms", "blocks"],
        "items",
    );
    if out == Output::Table {
        println!("-- {total} open in the bucket");
        if !next.is_empty() {
            println!("-- more: --token {next}");
        }
    }
    Ok(())
}

pub async fn copy(c: &OmClient, out: Output, a: CopyArgs) -> Result<()> {
    let (sv, sb, sk) = split3(&a.src)?;
    let (v, b, k) = split3(&a.dst)?;
    let r = c
        .copy_key(CopyKeyRequest {
            src_volume: sv.into(),
            src_bucket: sb.into(),
            src_key: sk.into(),
            volume: v.into(),
            bucket: b.into(),
            key: k.into(),
            src_if_match: a.src_if_match,
            src_if_none_match: a.src_if_none_match,
            src_if_modified_since_ms: a.src_if_modified_since_ms,
            src_if_unmodified_since_ms: a.src_if_unmodified_since_ms,
            metadata_directive: if a.replace_metadata {
                MetadataDirective::Replace as i32
            } else {
                MetadataDirective::Copy as i32
            },
            metadata: parse_meta(&a.meta)?,
            content_type: a.content_type,
            content_md5: a.content_md5,
            conditions: a.cond.to_proto(),
            ..Default::default()
        })
        .await?;
    print_kv(out, key_json(&r.key.unwrap_or_default()));
    Ok(())
}

pub async fn mpu(c: &OmClient, out: Output, cmd: MpuCmd) -> Result<()> {
    match cmd {
        MpuCmd::Init {
            path,
            content_type,
            meta,
        } => {
            let (v, b, k) = split3(&path)?;
            let r = c
                .initiate_multipart_upload(InitiateMultipartUploadRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    key: k.into(),
                    content_type,
                    metadata: parse_meta(&meta)?,
                    ..Default::default()
                })
                .await?;
            print_kv(out, upload_json(&r.upload.unwrap_or_default()));
        }
        MpuCmd::Part {
            path,
            upload,
            part,
            size,
            etag,
        } => {
            let (v, b, k) = split3(&path)?;
            let r = c
                .commit_part(CommitPartRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    key: k.into(),
                    upload_id: upload,
                    part_number: part,
                    size,
                    etag,
                    ..Default::default()
                })
                .await?;
            print_kv(out, part_json(&r.part.unwrap_or_default()));
        }
        MpuCmd::Complete {
            path,
            upload,
            parts,
            cond,
        } => {
            let (v, b, k) = split3(&path)?;
            let parts = parts
                .iter()
                .map(|p| {
                    let (n, e) = p
                        .split_once('=')
                        .with_context(|| format!("part {p:?} is not PART=ETAG"))?;
                    Ok(CompletedPart {
                        part_number: n.parse().with_context(|| format!("part number {n:?}"))?,
                        etag: e.to_string(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let r = c
                .complete_multipart_upload(CompleteMultipartUploadRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    key: k.into(),
                    upload_id: upload,
                    parts,
                    conditions: cond.to_proto(),
                    ..Default::default()
                })
                .await?;
            print_kv(out, key_json(&r.key.unwrap_or_default()));
        }
        MpuCmd::Abort { path, upload } => {
            let (v, b, k) = split3(&path)?;
            c.abort_multipart_upload(AbortMultipartUploadRequest {
                volume: v.into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: upload.clone(),
                ..Default::default()
            })
            .await?;
            print_kv(out, json!({"aborted": upload}));
        }
        MpuCmd::Parts {
            path,
            upload,
            mut marker,
            max,
            all,
        } => {
            let (v, b, k) = split3(&path)?;
            let mut items = Vec::new();
            let next = loop {
                let r = c
                    .list_parts(ListPartsRequest {
                        volume: v.into(),
                        bucket: b.into(),
                        key: k.into(),
                        upload_id: upload.clone(),
                        part_number_marker: marker,
                        max_parts: max,
                        ..Default::default()
                    })
                    .await?;
                items.extend(r.parts.iter().map(part_json));
                if !(all && r.truncated) {
                    break r.truncated.then_some(r.next_part_number_marker);
                }
                marker = r.next_part_number_marker;
            };
            let v = json!({"items": items, "next_part_number_marker": next});
            print_rows(
                out,
                v,
                &["PART", "SIZE", "ETAG", "MODIFIED_MS"],
                &["part", "size", "etag", "modified_ms"],
                "items",
            );
            if let (Output::Table, Some(n)) = (out, next) {
                println!("-- more: --marker {n}");
            }
        }
        MpuCmd::List {
            path,
            prefix,
            delimiter,
            mut key_marker,
            mut upload_id_marker,
            max,
            all,
        } => {
            let (v, b) = split2(&path)?;
            let mut items = Vec::new();
            let mut prefixes = Vec::new();
            let next = loop {
                let r = c
                    .list_multipart_uploads(ListMultipartUploadsRequest {
                        volume: v.into(),
                        bucket: b.into(),
                        prefix: prefix.clone(),
                        delimiter: delimiter.clone(),
                        key_marker: key_marker.clone(),
                        upload_id_marker: upload_id_marker.clone(),
                        max_uploads: max,
                        ..Default::default()
                    })
                    .await?;
                items.extend(r.uploads.iter().map(upload_json));
                prefixes.extend(r.common_prefixes.clone());
                if !(all && r.truncated) {
                    break r
                        .truncated
                        .then_some((r.next_key_marker, r.next_upload_id_marker));
                }
                key_marker = r.next_key_marker;
                upload_id_marker = r.next_upload_id_marker;
            };
            for p in &prefixes {
                items.push(json!({"key": p, "upload_id": "PRE"}));
            }
            let v = json!({"items": items, "next": next.as_ref().map(|(k, u)| json!({"key_marker": k, "upload_id_marker": u}))});
            print_rows(
                out,
                v,
                &["KEY", "UPLOAD_ID", "INITIATED_MS"],
                &["key", "upload_id", "initiated_ms"],
                "items",
            );
            if let (Output::Table, Some((k, u))) = (out, next) {
                println!("-- more: --key-marker {k:?} --upload-id-marker {u:?}");
            }
        }
    }
    Ok(())
}

pub async fn blocks(c: &OmClient, out: Output, cmd: BlocksCmd) -> Result<()> {
    match cmd {
        BlocksCmd::List {
            mut after,
            max,
            all,
        } => {
            let mut items = Vec::new();
            let next = loop {
                let r = c
                    .list_deleted_blocks(ListDeletedBlocksRequest {
                        after: after.clone(),
                        max_entries: max,
                        ..Default::default()
                    })
                    .await?;
                items.extend(r.entries.iter().map(|e| {
                    json!({"id": e.id, "blocks": e.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>(),
                        "origin": e.origin})
                }));
                if !(all && r.truncated) {
                    break r.next_after;
                }
                after = r.next_after;
            };
            let v = json!({"items": items, "next_after": next});
            print_rows(
                out,
                v,
                &["ID", "BLOCKS", "ORIGIN"],
                &["id", "blocks", "origin"],
                "items",
            );
            if out == Output::Table && !next.is_empty() {
                println!("-- more: --after {next}");
            }
        }
        BlocksCmd::Ack { ids } => {
            let r = c
                .ack_deleted_blocks(AckDeletedBlocksRequest {
                    ids,
                    ..Default::default()
                })
                .await?;
            print_kv(out, json!({"acknowledged": r.acknowledged}));
        }
    }
    Ok(())
}
