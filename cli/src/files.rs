//! `omctl fs`: directories and files of FILE_SYSTEM_OPTIMIZED buckets.

use anyhow::{Result, bail};
use clap::Subcommand;
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::objects::lay_out;
use crate::{Output, print_kv, split3, table};

#[derive(Subcommand)]
pub enum FsCmd {
    /// Create VOLUME/BUCKET/PATH and any missing parents.
    Mkdir { path: String },
    /// Open a file session (commit it with `omctl key commit` on the same path).
    Create {
        path: String,
        /// Create missing parent directories.
        #[arg(long)]
        recursive: bool,
        /// Replace an existing file.
        #[arg(long)]
        overwrite: bool,
        #[arg(long, default_value_t = 1)]
        blocks: u32,
    },
    /// Create and commit a file of SIZE bytes in one go (parents created).
    Write {
        path: String,
        #[arg(long)]
        size: u64,
        #[arg(long, default_value = "")]
        etag: String,
        #[arg(long)]
        overwrite: bool,
    },
    /// Status of a file or directory.
    Stat { path: String },
    /// List a directory (VOLUME/BUCKET for the root).
    Ls {
        path: String,
        #[arg(long)]
        recursive: bool,
        #[arg(long, default_value = "")]
        start_after: String,
        #[arg(long, default_value_t = 0)]
        max: u32,
        #[arg(long, default_value = "")]
        token: String,
        #[arg(long)]
        all: bool,
        /// Leave the block lists of files out.
        #[arg(long)]
        no_blocks: bool,
    },
    /// Delete a file or directory (non-empty directories need --recursive).
    Rm {
        path: String,
        #[arg(long)]
        recursive: bool,
    },
    /// Rename VOLUME/BUCKET/FROM to TO (a path in the same bucket).
    Mv { path: String, to: String },
}

fn status_json(s: &FileStatus) -> Value {
    json!({"path": s.path, "type": if s.is_directory { "dir" } else { "file" },
        "size": s.size, "etag": s.etag, "modified_ms": s.modification_time_ms,
        "object_id": s.object_id, "update_id": s.update_id,
        "blocks": s.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>()})
}

/// `VOLUME/BUCKET[/PATH]`.
fn split_dir(path: &str) -> Result<(&str, &str, &str)> {
    let mut it = path.splitn(3, '/');
    match (it.next(), it.next(), it.next()) {
        (Some(v), Some(b), rest) if !v.is_empty() && !b.is_empty() => {
            Ok((v, b, rest.unwrap_or("")))
        }
        _ => bail!("expected VOLUME/BUCKET[/PATH], got {path:?}"),
    }
}

pub async fn run(c: &OmClient, out: Output, cmd: FsCmd) -> Result<()> {
    match cmd {
        FsCmd::Mkdir { path } => {
            let (v, b, p) = split3(&path)?;
            let r = c
                .create_directory(CreateDirectoryRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    path: p.into(),
                    ..Default::default()
                })
                .await?;
            print_kv(out, status_json(&r.status.unwrap_or_default()));
        }
        FsCmd::Create {
            path,
            recursive,
            overwrite,
            blocks,
        } => {
            let (v, b, p) = split3(&path)?;
            let r = c
                .create_file(CreateFileRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    path: p.into(),
                    recursive,
                    overwrite,
                    blocks,
                    ..Default::default()
                })
                .await?;
            print_kv(
                out,
                json!({"session": r.session_id, "path": r.path,
                    "blocks": r.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>()}),
            );
        }
        FsCmd::Write {
            path,
            size,
            etag,
            overwrite,
        } => {
            let (v, b, p) = split3(&path)?;
            // Everything that can be checked here is checked before a session
            // (which holds blocks until it commits or expires) is opened.
            let blocks = blocks_for(size)?;
            let first = blocks.min(MAX_BLOCKS_PER_CALL);
            let s = c
                .create_file(CreateFileRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    path: p.into(),
                    recursive: true,
                    overwrite,
                    blocks: first,
                    ..Default::default()
                })
                .await?;
            let mut ids: Vec<u64> = s.blocks.iter().map(|b| b.block_id).collect();
            while (ids.len() as u32) < blocks {
                let more = (blocks - ids.len() as u32).min(MAX_BLOCKS_PER_CALL);
                let r = c
                    .allocate_block(AllocateBlockRequest {
                        volume: v.into(),
                        bucket: b.into(),
                        key: s.path.clone(),
                        session_id: s.session_id,
                        count: more,
                        ..Default::default()
                    })
                    .await?;
                ids.extend(r.blocks.iter().map(|b| b.block_id));
            }
            let k = c
                .commit_key(CommitKeyRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    key: s.path.clone(),
                    session_id: s.session_id,
                    size,
                    blocks: lay_out(&ids, size)?,
                    etag,
                    ..Default::default()
                })
                .await?
                .key
                .unwrap_or_default();
            print_kv(
                out,
                json!({"path": s.path, "size": k.size, "etag": k.etag,
                    "blocks": k.blocks.iter().map(|b| b.block_id).collect::<Vec<_>>(),
                    "update_id": k.update_id}),
            );
        }
        FsCmd::Stat { path } => {
            let (v, b, p) = split_dir(&path)?;
            let r = c
                .get_file_status(GetFileStatusRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    path: p.into(),
                    ..Default::default()
                })
                .await?;
            print_kv(out, status_json(&r.status.unwrap_or_default()));
        }
        FsCmd::Ls {
            path,
            recursive,
            start_after,
            max,
            mut token,
            all,
            no_blocks,
        } => {
            let (v, b, p) = split_dir(&path)?;
            let mut items = Vec::new();
            let next = loop {
                let r = c
                    .list_status(ListStatusRequest {
                        volume: v.into(),
                        bucket: b.into(),
                        path: p.into(),
                        start_after: start_after.clone(),
                        max_entries: max,
                        recursive,
                        continuation_token: token.clone(),
                        omit_blocks: no_blocks,
                        ..Default::default()
                    })
                    .await?;
                items.extend(r.entries.iter().map(status_json));
                if !(all && r.truncated) {
                    break r.next_continuation_token;
                }
                token = r.next_continuation_token;
            };
            if out == Output::Json {
                let v = json!({"items": items, "truncated": !next.is_empty(), "next_token": next});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows = items
                    .iter()
                    .map(|i| {
                        ["type", "size", "modified_ms", "path"]
                            .iter()
                            .map(|c| match &i[*c] {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .collect()
                    })
                    .collect();
                table(&["TYPE", "SIZE", "MODIFIED_MS", "PATH"], rows);
                if !next.is_empty() {
                    println!("-- more: --token {next}");
                }
            }
        }
        FsCmd::Rm { path, recursive } => {
            let (v, b, p) = split3(&path)?;
            c.delete_path(DeletePathRequest {
                volume: v.into(),
                bucket: b.into(),
                path: p.into(),
                recursive,
                ..Default::default()
            })
            .await?;
            print_kv(out, json!({"deleted": p}));
        }
        FsCmd::Mv { path, to } => {
            let (v, b, p) = split3(&path)?;
            let r = c
                .rename_path(RenamePathRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    from: p.into(),
                    to,
                    ..Default::default()
                })
                .await?;
            print_kv(out, status_json(&r.status.unwrap_or_default()));
        }
    }
    Ok(())
}

/// Most blocks one OpenKey/CreateFile/AllocateBlock call asks for (the
/// server's per-call limit).
const MAX_BLOCKS_PER_CALL: u32 = 64;

/// Blocks a file of `size` bytes needs, refusing sizes no key may have.
fn blocks_for(size: u64) -> Result<u32> {
    if size > crate::objects::MAX_KEY_SIZE {
        bail!(
            "size {size} exceeds the 5 TiB object limit ({} bytes)",
            crate::objects::MAX_KEY_SIZE
        );
    }
    Ok(size.div_ceil(crate::objects::BLOCK_SIZE) as u32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_are_checked_before_a_session_opens() {
        assert_eq!(super::blocks_for(0).unwrap(), 0);
        assert_eq!(super::blocks_for(1).unwrap(), 1);
        assert_eq!(super::blocks_for(20 << 30).unwrap(), 80);
        assert_eq!(super::blocks_for(5 << 40).unwrap(), 20480);
        assert!(super::blocks_for((5 << 40) + 1).is_err());
    }
}
