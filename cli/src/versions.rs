//! `omctl bucket set-versioning` and `omctl key versions`.

use anyhow::Result;
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::{Output, Progress, bucket_json, key_json, print_kv, split2, table, table_cell};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum State {
    Enabled,
    Suspended,
}

#[derive(clap::Args)]
pub struct SetArgs {
    /// VOLUME/BUCKET
    pub path: String,
    #[arg(value_enum)]
    pub state: State,
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// VOLUME/BUCKET
    pub path: String,
    /// Only keys starting with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Roll keys up into common prefixes at this delimiter (S3 semantics).
    #[arg(long, default_value = "")]
    pub delimiter: String,
    /// Start after every version of this key (or, with --version-id-marker,
    /// after that version of it).
    #[arg(long, default_value = "")]
    pub key_marker: String,
    #[arg(long, default_value = "")]
    pub version_id_marker: String,
    /// Page size (0 = the server's cap).
    #[arg(long = "max", alias = "max-keys", default_value_t = 0)]
    pub max: u32,
    /// Continue from a previous page's token.
    #[arg(long, default_value = "")]
    pub token: String,
    /// Follow continuation tokens to the end.
    #[arg(long)]
    pub all: bool,
    /// Leave block lists out.
    #[arg(long)]
    pub no_blocks: bool,
}

pub fn versioning_name(v: i32) -> &'static str {
    match BucketVersioning::try_from(v) {
        Ok(BucketVersioning::Enabled) => "ENABLED",
        Ok(BucketVersioning::Suspended) => "SUSPENDED",
        _ => "UNVERSIONED",
    }
}

pub async fn set_versioning(c: &OmClient, out: Output, a: SetArgs) -> Result<()> {
    let (v, b) = split2(&a.path)?;
    let state = match a.state {
        State::Enabled => BucketVersioning::Enabled,
        State::Suspended => BucketVersioning::Suspended,
    };
    print_kv(
        out,
        bucket_json(&c.set_bucket_versioning(v, b, state).await?),
    );
    Ok(())
}

pub async fn list(c: &OmClient, out: Output, a: ListArgs) -> Result<()> {
    let (v, b) = split2(&a.path)?;
    let mut items: Vec<Value> = Vec::new();
    let mut token = a.token.clone();
    let progress = Progress::new(a.all, "versions");
    let last = loop {
        let r = c
            .list_object_versions(ListObjectVersionsRequest {
                volume: v.to_string(),
                bucket: b.to_string(),
                prefix: a.prefix.clone(),
                delimiter: a.delimiter.clone(),
                key_marker: a.key_marker.clone(),
                version_id_marker: a.version_id_marker.clone(),
                max_keys: a.max,
                continuation_token: token.clone(),
                omit_blocks: a.no_blocks,
                ..Default::default()
            })
            .await?;
        // Versions and common prefixes in key order; a key's versions stay
        // newest first (a stable sort keeps the server's order).
        let mut page: Vec<Value> = r.versions.iter().map(key_json).collect();
        page.extend(
            r.common_prefixes
                .iter()
                .map(|p| json!({"name": p, "prefix": true})),
        );
        page.sort_by(|x, y| x["name"].as_str().cmp(&y["name"].as_str()));
        items.extend(page);
        progress.update(items.len());
        if !(a.all && r.truncated) {
            progress.done();
            break r;
        }
        token = r.next_continuation_token;
    };
    if out == Output::Json {
        let v = json!({"items": items, "truncated": last.truncated,
            "next_key_marker": last.next_key_marker,
            "next_version_id_marker": last.next_version_id_marker,
            "next_token": last.next_continuation_token});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let rows = items
        .iter()
        .map(|i| {
            if i["prefix"] == true {
                let name = i["name"].as_str().unwrap_or("").to_string();
                return vec![
                    name,
                    "PRE".into(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ];
            }
            let kind = if i["delete_marker"] == true {
                "marker"
            } else {
                "object"
            };
            vec![
                i["name"].as_str().unwrap_or("").to_string(),
                i["version_id"].as_str().unwrap_or("").to_string(),
                if i["is_latest"] == true { "yes" } else { "" }.to_string(),
                kind.to_string(),
                table_cell("size", &i["size"]),
                table_cell("modified_ms", &i["modified_ms"]),
            ]
        })
        .collect();
    table(
        &["NAME", "VERSION", "LATEST", "KIND", "SIZE", "MODIFIED"],
        rows,
    );
    if last.truncated {
        println!(
            "-- more: --token {} (or --key-marker {:?} --version-id-marker {:?})",
            last.next_continuation_token, last.next_key_marker, last.next_version_id_marker
        );
    }
    Ok(())
}
