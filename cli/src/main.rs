//! `omctl`: the admin CLI of om.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use om_client::{ClientError, ClientOptions, OmClient};
use serde_json::{Value, json};

mod acl;
mod backup_cmd;
mod backup_copy;
mod bench;
mod bench_mix;
mod cluster;
mod files;
mod keys;
mod lifecycle;
mod namespace;
mod objects;
mod output;
mod quota;
mod s3;
mod snapshots;
mod tagging;
mod token;
mod versions;

use cluster::ClusterCmd;
use keys::KeyCmd;
use namespace::{BucketCmd, VolumeCmd};
use output::{
    Output, Progress, bucket_json, key_json, print_kv, print_list, table, table_cell, volume_json,
};

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
    /// S3 credentials for S3 gateways: `s3 secret create|show|list|revoke`.
    #[command(subcommand)]
    S3(s3::S3Cmd),
    /// Backups: create (online, incremental), list, verify, prune. Restore
    /// with `om restore`.
    #[command(subcommand)]
    Backup(backup_cmd::BackupCmd),
    /// Snapshots of a bucket: frozen images of its keys.
    #[command(subcommand)]
    Snapshot(snapshots::SnapshotCmd),
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
        Cmd::Volume(v) => namespace::volume(&c, out, v).await?,
        Cmd::Bucket(b) => namespace::bucket(&c, out, b).await?,
        Cmd::Key(k) => keys::run(&c, out, k).await?,
        Cmd::Copy(a) => objects::copy(&c, out, a).await?,
        Cmd::Mpu(m) => objects::mpu(&c, out, m).await?,
        Cmd::Blocks(b) => objects::blocks(&c, out, b).await?,
        Cmd::Fs(f) => files::run(&c, out, f).await?,
        Cmd::Acl(a) => acl::run(&c, out, a).await?,
        Cmd::Whoami => acl::whoami(&c, out).await?,
        Cmd::S3(s) => s3::run(&c, out, s).await?,
        Cmd::Token(t) => token::run(t, out)?,
        Cmd::Backup(b) => backup_cmd::run(&c, out, b).await?,
        Cmd::Snapshot(s) => snapshots::run(&c, out, s).await?,
        Cmd::Bench(BenchCmd {
            mode: Some(mode), ..
        }) => {
            let report = match &mode {
                bench_mix::BenchMode::Load(a) => {
                    bench_mix::load(std::sync::Arc::new(OmClient::new(&endpoints, opts)?), a)
                        .await?
                }
                bench_mix::BenchMode::Mix(a) if a.spread => {
                    bench_mix::mix(bench::spread_clients(&endpoints, &opts)?, a).await?
                }
                bench_mix::BenchMode::Mix(a) => {
                    let om = std::sync::Arc::new(OmClient::new(&endpoints, opts)?);
                    bench_mix::mix(vec![om], a).await?
                }
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
                        "follower_cpu_us": r.follower_cpu_us,
                        "busiest": r.busiest.map(|(who, used)| json!({"member": who, "used": used})),
                        "client_cpu_us": r.client_cpu_us, "errors": r.errors})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", bench::markdown(&rows, args.cpus_per_node));
            }
        }
        Cmd::Cluster(cmd) => cluster::run(&c, out, cmd).await?,
    }
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
