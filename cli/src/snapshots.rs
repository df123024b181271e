//! `omctl snapshot`: snapshots of a bucket. Reads at a snapshot are
//! `omctl key info|list --snapshot NAME`.

use anyhow::Result;
use clap::Subcommand;
use om_client::OmClient;
use om_client::v1::SnapshotInfo;
use serde_json::{Value, json};

use crate::{Output, collect_pages, print_kv, print_list, split2};

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

pub async fn run(c: &OmClient, out: Output, cmd: SnapshotCmd) -> Result<()> {
    match cmd {
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
