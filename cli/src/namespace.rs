//! `omctl volume` and `omctl bucket`.

use anyhow::Result;
use clap::{Subcommand, ValueEnum};
use om_client::OmClient;
use om_client::v1::*;
use serde_json::json;

use crate::{
    ListArgs, Output, bucket_json, collect_pages, lifecycle, parse_meta, print_kv, print_list,
    quota, split2, versions, volume_json,
};

#[derive(Subcommand)]
pub enum VolumeCmd {
    Create {
        name: String,
        #[arg(long, default_value = "")]
        owner: String,
        /// Most committed bytes in its buckets, e.g. 10GB (0 = unlimited).
        #[arg(long, alias = "space-quota", default_value = "0", value_parser = quota::parse_size)]
        quota_bytes: u64,
        /// Most buckets the volume may hold (0 = unlimited).
        #[arg(long, alias = "namespace-quota", default_value_t = 0)]
        quota_buckets: u64,
        /// Metadata as KEY=VALUE, repeatable.
        #[arg(long = "meta")]
        meta: Vec<String>,
    },
    Info {
        name: String,
    },
    List(ListArgs),
    Delete {
        name: String,
    },
    /// Set the volume's space and/or namespace (bucket count) quota.
    Setquota(quota::SetArgs),
    /// Clear the volume's space and/or namespace quota.
    Clrquota(quota::ClrArgs),
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Layout {
    ObjectStore,
    Fso,
}

#[derive(Subcommand)]
pub enum BucketCmd {
    /// Create VOLUME/BUCKET.
    Create {
        path: String,
        #[arg(long, value_enum, default_value_t = Layout::ObjectStore)]
        layout: Layout,
        /// Most committed bytes, e.g. 10GB (0 = unlimited).
        #[arg(long, default_value = "0", value_parser = quota::parse_size)]
        space_quota: u64,
        /// Most keys, files and directories (0 = unlimited).
        #[arg(long, default_value_t = 0)]
        namespace_quota: u64,
    },
    Info {
        path: String,
    },
    /// List the buckets of VOLUME.
    List {
        volume: String,
        #[command(flatten)]
        list: ListArgs,
    },
    Delete {
        path: String,
    },
    /// Set the bucket's space and/or namespace quota.
    Setquota(quota::SetArgs),
    /// Clear the bucket's space and/or namespace quota.
    Clrquota(quota::ClrArgs),
    /// Enable or suspend versioning of VOLUME/BUCKET (never back to unversioned).
    SetVersioning(versions::SetArgs),
    /// Replace VOLUME/BUCKET's tags with TAGS (KEY=VALUE ...; none removes
    /// them; at most 50, S3's rules).
    SetTags {
        path: String,
        tags: Vec<String>,
    },
    /// Lifecycle rules (AWS's JSON): set, get, delete.
    #[command(subcommand)]
    Lifecycle(lifecycle::Cmd),
}

pub async fn volume(c: &OmClient, out: Output, v: VolumeCmd) -> Result<()> {
    match v {
        VolumeCmd::Create {
            name,
            owner,
            quota_bytes,
            quota_buckets,
            meta,
        } => {
            let v = c
                .create_volume_with(CreateVolumeRequest {
                    name,
                    owner,
                    quota_bytes,
                    quota_namespace: quota_buckets,
                    metadata: parse_meta(&meta)?,
                    ..Default::default()
                })
                .await?;
            print_kv(out, volume_json(&v));
        }
        VolumeCmd::Info { name } => print_kv(out, volume_json(&c.get_volume(&name).await?)),
        VolumeCmd::List(l) => {
            let (items, next, truncated) = collect_pages(l.all, &l.start_after, |m| {
                let c = &c;
                let prefix = l.prefix.clone();
                async move {
                    let r = c.list_volumes(&prefix, &m, l.max).await?;
                    Ok((
                        r.volumes.iter().map(volume_json).collect(),
                        r.next_start_after,
                        r.truncated,
                    ))
                }
            })
            .await?;
            print_list(
                out,
                items,
                &["name", "owner", "buckets", "created_ms"],
                &next,
                truncated,
            );
        }
        VolumeCmd::Delete { name } => {
            c.delete_volume(&name).await?;
            if out == Output::Json {
                println!("{}", json!({"deleted": name}));
            } else {
                println!("deleted volume {name}");
            }
        }
        VolumeCmd::Setquota(a) => quota::set_volume(c, out, a).await?,
        VolumeCmd::Clrquota(a) => quota::clr_volume(c, out, a).await?,
    }
    Ok(())
}

pub async fn bucket(c: &OmClient, out: Output, b: BucketCmd) -> Result<()> {
    match b {
        BucketCmd::Create {
            path,
            layout,
            space_quota,
            namespace_quota,
        } => {
            let (v, n) = split2(&path)?;
            let layout = match layout {
                Layout::ObjectStore => BucketLayout::ObjectStore,
                Layout::Fso => BucketLayout::FileSystemOptimized,
            };
            let b = c
                .create_bucket_with(CreateBucketRequest {
                    volume: v.to_string(),
                    name: n.to_string(),
                    layout: layout as i32,
                    quota_bytes: space_quota,
                    quota_namespace: namespace_quota,
                    ..Default::default()
                })
                .await?;
            print_kv(out, bucket_json(&b));
        }
        BucketCmd::Info { path } => {
            let (v, n) = split2(&path)?;
            print_kv(out, bucket_json(&c.get_bucket(v, n).await?));
        }
        BucketCmd::List { volume, list: l } => {
            let (items, next, truncated) = collect_pages(l.all, &l.start_after, |m| {
                let c = &c;
                let prefix = l.prefix.clone();
                let volume = volume.clone();
                async move {
                    let r = c.list_buckets(&volume, &prefix, &m, l.max).await?;
                    Ok((
                        r.buckets.iter().map(bucket_json).collect(),
                        r.next_start_after,
                        r.truncated,
                    ))
                }
            })
            .await?;
            print_list(
                out,
                items,
                &["name", "layout", "keys", "used_bytes"],
                &next,
                truncated,
            );
        }
        BucketCmd::SetTags { path, tags } => {
            let (v, n) = split2(&path)?;
            let tags = parse_meta(&tags)?;
            print_kv(out, bucket_json(&c.set_bucket_tags(v, n, tags).await?));
        }
        BucketCmd::Delete { path } => {
            let (v, n) = split2(&path)?;
            c.delete_bucket(v, n).await?;
            if out == Output::Json {
                println!("{}", json!({"deleted": path}));
            } else {
                println!("deleted bucket {path}");
            }
        }
        BucketCmd::Setquota(a) => quota::set_bucket(c, out, a).await?,
        BucketCmd::Clrquota(a) => quota::clr_bucket(c, out, a).await?,
        BucketCmd::SetVersioning(a) => versions::set_versioning(c, out, a).await?,
        BucketCmd::Lifecycle(l) => lifecycle::run(c, out, l).await?,
    }
    Ok(())
}
