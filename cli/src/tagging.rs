//! `omctl key tag VOLUME/BUCKET/KEY [--version ID] set|get|delete`: object
//! tags (S3's PutObjectTagging, GetObjectTagging, DeleteObjectTagging), and
//! the `--tag KEY=VALUE` pairs `omctl key put` takes.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use om_client::OmClient;
use om_client::v1::*;
use serde_json::json;

use crate::{Output, split3, table};

#[derive(clap::Args)]
pub struct Args {
    /// VOLUME/BUCKET/KEY
    pub path: String,
    /// This version of the key instead of its current one.
    #[arg(long, default_value = "")]
    pub version: String,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Replace the key's tags with KEY=VALUE pairs, comma-separated or as
    /// several arguments (none: remove every tag). The first `=` of a pair
    /// ends its key.
    Set {
        #[arg(value_delimiter = ',')]
        tags: Vec<String>,
    },
    /// The key's tags.
    Get,
    /// Remove every tag of the key.
    Delete,
}

/// KEY=VALUE pairs as a tag set; a key named twice is an error (S3 refuses
/// it too), an empty pair is skipped (a trailing comma).
pub fn parse_tags(items: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for kv in items.iter().filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("tag {kv:?} is not KEY=VALUE"))?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            anyhow::bail!("tag {k:?} is given twice");
        }
    }
    Ok(out)
}

fn show(out: Output, version_id: &str, tags: &BTreeMap<String, String>) {
    if out == Output::Json {
        println!("{}", json!({"version_id": version_id, "tags": tags}));
        return;
    }
    table(
        &["TAG", "VALUE"],
        tags.iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect(),
    );
}

pub async fn run(c: &OmClient, out: Output, a: Args) -> Result<()> {
    let (volume, bucket, key) = split3(&a.path)?;
    let (volume, bucket, key) = (volume.to_string(), bucket.to_string(), key.to_string());
    match a.cmd {
        Cmd::Set { tags } => {
            let tags = parse_tags(&tags)?;
            let r = c
                .put_key_tagging(PutKeyTaggingRequest {
                    volume,
                    bucket,
                    key,
                    version_id: a.version,
                    tags: tags.clone(),
                    ..Default::default()
                })
                .await?;
            if out == Output::Json {
                show(out, &r.version_id, &tags);
            } else {
                println!(
                    "tagged {} (version {}) with {} tags",
                    a.path,
                    r.version_id,
                    tags.len()
                );
            }
        }
        Cmd::Get => {
            let r = c
                .get_key_tagging(GetKeyTaggingRequest {
                    volume,
                    bucket,
                    key,
                    version_id: a.version,
                    ..Default::default()
                })
                .await?;
            show(out, &r.version_id, &r.tags);
        }
        Cmd::Delete => {
            let r = c
                .delete_key_tagging(DeleteKeyTaggingRequest {
                    volume,
                    bucket,
                    key,
                    version_id: a.version,
                    ..Default::default()
                })
                .await?;
            if out == Output::Json {
                show(out, &r.version_id, &BTreeMap::new());
            } else {
                println!("removed the tags of {} (version {})", a.path, r.version_id);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_tags;

    #[test]
    fn pairs_split_at_the_first_equals_sign() {
        let t = parse_tags(&["a=1".into(), "b=x=y".into(), "c=".into(), "".into()]).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t["b"], "x=y");
        assert_eq!(t["c"], "");
        assert!(parse_tags(&["novalue".into()]).is_err());
        assert!(parse_tags(&["a=1".into(), "a=2".into()]).is_err());
    }
}
