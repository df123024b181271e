//! `omctl key`: whole keys and writing in steps.

use anyhow::{Result, bail};
use clap::Subcommand;
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::{
    ListArgs, Output, Progress, key_json, objects, parse_meta, print_kv, split2, split3, table,
    table_cell, tagging, versions,
};

#[derive(Subcommand)]
pub enum KeyCmd {
    /// Create and commit VOLUME/BUCKET/KEY in one call.
    Put {
        path: String,
        #[arg(long)]
        size: u64,
        #[arg(long, default_value = "")]
        etag: String,
        #[arg(long, default_value = "")]
        content_type: String,
        #[arg(long = "meta")]
        meta: Vec<String>,
        /// An object tag KEY=VALUE (repeatable; at most 10).
        #[arg(long = "tag")]
        tag: Vec<String>,
        #[command(flatten)]
        cond: objects::CondArgs,
    },
    Info {
        path: String,
        /// This version (or delete marker) instead of the current one.
        #[arg(long, default_value = "")]
        version: String,
        /// The key as this snapshot of the bucket shows it.
        #[arg(long, default_value = "", conflicts_with = "version")]
        snapshot: String,
    },
    /// Every version and delete marker of VOLUME/BUCKET's keys, newest first per key.
    Versions(versions::ListArgs),
    /// Object tags of VOLUME/BUCKET/KEY: set, get, delete.
    Tag(tagging::Args),
    /// Open a write session for VOLUME/BUCKET/KEY; prints the session id.
    Open {
        path: String,
        /// Blocks to allocate with the session.
        #[arg(long, default_value_t = 1)]
        blocks: u32,
        #[arg(long, default_value = "")]
        content_type: String,
        #[arg(long = "meta")]
        meta: Vec<String>,
    },
    /// Allocate more blocks to an open session.
    Allocate {
        path: String,
        #[arg(long)]
        session: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Commit an open session: the data went to BLOCKS (comma-separated ids,
    /// filled in order, 256 MiB each).
    Commit {
        path: String,
        #[arg(long)]
        session: u64,
        #[arg(long)]
        size: u64,
        #[arg(long, default_value = "")]
        blocks: String,
        #[arg(long, default_value = "")]
        etag: String,
        #[command(flatten)]
        cond: objects::CondArgs,
    },
    /// Keys being written in VOLUME/BUCKET.
    ListOpen {
        path: String,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long = "max", default_value_t = 0)]
        max: u32,
        #[arg(long, default_value = "")]
        token: String,
        #[arg(long)]
        all: bool,
    },
    /// List the keys of VOLUME/BUCKET.
    List {
        path: String,
        #[command(flatten)]
        list: ListArgs,
        /// Roll keys up into common prefixes at this delimiter (S3 semantics).
        #[arg(long, default_value = "")]
        delimiter: String,
        /// Continue from a previous page's token.
        #[arg(long, default_value = "")]
        token: String,
        /// Leave block lists out (smaller pages, more keys per page).
        #[arg(long)]
        no_blocks: bool,
        /// List this snapshot of the bucket instead of the live bucket.
        #[arg(long, default_value = "")]
        snapshot: String,
    },
    /// Delete VOLUME/BUCKET/KEY (in a versioned bucket: add a delete marker).
    Delete {
        path: String,
        /// Remove this version (or delete marker) permanently.
        #[arg(long, default_value = "")]
        version: String,
        /// Delete only if what would be removed has this ETag (`*`: anything);
        /// else FAILED_PRECONDITION IF_MATCH_FAILED, and nothing changes.
        #[arg(long)]
        if_match: Option<String>,
        /// Delete only if what would be removed is this many bytes.
        #[arg(long)]
        if_size: Option<u64>,
    },
    /// Delete several keys of VOLUME/BUCKET in one request.
    DeleteMany {
        path: String,
        keys: Vec<String>,
        /// One version id per key, comma-separated (an empty entry: none).
        #[arg(long, value_delimiter = ',')]
        versions: Vec<String>,
    },
    /// Rename VOLUME/BUCKET/KEY to NEW_KEY in the same bucket.
    Rename { path: String, new_key: String },
}

pub async fn run(c: &OmClient, out: Output, k: KeyCmd) -> Result<()> {
    match k {
        KeyCmd::Put {
            path,
            size,
            etag,
            content_type,
            meta,
            tag,
            cond,
        } => {
            let (v, b, key) = split3(&path)?;
            let k = c
                .put_key_with(PutKeyRequest {
                    volume: v.to_string(),
                    bucket: b.to_string(),
                    key: key.to_string(),
                    size,
                    etag,
                    content_type,
                    metadata: parse_meta(&meta)?,
                    conditions: cond.to_proto(),
                    tags: tagging::parse_tags(&tag)?,
                    ..Default::default()
                })
                .await?;
            print_kv(out, key_json(&k));
        }
        KeyCmd::Open {
            path,
            blocks,
            content_type,
            meta,
        } => objects::open(c, out, &path, blocks, content_type, &meta).await?,
        KeyCmd::Allocate {
            path,
            session,
            count,
        } => objects::allocate(c, out, &path, session, count).await?,
        KeyCmd::Commit {
            path,
            session,
            size,
            blocks,
            etag,
            cond,
        } => objects::commit(c, out, &path, session, size, &blocks, etag, &cond).await?,
        KeyCmd::ListOpen {
            path,
            prefix,
            max,
            token,
            all,
        } => objects::list_open(c, out, &path, prefix, max, token, all).await?,
        KeyCmd::Info {
            path,
            version,
            snapshot,
        } => {
            let (v, b, key) = split3(&path)?;
            let k = if snapshot.is_empty() {
                c.lookup_key_version(v, b, key, &version).await?
            } else {
                c.lookup_key_in(v, b, key, &snapshot).await?
            };
            print_kv(out, key_json(&k));
        }
        KeyCmd::Versions(a) => versions::list(c, out, a).await?,
        KeyCmd::Tag(a) => tagging::run(c, out, a).await?,
        KeyCmd::List {
            path,
            list: l,
            delimiter,
            token,
            no_blocks,
            snapshot,
        } => {
            let (v, b) = split2(&path)?;
            let mut items = Vec::new();
            let mut token = token;
            let progress = Progress::new(l.all, "keys");
            let (next, next_token) = loop {
                let r = c
                    .list_keys(ListKeysRequest {
                        volume: v.to_string(),
                        bucket: b.to_string(),
                        prefix: l.prefix.clone(),
                        start_after: l.start_after.clone(),
                        max_keys: l.max,
                        delimiter: delimiter.clone(),
                        continuation_token: token.clone(),
                        omit_blocks: no_blocks,
                        snapshot: snapshot.clone(),
                        ..Default::default()
                    })
                    .await?;
                // Keys and common prefixes in name order, as S3 interleaves them.
                let mut page: Vec<Value> = r.keys.iter().map(key_json).collect();
                page.extend(
                    r.common_prefixes
                        .iter()
                        .map(|p| json!({"name": p, "prefix": true})),
                );
                page.sort_by(|x, y| x["name"].as_str().cmp(&y["name"].as_str()));
                items.extend(page);
                progress.update(items.len());
                if !(l.all && r.truncated) {
                    progress.done();
                    break (r.next_start_after, r.next_continuation_token);
                }
                token = r.next_continuation_token;
            };
            if out == Output::Json {
                let v = json!({"items": items, "truncated": !next_token.is_empty(),
                    "next_start_after": next, "next_token": next_token});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows = items
                    .iter()
                    .map(|i| {
                        if i["prefix"] == true {
                            vec![
                                i["name"].as_str().unwrap_or("").to_string(),
                                "PRE".into(),
                                String::new(),
                                String::new(),
                            ]
                        } else {
                            vec![
                                i["name"].as_str().unwrap_or("").to_string(),
                                table_cell("size", &i["size"]),
                                i["etag"].as_str().unwrap_or("").to_string(),
                                table_cell("modified_ms", &i["modified_ms"]),
                            ]
                        }
                    })
                    .collect();
                table(&["NAME", "SIZE", "ETAG", "MODIFIED"], rows);
                if !next_token.is_empty() {
                    println!("-- more: --token {next_token}");
                }
            }
        }
        KeyCmd::DeleteMany {
            path,
            keys,
            versions,
        } => {
            let (v, b) = split2(&path)?;
            let results = c.delete_key_versions(v, b, &keys, &versions).await?;
            let mut failed = false;
            let rows: Vec<Vec<String>> = results
                .iter()
                .map(|r| {
                    failed |= !r.reason.is_empty();
                    vec![
                        r.key.clone(),
                        if r.reason.is_empty() {
                            "deleted".to_string()
                        } else {
                            r.reason.clone()
                        },
                    ]
                })
                .collect();
            if out == Output::Json {
                let v: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({"key": r.key, "deleted": r.reason.is_empty(), "reason": r.reason,
                        "version_id": r.version_id, "delete_marker": r.delete_marker})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                table(&["KEY", "RESULT"], rows);
            }
            if failed {
                bail!("some keys were not deleted");
            }
        }
        KeyCmd::Rename { path, new_key } => {
            let (v, b, key) = split3(&path)?;
            print_kv(out, key_json(&c.rename_key(v, b, key, &new_key).await?));
        }
        KeyCmd::Delete {
            path,
            version,
            if_match,
            if_size,
        } => {
            let (v, b, key) = split3(&path)?;
            let conditions = (if_match.is_some() || if_size.is_some()).then(|| DeleteConditions {
                if_match_any: if_match.as_deref() == Some("*"),
                if_match: if_match.filter(|e| e != "*").unwrap_or_default(),
                if_size,
                ..Default::default()
            });
            let r = c.delete_key_if(v, b, key, &version, conditions).await?;
            if out == Output::Json {
                println!(
                    "{}",
                    json!({"deleted": path, "version_id": r.version_id, "delete_marker": r.delete_marker})
                );
            } else if !version.is_empty() {
                let what = if r.delete_marker {
                    "delete marker"
                } else {
                    "version"
                };
                println!("removed {what} {} of {path}", r.version_id);
            } else if r.delete_marker {
                println!("deleted key {path} (delete marker {})", r.version_id);
            } else {
                println!("deleted key {path}");
            }
        }
    }
    Ok(())
}
