//! `omctl snapshot`: snapshots of a bucket. Reads at a snapshot are
//! `omctl key info|list --snapshot NAME`.

use anyhow::Result;
use clap::Subcommand;
use om_client::OmClient;
use om_client::v1::{SnapshotDiffEntry, SnapshotDiffKind, SnapshotDiffRequest, SnapshotInfo};
use serde_json::{Value, json};

use crate::{Output, collect_pages, print_kv, print_list, split2, table};

#[derive(Subcommand)]
pub enum SnapshotCmd {
    /// Take snapshot NAME of VOLUME/BUCKET (copies nothing).
    Create { path: String, name: String },
    /// The snapshots of VOLUME/BUCKET, by name.
    List {
        path: String,
        #[arg(long, default_value = "")]
        start_after: String,
        #[arg(long = "max", default_value_t = 0)]
        max: u32,
        #[arg(long)]
        all: bool,
    },
    /// One snapshot of VOLUME/BUCKET.
    Info { path: String, name: String },
    /// Delete snapshot NAME of VOLUME/BUCKET: what only it held is
    /// reclaimed in the background.
    Delete { path: String, name: String },
    /// The keys that differ between snapshots FROM and TO of VOLUME/BUCKET
    /// (no TO: the live bucket). `--output json` prints one JSON object per
    /// key as pages arrive.
    Diff {
        path: String,
        from: String,
        to: Option<String>,
        #[arg(long = "max", default_value_t = 0)]
        max: u32,
        /// Continue from a previous page's token.
        #[arg(long, default_value = "")]
        token: String,
        /// Every page, not only the first.
        #[arg(long)]
        all: bool,
    },
    /// Rename snapshot NAME of VOLUME/BUCKET to NEW_NAME.
    Rename {
        path: String,
        name: String,
        new_name: String,
    },
}

fn snapshot_json(s: &SnapshotInfo) -> Value {
    json!({
        "volume": s.volume, "bucket": s.bucket, "name": s.name, "index": s.index,
        "created_ms": s.creation_time_ms, "creator": s.creator,
        "keys": s.key_count, "used_bytes": s.used_bytes,
    })
}

fn kind_name(k: i32) -> &'static str {
    match SnapshotDiffKind::try_from(k) {
        Ok(SnapshotDiffKind::Created) => "created",
        Ok(SnapshotDiffKind::Deleted) => "deleted",
        Ok(SnapshotDiffKind::Modified) => "modified",
        _ => "unknown",
    }
}

fn diff_json(e: &SnapshotDiffEntry) -> Value {
    let side = |k: &Option<om_client::v1::KeyInfo>| {
        k.as_ref().map(|k| {
            json!({"size": k.size, "etag": k.etag, "modified_ms": k.modification_time_ms,
                "version_id": k.version_id})
        })
    };
    json!({"key": e.key, "kind": kind_name(e.kind), "before": side(&e.before),
        "after": side(&e.after)})
}

async fn diff(c: &OmClient, out: Output, mut req: SnapshotDiffRequest, all: bool) -> Result<()> {
    let mut rows = Vec::new();
    loop {
        let r = c.snapshot_diff(req.clone()).await?;
        for e in &r.entries {
            if out == Output::Json {
                println!("{}", serde_json::to_string(&diff_json(e))?);
            } else {
                let size = |k: &Option<om_client::v1::KeyInfo>| {
                    k.as_ref().map_or("-".to_string(), |k| k.size.to_string())
                };
                rows.push(vec![
                    kind_name(e.kind).to_string(),
                    e.key.clone(),
                    size(&e.before),
                    size(&e.after),
                ]);
            }
        }
        if !(all && r.truncated) {
            if r.truncated {
                if out == Output::Json {
                    println!("{}", json!({"next_token": r.next_continuation_token}));
                } else {
                    eprintln!("more: --token {}", r.next_continuation_token);
                }
            }
            break;
        }
        req.continuation_token = r.next_continuation_token;
    }
    if out != Output::Json {
        table(&["KIND", "KEY", "SIZE_BEFORE", "SIZE_AFTER"], rows);
    }
    Ok(())
}

pub async fn run(c: &OmClient, out: Output, cmd: SnapshotCmd) -> Result<()> {
    match cmd {
        SnapshotCmd::Diff {
            path,
            from,
            to,
            max,
            token,
            all,
        } => {
            let (v, b) = split2(&path)?;
            let req = SnapshotDiffRequest {
                volume: v.to_string(),
                bucket: b.to_string(),
                from,
                to: to.unwrap_or_default(),
                max_results: max,
                continuation_token: token,
                ..Default::default()
            };
            diff(c, out, req, all).await?;
        }
        SnapshotCmd::Create { path, name } => {
            let (v, b) = split2(&path)?;
            print_kv(out, snapshot_json(&c.create_snapshot(v, b, &name).await?));
        }
        SnapshotCmd::Info { path, name } => {
            let (v, b) = split2(&path)?;
            print_kv(out, snapshot_json(&c.get_snapshot(v, b, &name).await?));
        }
        SnapshotCmd::Delete { path, name } => {
            let (v, b) = split2(&path)?;
            c.delete_snapshot(v, b, &name).await?;
            print_kv(out, json!({"deleted": name}));
        }
        SnapshotCmd::Rename {
            path,
            name,
            new_name,
        } => {
            let (v, b) = split2(&path)?;
            print_kv(
                out,
                snapshot_json(&c.rename_snapshot(v, b, &name, &new_name).await?),
            );
        }
        SnapshotCmd::List {
            path,
            start_after,
            max,
            all,
        } => {
            let (v, b) = split2(&path)?;
            let (items, next, truncated) = collect_pages(all, &start_after, |m| async move {
                let r = c.list_snapshots(v, b, &m, max).await?;
                Ok((
                    r.snapshots.iter().map(snapshot_json).collect(),
                    r.next_start_after,
                    r.truncated,
                ))
            })
            .await?;
            print_list(
                out,
                items,
                &["name", "index", "created_ms", "keys", "used_bytes"],
                &next,
                truncated,
            );
        }
    }
    Ok(())
}
