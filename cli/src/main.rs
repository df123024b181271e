//! `omctl`: the admin CLI of om.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use om_client::v1::*;
use om_client::{ClientError, ClientOptions, OmClient};
use serde_json::{Value, json};

mod acl;
mod backup_cmd;
mod bench;
mod bench_mix;
mod files;
mod lifecycle;
mod objects;
mod quota;
mod tagging;
mod token;
mod versions;

#[derive(Parser)]
#[command(
    name = "omctl",
    version,
    about = "Admin CLI of om, the replicated object-metadata manager"
)]
struct Cli {
    /// om gRPC endpoint(s), comma-separated; the client finds the leader.
    #[arg(
        long,
        global = true,
        env = "OM_ENDPOINT",
        default_value = "127.0.0.1:9862"
    )]
    endpoint: String,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Serve reads from the contacted node's local state (may be stale).
    #[arg(long, global = true)]
    stale: bool,
    /// With --stale: the oldest state accepted, in milliseconds since the
    /// node last heard from a leader [default: the server's].
    #[arg(long, global = true, requires = "stale")]
    max_staleness_ms: Option<u64>,
    /// Linearizable reads under the leader's lease instead of a quorum check.
    #[arg(long, global = true, conflicts_with = "stale")]
    lease: bool,
    /// Give up after this many seconds, retries included.
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
    /// PEM CA bundle that signed the servers' certificates: connect over TLS.
    #[arg(long, global = true, env = "OM_CACERT")]
    cacert: Option<PathBuf>,
    /// PEM client certificate, for servers that require mutual TLS.
    #[arg(long, global = true, env = "OM_CERT", requires = "key")]
    cert: Option<PathBuf>,
    /// PEM private key of `--cert`.
    #[arg(long, global = true, env = "OM_KEY", requires = "cert")]
    key: Option<PathBuf>,
    /// Bearer token for servers started with `--token-file` (prefer the
    /// OM_TOKEN environment variable: a flag shows in the process list).
    /// Listings' `--token` is their continuation token.
    #[arg(long, global = true, env = "OM_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Act for this user (the principal needs the IMPERSONATE right), as
    /// an S3 gateway does for the user behind an access key.
    #[arg(long = "as", global = true, env = "OM_AS")]
    as_user: Option<String>,
    /// Groups of the `--as` user (repeat or comma-separate).
    #[arg(
        long = "as-group",
        global = true,
        requires = "as_user",
        value_delimiter = ','
    )]
    as_groups: Vec<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

impl Cli {
    /// TLS settings from `--cacert/--cert/--key`, if any.
    fn tls(&self) -> Result<Option<Arc<om_tls::ClientTls>>> {
        if self.cacert.is_none() {
            if self.cert.is_some() {
                bail!("--cert needs --cacert, the CA that signed the servers' certificates");
            }
            return Ok(None);
        }
        let files = om_tls::TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.cacert.clone(),
            crl: None,
        };
        Ok(Some(om_tls::ClientTls::load("omctl", files)?))
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Volumes: create, info, list, delete, setquota, clrquota.
    #[command(subcommand)]
    Volume(VolumeCmd),
    /// Buckets: create, info, list, delete, setquota, clrquota.
    #[command(subcommand)]
    Bucket(BucketCmd),
    /// Keys: put, info, list, delete, rename, and writing in steps (open,
    /// allocate, commit, list-open).
    #[command(subcommand)]
    Key(KeyCmd),
    /// Server-side copy of a key, sharing its blocks.
    Copy(objects::CopyArgs),
    /// Multipart uploads: init, part, complete, abort, parts, list.
    #[command(subcommand)]
    Mpu(objects::MpuCmd),
    /// Block reclamation: list released blocks, acknowledge freed ones.
    #[command(subcommand)]
    Blocks(objects::BlocksCmd),
    /// FILE_SYSTEM_OPTIMIZED buckets: mkdir, create, write, stat, ls, rm, mv.
    #[command(subcommand)]
    Fs(files::FsCmd),
    /// Cluster introspection and membership.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Measure write and read throughput (and, side by side, etcd's); `bench
    /// load` and `bench mix` build a key space and run operation mixes on it.
    Bench(BenchCmd),
    /// Bearer tokens: `token new PRINCIPAL` makes one and its `--token-file`
    /// line; `token hash PRINCIPAL` prints the line of a token read on stdin.
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// ACLs of the cluster (`/`), a volume or a bucket: get, set, add, remove.
    #[command(subcommand)]
    Acl(acl::AclCmd),
    /// Who the server takes this client for, and whether it is an admin.
    Whoami,
    /// Backups: create (online, incremental), list, verify, prune. Restore
    /// with `om restore`.
    #[command(subcommand)]
    Backup(backup_cmd::BackupCmd),
}

#[derive(clap::Args)]
struct ListArgs {
    /// Only names starting with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// List names after this one (exclusive).
    #[arg(long, default_value = "")]
    start_after: String,
    /// Page size (0 = the server's cap).
    #[arg(long = "max", alias = "max-keys", default_value_t = 0)]
    max: u32,
    /// Follow continuation markers to the end.
    #[arg(long)]
    all: bool,
}

#[derive(Subcommand)]
enum VolumeCmd {
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
enum Layout {
    ObjectStore,
    Fso,
}

#[derive(Subcommand)]
enum BucketCmd {
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
    /// Lifecycle rules (AWS's JSON): set, get, delete.
    #[command(subcommand)]
    Lifecycle(lifecycle::Cmd),
}

#[derive(Subcommand)]
enum KeyCmd {
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
    },
    /// Delete VOLUME/BUCKET/KEY (in a versioned bucket: add a delete marker).
    Delete {
        path: String,
        /// Remove this version (or delete marker) permanently.
        #[arg(long, default_value = "")]
        version: String,
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

#[derive(Subcommand)]
enum ClusterCmd {
    /// Role, term, leader, log indexes and lag of every member.
    Status,
    /// Add a node started with `om --join`: as a learner, then (once caught up) a voter.
    AddNode {
        node_id: u64,
        #[arg(long)]
        raft_addr: String,
        #[arg(long)]
        grpc_addr: String,
        /// Leave it a learner.
        #[arg(long)]
        learner: bool,
    },
    /// Remove a voter or learner.
    RemoveNode { node_id: u64 },
    /// Hand leadership to another voter.
    TransferLeader { node_id: u64 },
    /// Compare every voter's state digest at the newest index all of them
    /// applied, then every table record by record at one index (a
    /// verification entry in the log), naming the first differing key;
    /// exits non-zero unless every voter agrees on both.
    Verify {
        /// Only the state digests (no table scan).
        #[arg(long)]
        digests_only: bool,
    },
}

fn split2(path: &str) -> Result<(&str, &str)> {
    match path.split_once('/') {
        Some((v, b)) if !v.is_empty() && !b.is_empty() && !b.contains('/') => Ok((v, b)),
        _ => bail!("expected VOLUME/BUCKET, got {path:?}"),
    }
}

fn split3(path: &str) -> Result<(&str, &str, &str)> {
    let (v, rest) = path
        .split_once('/')
        .with_context(|| format!("expected VOLUME/BUCKET/KEY, got {path:?}"))?;
    let (b, k) = rest
        .split_once('/')
        .with_context(|| format!("expected VOLUME/BUCKET/KEY, got {path:?}"))?;
    Ok((v, b, k))
}

fn parse_meta(items: &[String]) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("metadata {kv:?} is not KEY=VALUE"))
        })
        .collect()
}

/// Epoch milliseconds as local ISO-8601 (`2026-11-30T18:52:07.123+01:00`).
fn iso_time(ms: u64) -> String {
    use chrono::TimeZone;
    match chrono::Local.timestamp_millis_opt(ms as i64) {
        chrono::LocalResult::Single(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
        _ => ms.to_string(),
    }
}

/// A byte count as people read it: `1.5 MiB`, exact below 1 KiB.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// JSON keeps exact numbers and adds an ISO-8601 string beside each
/// `*_ms` time: `created_ms` gets `created`.
fn with_iso_times(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        let times: Vec<(String, u64)> = m
            .iter()
            .filter_map(|(k, v)| Some((k.strip_suffix("_ms")?.to_string(), v.as_u64()?)))
            .filter(|(k, _)| matches!(k.as_str(), "created" | "modified" | "opened" | "initiated"))
            .collect();
        for (k, ms) in times {
            m.insert(k, Value::String(iso_time(ms)));
        }
    }
    v
}

/// How a table shows field `key`: times as local ISO-8601, byte counts
/// human-readable; everything else as it is.
fn table_cell(key: &str, v: &Value) -> String {
    match (key, v.as_u64()) {
        (k, Some(ms)) if k.ends_with("_ms") && ms > 0 && !k.starts_with("p") => iso_time(ms),
        (k, Some(n)) if k == "size" || k.ends_with("_bytes") => {
            if k.starts_with("quota") && n == 0 {
                "none".to_string()
            } else {
                human_bytes(n)
            }
        }
        _ => match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        },
    }
}

/// A table header for `key`: `created_ms` shows as CREATED.
fn table_header(key: &str) -> String {
    key.strip_suffix("_ms")
        .filter(|k| !k.starts_with('p'))
        .unwrap_or(key)
        .to_uppercase()
}

fn volume_json(v: &VolumeInfo) -> Value {
    json!({
        "name": v.name, "owner": v.owner, "quota_bytes": v.quota_bytes,
        "used_bytes": v.used_bytes,
        "quota_buckets": v.quota_namespace, "buckets": v.bucket_count,
        "created_ms": v.creation_time_ms, "modified_ms": v.modification_time_ms,
        "object_id": v.object_id, "update_id": v.update_id, "metadata": v.metadata,
    })
}

fn layout_name(l: i32) -> &'static str {
    match BucketLayout::try_from(l) {
        Ok(BucketLayout::FileSystemOptimized) => "FILE_SYSTEM_OPTIMIZED",
        _ => "OBJECT_STORE",
    }
}

fn bucket_json(b: &BucketInfo) -> Value {
    json!({
        "volume": b.volume, "name": b.name, "layout": layout_name(b.layout),
        "keys": b.key_count, "used_bytes": b.used_bytes, "open_keys": b.open_key_count,
        "quota_bytes": b.quota_bytes, "used_namespace": b.used_namespace,
        "quota_namespace": b.quota_namespace,
        "versioning": versions::versioning_name(b.versioning),
        "created_ms": b.creation_time_ms, "modified_ms": b.modification_time_ms,
        "object_id": b.object_id, "update_id": b.update_id, "metadata": b.metadata,
    })
}

fn key_json(k: &KeyInfo) -> Value {
    json!({
        "volume": k.volume, "bucket": k.bucket, "name": k.name, "size": k.size,
        "etag": k.etag, "content_type": k.content_type, "metadata": k.metadata,
        "blocks": k.blocks.iter().map(|b| json!({"id": b.block_id, "offset": b.offset, "length": b.length})).collect::<Vec<_>>(),
        "created_ms": k.creation_time_ms, "modified_ms": k.modification_time_ms,
        "object_id": k.object_id, "update_id": k.update_id,
        "version_id": k.version_id, "delete_marker": k.delete_marker, "is_latest": k.is_latest,
        "tag_count": k.tag_count,
    })
}

/// Prints rows as an aligned table.
fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn print_kv(out: Output, v: Value) {
    if out == Output::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&with_iso_times(v)).unwrap_or_default()
        );
        return;
    }
    if let Value::Object(m) = v {
        let shown: Vec<(String, String)> = m
            .iter()
            .map(|(k, v)| {
                let name = k
                    .strip_suffix("_ms")
                    .filter(|_| v.as_u64().is_some_and(|n| n > 0))
                    .unwrap_or(k);
                (name.to_string(), table_cell(k, v))
            })
            .collect();
        let w = shown.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, s) in shown {
            println!("{k:<w$}  {s}");
        }
    }
}

fn print_list(out: Output, items: Vec<Value>, cols: &[&str], next: &str, truncated: bool) {
    if out == Output::Json {
        let items: Vec<Value> = items.into_iter().map(with_iso_times).collect();
        let v = json!({"items": items, "truncated": truncated, "next_start_after": next});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let rows = items
        .iter()
        .map(|i| cols.iter().map(|c| table_cell(c, &i[*c])).collect())
        .collect();
    table(
        &cols
            .iter()
            .map(|c| table_header(c))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        rows,
    );
    if truncated {
        println!("-- more: --start-after {next:?}");
    }
}

/// Follows `start_after` markers while `all`, returning every item and the last page's marker.
/// A one-line progress count on stderr for long commands (`--all`
/// listings), shown only when stderr is a terminal, so pipes and scripts
/// see nothing of it.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCmd {
    #[command(subcommand)]
    mode: Option<bench_mix::BenchMode>,
    #[command(flatten)]
    compare: bench::BenchArgs,
}

pub struct Progress {
    on: bool,
    started: std::time::Instant,
    what: &'static str,
}

impl Progress {
    pub fn new(enabled: bool, what: &'static str) -> Progress {
        use std::io::IsTerminal;
        Progress {
            on: enabled && std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            what,
        }
    }

    pub fn update(&self, n: usize) {
        if self.on {
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            eprint!("\r{n} {} ({:.0}/s)\x1b[K", self.what, n as f64 / secs);
        }
    }

    pub fn done(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

async fn collect_pages<F, Fut>(
    all: bool,
    start_after: &str,
    mut page: F,
) -> Result<(Vec<Value>, String, bool), ClientError>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<Value>, String, bool), ClientError>>,
{
    let mut items = Vec::new();
    let mut marker = start_after.to_string();
    let progress = Progress::new(all, "items");
    loop {
        let (mut got, next, truncated) = page(marker.clone()).await?;
        items.append(&mut got);
        progress.update(items.len());
        if !(all && truncated) {
            progress.done();
            return Ok((items, next, truncated));
        }
        marker = next;
    }
}

async fn run(cli: Cli) -> Result<()> {
    let tls = cli.tls()?;
    let opts = ClientOptions {
        deadline: Duration::from_secs(cli.timeout),
        stale_reads: cli.stale,
        max_staleness_ms: cli.max_staleness_ms.unwrap_or(0),
        lease_reads: cli.lease,
        tls: tls.clone(),
        token: cli.auth_token.clone(),
        impersonate: cli.as_user.clone(),
        impersonate_groups: cli.as_groups.clone(),
        ..Default::default()
    };
    let endpoints: Vec<String> = cli.endpoint.split(',').map(str::to_string).collect();
    let c = OmClient::new(std::slice::from_ref(&cli.endpoint), opts.clone())?;
    let out = cli.output;
    match cli.cmd {
        Cmd::Volume(v) => match v {
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
            VolumeCmd::Setquota(a) => quota::set_volume(&c, out, a).await?,
            VolumeCmd::Clrquota(a) => quota::clr_volume(&c, out, a).await?,
        },
        Cmd::Bucket(b) => match b {
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
            BucketCmd::Delete { path } => {
                let (v, n) = split2(&path)?;
                c.delete_bucket(v, n).await?;
                if out == Output::Json {
                    println!("{}", json!({"deleted": path}));
                } else {
                    println!("deleted bucket {path}");
                }
            }
            BucketCmd::Setquota(a) => quota::set_bucket(&c, out, a).await?,
            BucketCmd::Clrquota(a) => quota::clr_bucket(&c, out, a).await?,
            BucketCmd::SetVersioning(a) => versions::set_versioning(&c, out, a).await?,
            BucketCmd::Lifecycle(l) => lifecycle::run(&c, out, l).await?,
        },
        Cmd::Key(k) => {
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
                } => objects::open(&c, out, &path, blocks, content_type, &meta).await?,
                KeyCmd::Allocate {
                    path,
                    session,
                    count,
                } => objects::allocate(&c, out, &path, session, count).await?,
                KeyCmd::Commit {
                    path,
                    session,
                    size,
                    blocks,
                    etag,
                    cond,
                } => objects::commit(&c, out, &path, session, size, &blocks, etag, &cond).await?,
                KeyCmd::ListOpen {
                    path,
                    prefix,
                    max,
                    token,
                    all,
                } => objects::list_open(&c, out, &path, prefix, max, token, all).await?,
                KeyCmd::Info { path, version } => {
                    let (v, b, key) = split3(&path)?;
                    print_kv(
                        out,
                        key_json(&c.lookup_key_version(v, b, key, &version).await?),
                    );
                }
                KeyCmd::Versions(a) => versions::list(&c, out, a).await?,
                KeyCmd::Tag(a) => tagging::run(&c, out, a).await?,
                KeyCmd::List {
                    path,
                    list: l,
                    delimiter,
                    token,
                    no_blocks,
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
                        .map(|r| json!({"key": r.key, "deleted": r.reason.is_empty(), "reason": r.reason,
                            "version_id": r.version_id, "delete_marker": r.delete_marker}))
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
                KeyCmd::Delete { path, version } => {
                    let (v, b, key) = split3(&path)?;
                    let r = c.delete_key_version(v, b, key, &version).await?;
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
        }
        Cmd::Copy(a) => objects::copy(&c, out, a).await?,
        Cmd::Mpu(m) => objects::mpu(&c, out, m).await?,
        Cmd::Blocks(b) => objects::blocks(&c, out, b).await?,
        Cmd::Fs(f) => files::run(&c, out, f).await?,
        Cmd::Acl(a) => acl::run(&c, out, a).await?,
        Cmd::Whoami => acl::whoami(&c, out).await?,
        Cmd::Token(t) => token::run(t, out)?,
        Cmd::Backup(b) => backup_cmd::run(&c, out, b).await?,
        Cmd::Bench(BenchCmd {
            mode: Some(mode), ..
        }) => {
            let om = std::sync::Arc::new(OmClient::new(&endpoints, opts)?);
            let report = match &mode {
                bench_mix::BenchMode::Load(a) => bench_mix::load(om, a).await?,
                bench_mix::BenchMode::Mix(a) => bench_mix::mix(om, a).await?,
            };
            if out == Output::Json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", bench_mix::markdown(&report));
            }
        }
        Cmd::Bench(BenchCmd {
            mode: None,
            compare: args,
        }) => {
            let rows = bench::run(&endpoints, &args, tls.clone(), cli.auth_token.clone()).await?;
            if out == Output::Json {
                let v: Vec<Value> = rows
                    .iter()
                    .map(|r| {
                        json!({"system": r.system, "op": r.op, "clients": r.concurrency,
                        "ops_per_sec": r.ops_per_sec, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                        "fsyncs_per_sec": r.fsyncs_per_sec, "leader_cpu_us": r.leader_cpu_us,
                        "follower_cpu_us": r.follower_cpu_us, "errors": r.errors})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", bench::markdown(&rows));
            }
        }
        Cmd::Cluster(ClusterCmd::Status) => print_status(out, c.cluster_status_all().await?)?,
        Cmd::Cluster(ClusterCmd::AddNode {
            node_id,
            raft_addr,
            grpc_addr,
            learner,
        }) => {
            c.add_node(node_id, &raft_addr, &grpc_addr, learner).await?;
            println!(
                "added node {node_id} as {}",
                if learner { "learner" } else { "voter" }
            );
        }
        Cmd::Cluster(ClusterCmd::RemoveNode { node_id }) => {
            c.remove_node(node_id).await?;
            println!("removed node {node_id}");
        }
        Cmd::Cluster(ClusterCmd::TransferLeader { node_id }) => {
            c.transfer_leader(node_id).await?;
            println!("node {node_id} is the leader");
        }
        Cmd::Cluster(ClusterCmd::Verify { digests_only }) => {
            let r = c.verify_replicas(!digests_only).await?;
            print_verify(out, &r);
            if let Some(t) = r.tables.as_ref().filter(|t| !t.all_agree) {
                let unanswered = t.members.iter().filter(|m| !m.error.is_empty()).count();
                let differ = t
                    .members
                    .iter()
                    .filter(|m| m.error.is_empty() && !m.agrees)
                    .count();
                bail!(
                    "replicas' tables do not all agree at index {} ({differ} member(s) differ, \
                     {unanswered} not compared)",
                    t.index
                );
            }
            if !r.all_agree {
                bail!(
                    "replicas do not all agree at index {} ({})",
                    r.index,
                    if r.index == 0 {
                        "nothing comparable yet"
                    } else if r.majority {
                        "a member differs from the majority or did not answer"
                    } else {
                        "no majority"
                    }
                );
            }
        }
    }
    Ok(())
}

fn print_verify(out: Output, r: &VerifyReplicasResponse) {
    if out == Output::Json {
        let members: Vec<Value> = r
            .members
            .iter()
            .map(|m| {
                json!({
                    "node_id": m.node_id,
                    "applied_index": m.applied_index,
                    "digest": m.digest,
                    "agrees": m.agrees,
                    "diverged": m.diverged,
                    "error": m.error,
                })
            })
            .collect();
        let tables = r.tables.as_ref().map(|t| {
            json!({
                "index": t.index,
                "all_agree": t.all_agree,
                "members": t.members.iter().map(|m| json!({
                    "node_id": m.node_id,
                    "agrees": m.agrees,
                    "error": m.error,
                    "tables": m.tables.iter().map(|x| json!({
                        "table": x.table, "entries": x.entries, "digest": x.digest,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "differences": t.differences.iter().map(|d| json!({
                    "node_id": d.node_id,
                    "compared_with": d.compared_with,
                    "table": d.table,
                    "key": d.key.escape_ascii().to_string(),
                    "what": d.what,
                })).collect::<Vec<_>>(),
            })
        });
        let v = json!({
            "index": r.index,
            "all_agree": r.all_agree,
            "majority": r.majority,
            "members": members,
            "tables": tables,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!("compared at index {}", r.index);
    println!("{:<6} {:>12}  {:<64}  VERDICT", "NODE", "APPLIED", "DIGEST");
    for m in &r.members {
        let verdict = if !m.error.is_empty() {
            format!("unreachable: {}", m.error)
        } else if m.digest.is_empty() {
            "no digest at that index".to_string()
        } else if m.agrees {
            "agrees".to_string()
        } else if r.majority {
            "DIFFERS from the majority".to_string()
        } else {
            "no majority".to_string()
        };
        let diverged = if m.diverged { " (marked diverged)" } else { "" };
        println!(
            "{:<6} {:>12}  {:<64}  {verdict}{diverged}",
            m.node_id, m.applied_index, m.digest
        );
    }
    let Some(t) = &r.tables else {
        return;
    };
    println!();
    println!("tables compared at index {}", t.index);
    println!("{:<6} {:>14}  VERDICT", "NODE", "ENTRIES");
    for m in &t.members {
        let entries: u64 = m.tables.iter().map(|x| x.entries).sum();
        let verdict = if !m.error.is_empty() {
            format!("not compared: {}", m.error)
        } else if m.agrees {
            "agrees".to_string()
        } else {
            "DIFFERS".to_string()
        };
        println!("{:<6} {:>14}  {verdict}", m.node_id, entries);
    }
    for d in &t.differences {
        if d.table.is_empty() {
            println!("node {}: {}", d.node_id, d.what);
        } else {
            println!(
                "node {}: first difference from node {} in table {} at key \"{}\": {}",
                d.node_id,
                d.compared_with,
                d.table,
                d.key.escape_ascii(),
                d.what
            );
        }
    }
}

type MemberStatus = (ClusterMember, Result<ClusterStatusResponse, ClientError>);

fn print_status(out: Output, all: Vec<MemberStatus>) -> Result<()> {
    // The leader's view gives each member's matched index and lag.
    let leader_view = all
        .iter()
        .find_map(|(_, s)| s.as_ref().ok().filter(|s| s.role == "leader"))
        .cloned();
    let matched = |id: u64| {
        leader_view.as_ref().and_then(|l| {
            l.members
                .iter()
                .find(|m| m.node_id == id && m.matched_known)
                .map(|m| {
                    (
                        m.matched_index,
                        l.last_log_index.saturating_sub(m.matched_index),
                    )
                })
        })
    };
    if out == Output::Json {
        let rows: Vec<Value> = all
            .iter()
            .map(|(m, s)| {
                let base = json!({"id": m.node_id, "voter": m.voter, "raft_addr": m.raft_addr, "grpc_addr": m.grpc_addr,
                    "matched_index": matched(m.node_id).map(|x| x.0), "lag": matched(m.node_id).map(|x| x.1)});
                match s {
                    Ok(s) => {
                        let mut v = base;
                        v["role"] = json!(s.role);
                        v["term"] = json!(s.term);
                        v["leader_id"] = json!(s.has_leader.then_some(s.leader_id));
                        v["last_log_index"] = json!(s.last_log_index);
                        v["committed_index"] = json!(s.committed_index);
                        v["applied_index"] = json!(s.applied_index);
                        v["snapshot_index"] = json!(s.snapshot_index);
                        v
                    }
                    Err(e) => {
                        let mut v = base;
                        v["error"] = json!(e.to_string());
                        v
                    }
                }
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "members": rows }))?
        );
        return Ok(());
    }
    let rows = all
        .iter()
        .map(|(m, s)| {
            let (mi, lag) = matched(m.node_id)
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .unwrap_or(("-".into(), "-".into()));
            let kind = if m.voter { "voter" } else { "learner" }.to_string();
            match s {
                Ok(s) => vec![
                    m.node_id.to_string(),
                    kind,
                    s.role.clone(),
                    s.term.to_string(),
                    if s.has_leader {
                        s.leader_id.to_string()
                    } else {
                        "-".into()
                    },
                    s.last_log_index.to_string(),
                    s.committed_index.to_string(),
                    s.applied_index.to_string(),
                    mi,
                    lag,
                    m.grpc_addr.clone(),
                ],
                Err(e) => vec![
                    m.node_id.to_string(),
                    kind,
                    format!("unreachable ({})", e.reason()),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    mi,
                    lag,
                    m.grpc_addr.clone(),
                ],
            }
        })
        .collect();
    table(
        &[
            "ID",
            "MEMBER",
            "ROLE",
            "TERM",
            "LEADER",
            "LAST_LOG",
            "COMMITTED",
            "APPLIED",
            "MATCHED",
            "LAG",
            "GRPC",
        ],
        rows,
    );
    Ok(())
}

/// A hint for an error that usually means the client and server disagree on
/// TLS, or `None`.
fn tls_hint(message: &str, tls: bool) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    if !tls && (m.contains("h2 protocol error") || m.contains("frame with invalid size")) {
        return Some("the server may require TLS: pass --cacert (and --cert/--key for mutual TLS)");
    }
    if tls && (m.contains("corrupt message") || m.contains("invalidcontenttype")) {
        return Some("the server does not speak TLS: drop --cacert, or enable TLS on it");
    }
    if tls && (m.contains("transport error") || m.contains("certificate")) {
        return Some(
            "TLS failed: check that --cacert signed the server's certificate, that the \
             certificate names the host you connect to, and that the server accepts \
             your --cert",
        );
    }
    None
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tls = cli.cacert.is_some();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("omctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let message = match e.downcast_ref::<ClientError>() {
                Some(ce) => ce.to_string(),
                None => format!("{e:#}"),
            };
            eprintln!("error: {message}");
            if let Some(hint) = tls_hint(&message, tls) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod output_tests {
    use super::*;

    #[test]
    fn tables_show_times_and_sizes_for_people_and_json_keeps_numbers() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(table_cell("quota_bytes", &json!(0)), "none");
        assert_eq!(table_cell("size", &json!(2048)), "2.0 KiB");
        assert_eq!(table_cell("etag", &json!("abc")), "abc");
        let t = table_cell("created_ms", &json!(1_796_060_000_123u64));
        assert!(
            t.starts_with("2026-11-30T") || t.starts_with("2026-12-01T"),
            "{t}"
        );
        assert!(t.contains(".123"), "{t}");
        assert_eq!(table_header("created_ms"), "CREATED");
        assert_eq!(table_header("p99_ms"), "P99_MS");
        let v = with_iso_times(json!({"created_ms": 0u64, "size": 5}));
        assert_eq!(v["created_ms"], 0);
        // Local time of the epoch: 1970-01-01 or 1969-12-31 by time zone.
        assert!(v["created"].as_str().unwrap().starts_with("19"), "{v}");
        assert_eq!(v["size"], 5);
    }
}
