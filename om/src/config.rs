//! Server configuration: command-line flags, each also settable as an `OM_*`
//! environment variable, over an optional TOML file, over defaults.
//! Precedence: flag > environment > file > default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

/// om: replicated object-metadata manager.
///
/// Started on an empty data directory without `--initial-cluster` or `--join`,
/// om initializes a single-node cluster; restarted on the same directory, it
/// resumes where it stopped.
#[derive(Debug, Parser, Default)]
#[command(name = "om", version)]
pub struct Args {
    /// TOML file with any of the settings below (keys as the long flags, with `_`).
    #[arg(long, env = "OM_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Directory holding the RocksDB database and snapshots [default: data].
    #[arg(long, env = "OM_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Address of the public gRPC API [default: 127.0.0.1:9862].
    #[arg(long, env = "OM_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// Address serving /metrics and /healthz [default: 127.0.0.1:9874].
    #[arg(long, env = "OM_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// This node's Raft id, unique in the cluster [default: 1].
    #[arg(long, env = "OM_NODE_ID", global = true)]
    pub node_id: Option<u64>,
    /// Take the node id from the host name's trailing ordinal, as a
    /// StatefulSet names its pods: `om-0` is node 1, `om-2` node 3.
    #[arg(
        long,
        env = "OM_NODE_ID_FROM_HOSTNAME",
        conflicts_with = "node_id",
        global = true
    )]
    pub node_id_from_hostname: bool,
    /// Address of the internal Raft service [default: 127.0.0.1:9872].
    #[arg(long, env = "OM_RAFT_ADDR")]
    pub raft_addr: Option<SocketAddr>,
    /// Static initial members, `ID=RAFT_ADDR[/GRPC_ADDR],...`; every member gets
    /// the same list and the lowest id initializes the cluster.
    #[arg(long, env = "OM_INITIAL_CLUSTER", global = true)]
    pub initial_cluster: Option<String>,
    /// Start empty and wait to be added by `omctl cluster add-node`.
    #[arg(long, env = "OM_JOIN")]
    pub join: bool,
    /// PEM certificate chain this node presents on its gRPC and Raft ports
    /// (and to other members). It must name the host of this node's Raft
    /// address as other members know it (DNS name or IP SAN). Reread when the
    /// file changes.
    #[arg(long, env = "OM_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "OM_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: the Raft port accepts only members with a certificate it
    /// signed (mutual TLS), and with it set the public port requires client
    /// certificates it signed.
    #[arg(long, env = "OM_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM certificate revocation lists of that CA: a revoked client or
    /// member certificate is refused in the handshake, on both ports and by
    /// this node dialing other members. Reread when the file changes.
    #[arg(long, env = "OM_TLS_CRL")]
    pub tls_crl: Option<PathBuf>,
    /// Serve plaintext on addresses other than loopback (refused otherwise).
    #[arg(long, env = "OM_INSECURE")]
    pub insecure: bool,
    /// Bearer tokens the public port accepts, one `PRINCIPAL omt_ID SALT
    /// SHA256 [GROUPS]` line each (`omctl token new` makes a token and its
    /// line). With it, a client presents a token or a client certificate.
    /// Reread when the file changes.
    #[arg(long, env = "OM_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Keys S3 secrets are sealed under at rest (AES-256-GCM), one `ID HEX`
    /// line each, the sealing key first (`omctl s3 secret new-key ID` makes a
    /// line). Give every member the same file. Without it, om refuses to
    /// create S3 secrets unless --insecure. Reread when the file changes.
    #[arg(long, env = "OM_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Cluster admins, comma-separated principal names (certificate or token
    /// names). With authentication on (a CA or a token file), requests are
    /// authorized against ACLs; admins may do everything. Give every member
    /// the same list.
    #[arg(long, env = "OM_ADMINS")]
    pub admins: Option<String>,
    /// Append an audit line (JSON) for every mutation and refused request
    /// to this file.
    #[arg(long, env = "OM_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,
    /// Rotate the audit log past this many bytes [default: 104857600 (100 MiB)].
    #[arg(long, env = "OM_AUDIT_LOG_MAX_BYTES")]
    pub audit_log_max_bytes: Option<u64>,
    /// Rotated audit logs kept (`PATH.1` newest) [default: 10].
    #[arg(long, env = "OM_AUDIT_LOG_KEEP")]
    pub audit_log_keep: Option<u32>,
    /// Log lines as `text` or `json` (one JSON object per event, for log
    /// collectors) [default: text].
    #[arg(long, env = "OM_LOG_FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Most entries a listing returns per page [default: 1000].
    #[arg(long, env = "OM_MAX_PAGE")]
    pub max_page: Option<u32>,
    /// Raft heartbeat interval in milliseconds [default: 100].
    #[arg(long, env = "OM_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Minimum election timeout in milliseconds; the maximum is twice it [default: 500].
    #[arg(long, env = "OM_ELECTION_TIMEOUT_MS")]
    pub election_timeout_ms: Option<u64>,
    /// How often this node compares its state digest with the other
    /// members', in milliseconds [default: 10000].
    #[arg(long, env = "OM_DIVERGENCE_CHECK_INTERVAL_MS")]
    pub divergence_check_interval_ms: Option<u64>,
    /// Read the whole store from disk, every block's checksum verified,
    /// every this many seconds (the first time within a minute of start);
    /// a block that rotted or a failed read stops the member (docs/operations.md,
    /// "A member's store is corrupt") [default: 86400; 0: never].
    #[arg(long, env = "OM_SCRUB_INTERVAL_S")]
    pub scrub_interval_s: Option<u64>,
    /// Build a snapshot every this many applied entries [default: 10000];
    /// past 64 MiB of snapshot, also wait for as many bytes of log.
    #[arg(long, env = "OM_SNAPSHOT_EVERY")]
    pub snapshot_every: Option<u64>,
    /// How long a write's result stays in the retry cache, in seconds [default: 600].
    #[arg(long, env = "OM_RETRY_CACHE_TTL_S")]
    pub retry_cache_ttl_s: Option<u64>,
    /// In delimiter listings, seek past a common prefix at its N-th contiguous
    /// key instead of stepping over the rest [default: 3].
    #[arg(long, env = "OM_LIST_SEEK_AFTER")]
    pub list_seek_after: Option<usize>,
    /// Log entries kept behind the latest snapshot for slow followers [default: 1000].
    #[arg(long, env = "OM_SNAPSHOT_KEEP_LOGS")]
    pub snapshot_keep_logs: Option<u64>,
    /// How long a write may wait to commit, or a read for its quorum check,
    /// before the request fails as UNAVAILABLE, in milliseconds [default: 10000].
    #[arg(long, env = "OM_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// The oldest state a stale read accepts unless it names its own bound:
    /// milliseconds since this node last took an append from a leader
    /// [default: 10000]. Older state is refused (UNAVAILABLE, STALE_STATE).
    #[arg(long, env = "OM_MAX_STALENESS_MS")]
    pub max_staleness_ms: Option<u64>,
    /// Open-key sessions older than this are expired and their blocks freed,
    /// in seconds [default: 604800 (7 days)].
    #[arg(long, env = "OM_OPEN_KEY_TTL_S")]
    pub open_key_ttl_s: Option<u64>,
    /// Smallest size of every part but the last when a multipart upload
    /// completes, in bytes [default: 5242880 (5 MiB, as S3)].
    #[arg(long, env = "OM_MIN_PART_SIZE")]
    pub min_part_size: Option<u64>,
    /// Most bytes one listing response encodes to: a page stops early, with
    /// a continuation, before passing it (a single larger item is returned
    /// alone). Keep it under the clients' decode limit (4 MiB by default in
    /// gRPC libraries) [default: 3145728 (3 MiB); at least 32768].
    #[arg(long, env = "OM_MAX_RESPONSE_BYTES")]
    pub max_response_bytes: Option<usize>,
    /// Most concurrent connections to the public gRPC port; further ones are
    /// reset at once [default: what the open-file limit leaves, see docs/configuration.md].
    #[arg(long, env = "OM_MAX_GRPC_CONNECTIONS")]
    pub max_grpc_connections: Option<usize>,
    /// Most concurrent connections to the Raft port [default: an eighth of the
    /// connection share, 8..=256].
    #[arg(long, env = "OM_MAX_RAFT_CONNECTIONS")]
    pub max_raft_connections: Option<usize>,
    /// Most concurrent connections to the HTTP port [default: a sixteenth of
    /// the connection share, 2..=64].
    #[arg(long, env = "OM_MAX_HTTP_CONNECTIONS")]
    pub max_http_connections: Option<usize>,
    /// A connection on which nothing was sent or received for this long is
    /// closed, in seconds; gRPC ports ping clients at a third of it [default: 60].
    #[arg(long, env = "OM_IDLE_TIMEOUT_S")]
    pub idle_timeout_s: Option<u64>,
    /// SST files RocksDB keeps open [default: a quarter of the open-file
    /// limit, 32..=10000].
    #[arg(long, env = "OM_DB_MAX_OPEN_FILES")]
    pub db_max_open_files: Option<u64>,
    /// Length of a lifecycle day in milliseconds, for the date maths of
    /// lifecycle rules (S3's Days round up to a day boundary); shorten it
    /// only to age objects quickly in tests [default: 86400000, 1..=86400000].
    #[arg(long, env = "OM_LIFECYCLE_DAY_MS")]
    pub lifecycle_day_ms: Option<u64>,
    /// Most entries the lifecycle scanner evaluates per second [default: 20000].
    #[arg(long, env = "OM_LIFECYCLE_EVALUATIONS_PER_S")]
    pub lifecycle_evaluations_per_s: Option<u64>,
    /// Most lifecycle actions (expirations, removals, aborted uploads) per
    /// second [default: 2000].
    #[arg(long, env = "OM_LIFECYCLE_ACTIONS_PER_S")]
    pub lifecycle_actions_per_s: Option<u64>,
    /// A bucket's next lifecycle pass starts this long after its last one
    /// completed, in milliseconds [default: 3600000].
    #[arg(long, env = "OM_LIFECYCLE_INTERVAL_MS")]
    pub lifecycle_interval_ms: Option<u64>,
    /// Most bytes per second all backups together read from this node's
    /// disk (files and the scan of every table), in MiB [default: 32].
    #[arg(long, env = "OM_BACKUP_RATE_MIB_S")]
    pub backup_rate_mib_s: Option<u64>,
    /// Memory RocksDB may use for memtables and its block cache, e.g.
    /// `2GiB` or `512MiB` [default: 40 % of the cgroup memory limit, or
    /// 1 GiB without one; at least 64 MiB]. See docs/configuration.md, "Memory".
    #[arg(long, env = "OM_MEMORY_BUDGET")]
    pub memory_budget: Option<String>,
    /// Disaster recovery after losing a majority for good: start as the only
    /// voter of the cluster, keeping this node's data (docs/operations.md, "Losing a
    /// majority"). Done once per data directory: a marker file keeps a
    /// restart with the flag still set from doing it again.
    #[arg(long, env = "OM_FORCE_NEW_CLUSTER")]
    pub force_new_cluster: bool,
    /// Archive every entry this node applies into this directory, so `om
    /// restore --to-index/--to-time` can replay past a backup (docs/operations.md,
    /// "Backups and restore").
    #[arg(long, env = "OM_ARCHIVE_LOG")]
    pub archive_log: Option<PathBuf>,
    /// Refuse writes that add data (RESOURCE_EXHAUSTED, DISK_FULL) while
    /// the data volume has fewer bytes free; deletes go on [default:
    /// 268435456 (256 MiB)].
    #[arg(long, env = "OM_MIN_FREE_BYTES")]
    pub min_free_bytes: Option<u64>,
    /// HMAC keys, one `ID HEX` line each (`omctl s3 secret new-key ID`
    /// makes one): this node signs its log archive under the first; `om
    /// restore` given it refuses a backup or archive segment that is
    /// unsigned or was altered, naming the file. Give `omctl backup` the
    /// same file.
    #[arg(long, env = "OM_BACKUP_KEY_FILE", global = true)]
    pub backup_key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What `om` does besides serving.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Writes this member's store for a NEW cluster from a backup made by
    /// `omctl backup create`, into an empty data directory; then start `om`
    /// on it. Restore every member of the new cluster from the same backup,
    /// with the same --initial-cluster. Uses --data-dir, --node-id (or
    /// --node-id-from-hostname), --initial-cluster and --config as `om` does.
    Restore(RestoreArgs),
}

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// A backup directory (`DEST/ID`), or the backups' directory `DEST`
    /// for its newest backup.
    #[arg(long)]
    pub from: PathBuf,
    /// Replay archived entries after the backup up to this log index
    /// (needs --archive-log).
    #[arg(long, conflicts_with = "to_time", requires = "archive_log")]
    pub to_index: Option<u64>,
    /// Replay archived entries after the backup up to this time (RFC 3339,
    /// e.g. 2026-12-02T10:00:00Z, or ms since the Unix epoch): every write
    /// the leader stamped at or before it, none after (needs --archive-log).
    #[arg(long, requires = "archive_log")]
    pub to_time: Option<String>,
    /// The log archive to replay from (a member's --archive-log).
    #[arg(long = "archive-log")]
    pub archive_log: Option<PathBuf>,
}

/// Free bytes the data volume keeps for deletes, compaction and the log.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 256 << 20;

/// The same settings as read from a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    node_id: Option<u64>,
    node_id_from_hostname: Option<bool>,
    raft_addr: Option<SocketAddr>,
    initial_cluster: Option<String>,
    join: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_crl: Option<PathBuf>,
    insecure: Option<bool>,
    token_file: Option<PathBuf>,
    secrets_key_file: Option<PathBuf>,
    backup_key_file: Option<PathBuf>,
    min_free_bytes: Option<u64>,
    admins: Option<String>,
    audit_log: Option<PathBuf>,
    audit_log_max_bytes: Option<u64>,
    audit_log_keep: Option<u32>,
    max_page: Option<u32>,
    heartbeat_ms: Option<u64>,
    election_timeout_ms: Option<u64>,
    divergence_check_interval_ms: Option<u64>,
    scrub_interval_s: Option<u64>,
    snapshot_every: Option<u64>,
    retry_cache_ttl_s: Option<u64>,
    snapshot_keep_logs: Option<u64>,
    request_timeout_ms: Option<u64>,
    max_staleness_ms: Option<u64>,
    list_seek_after: Option<usize>,
    open_key_ttl_s: Option<u64>,
    min_part_size: Option<u64>,
    max_response_bytes: Option<usize>,
    max_grpc_connections: Option<usize>,
    max_raft_connections: Option<usize>,
    max_http_connections: Option<usize>,
    idle_timeout_s: Option<u64>,
    db_max_open_files: Option<u64>,
    lifecycle_day_ms: Option<u64>,
    lifecycle_evaluations_per_s: Option<u64>,
    lifecycle_actions_per_s: Option<u64>,
    lifecycle_interval_ms: Option<u64>,
    backup_rate_mib_s: Option<u64>,
    memory_budget: Option<String>,
    archive_log: Option<PathBuf>,
}

/// Smallest response byte budget: room for the token and markers every
/// listing response keeps (`listing::PAGE_OVERHEAD_BYTES`) and a useful page.
pub const MIN_RESPONSE_BYTES: usize = 32 * 1024;
const _: () = assert!(MIN_RESPONSE_BYTES > 2 * crate::listing::PAGE_OVERHEAD_BYTES);

pub use crate::tasks::rejoin::InitialMember;

/// Effective configuration after merging every source.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub node_id: u64,
    pub raft_addr: SocketAddr,
    pub initial_cluster: Vec<InitialMember>,
    pub join: bool,
    /// Certificate, key and CA files; TLS is on when a certificate is set.
    pub tls: om_tls::TlsFiles,
    /// Bearer tokens of the public port.
    pub token_file: Option<PathBuf>,
    /// Keys S3 secrets are sealed under.
    pub secrets_key_file: Option<PathBuf>,
    /// Keys backups and the log archive are signed and checked under.
    pub backup_key_file: Option<PathBuf>,
    /// Free bytes below which writes that add data are refused.
    pub min_free_bytes: u64,
    /// Serve plaintext beyond loopback, and keep S3 secrets in plain text
    /// without a secrets key.
    pub insecure: bool,
    /// Cluster admins by configuration.
    pub admins: std::collections::BTreeSet<String>,
    /// Audit log file, its rotation size and rotated files kept.
    pub audit_log: Option<PathBuf>,
    pub audit_log_max_bytes: u64,
    pub audit_log_keep: u32,
    pub max_page: u32,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    /// Between two comparisons of this node's state digest with the others'.
    pub divergence_check_interval: Duration,
    /// Between two scrubs of the store (zero: never).
    pub scrub_interval: Duration,
    pub snapshot_every: u64,
    pub retry_cache_ttl: Duration,
    pub snapshot_keep_logs: u64,
    pub request_timeout: Duration,
    pub max_staleness_ms: u64,
    pub list_seek_after: usize,
    pub open_key_ttl: Duration,
    pub min_part_size: u64,
    pub max_response_bytes: usize,
    /// Configured shares of the descriptor budget (`descriptors::budget` derives
    /// the rest from the open-file limit at start-up).
    pub fd_overrides: crate::descriptors::Overrides,
    pub idle_timeout: Duration,
    pub lifecycle: crate::tasks::lifecycle::Settings,
    /// Bytes per second backups may read.
    pub backup_rate: u64,
    /// Bytes RocksDB may spend on memtables and block cache.
    pub memory_budget: u64,
    /// Start as the only voter (once per data directory).
    pub force_new_cluster: bool,
    /// Where applied entries are archived.
    pub archive_log: Option<PathBuf>,
}

impl Config {
    /// Merges flags and environment (already in `args`) over the TOML file, if any.
    pub fn load(args: Args) -> Result<Config, String> {
        let file = match &args.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("reading config {}: {e}", p.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| format!("parsing config {}: {e}", p.display()))?
            }
            None => FileConfig::default(),
        };
        let parse = |s: &str| s.parse::<SocketAddr>().expect("valid default address");
        let from_hostname =
            args.node_id_from_hostname || file.node_id_from_hostname.unwrap_or(false);
        let node_id = match (args.node_id, from_hostname) {
            (Some(id), _) => id,
            (None, true) => node_id_of_host(&hostname()?)?,
            (None, false) => file.node_id.unwrap_or(1),
        };
        if node_id == 0 {
            return Err("node id must be at least 1".to_string());
        }
        let grpc_addr = args
            .grpc_addr
            .or(file.grpc_addr)
            .unwrap_or_else(|| parse("127.0.0.1:9862"));
        let initial_cluster = match args.initial_cluster.or(file.initial_cluster) {
            Some(s) => parse_initial_cluster(&s)?,
            None => Vec::new(),
        };
        // A node the initial cluster does not list can only join the
        // cluster later (a StatefulSet scaled out shares the members' file).
        let unlisted =
            !initial_cluster.is_empty() && !initial_cluster.iter().any(|m| m.id == node_id);
        let tls = om_tls::TlsFiles {
            cert: args.tls_cert.or(file.tls_cert),
            key: args.tls_key.or(file.tls_key),
            ca: args.tls_ca.or(file.tls_ca),
            crl: args.tls_crl.or(file.tls_crl),
        };
        if tls.crl.is_some() && tls.ca.is_none() {
            return Err("--tls-crl without --tls-ca: revocation lists belong to a CA".to_string());
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err("--tls-cert and --tls-key go together".to_string());
        }
        if tls.cert.is_some() && tls.ca.is_none() {
            return Err(
                "TLS needs --tls-ca too: the Raft port accepts only members with a certificate \
                 that CA signed"
                    .to_string(),
            );
        }
        if tls.cert.is_none() && tls.ca.is_some() {
            return Err("--tls-ca without --tls-cert: set both (and --tls-key)".to_string());
        }
        let insecure = args.insecure || file.insecure.unwrap_or(false);
        let raft_addr = args
            .raft_addr
            .or(file.raft_addr)
            .unwrap_or_else(|| parse("127.0.0.1:9872"));
        if tls.cert.is_none() && !insecure {
            for (flag, a) in [("--grpc-addr", grpc_addr), ("--raft-addr", raft_addr)] {
                if !a.ip().is_loopback() {
                    return Err(format!(
                        "{flag} {a} is not a loopback address and TLS is off: anyone who \
                         reaches it could read and rewrite the cluster. Set --tls-cert, \
                         --tls-key and --tls-ca, or pass --insecure to serve plaintext anyway"
                    ));
                }
            }
        }
        let join = args.join || file.join.unwrap_or(false) || unlisted;
        if tls.cert.is_some() && join && initial_cluster.is_empty() {
            return Err(
                "--join with TLS needs --initial-cluster naming the members it joins: until it \
                 receives the cluster's membership, its Raft port admits only their certificates"
                    .to_string(),
            );
        }
        let token_file = args.token_file.or(file.token_file);
        if token_file.is_some() && tls.cert.is_none() && !insecure {
            return Err(
                "--token-file without TLS: tokens would cross the network in the clear, and the \
                 plaintext Raft port is open to every local process, which could rewrite the \
                 ACLs the tokens are checked against. Set --tls-cert, --tls-key and --tls-ca, or \
                 pass --insecure (development only)"
                    .to_string(),
            );
        }
        let mut admins = std::collections::BTreeSet::new();
        for name in args
            .admins
            .or(file.admins)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            if name.len() > crate::authz::MAX_NAME_BYTES {
                return Err(format!("--admins: {name:?} is longer than 256 bytes"));
            }
            admins.insert(name.to_string());
        }
        let max_page = args.max_page.or(file.max_page).unwrap_or(1000);
        if max_page == 0 {
            return Err("max page must be at least 1".to_string());
        }
        let max_response_bytes = args
            .max_response_bytes
            .or(file.max_response_bytes)
            .unwrap_or(crate::service::DEFAULT_MAX_RESPONSE_BYTES);
        if max_response_bytes < MIN_RESPONSE_BYTES {
            return Err(format!(
                "max response bytes must be at least {MIN_RESPONSE_BYTES}"
            ));
        }
        let election_ms = args
            .election_timeout_ms
            .or(file.election_timeout_ms)
            .unwrap_or(500);
        let heartbeat_ms = args.heartbeat_ms.or(file.heartbeat_ms).unwrap_or(100);
        if heartbeat_ms == 0 || heartbeat_ms >= election_ms {
            return Err("heartbeat must be positive and below the election timeout".to_string());
        }
        let memory_budget = match args
            .memory_budget
            .as_deref()
            .or(file.memory_budget.as_deref())
        {
            Some(s) => {
                crate::memory::parse_bytes(s).map_err(|e| format!("--memory-budget: {e}"))?
            }
            None => crate::memory::default_budget(),
        };
        if memory_budget < crate::memory::MIN_BUDGET {
            return Err(format!(
                "--memory-budget must be at least {} MiB",
                crate::memory::MIN_BUDGET >> 20
            ));
        }
        Ok(Config {
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("data")),
            grpc_addr,
            http_addr: args
                .http_addr
                .or(file.http_addr)
                .unwrap_or_else(|| parse("127.0.0.1:9874")),
            node_id,
            raft_addr,
            initial_cluster,
            join,
            tls,
            token_file,
            secrets_key_file: args.secrets_key_file.or(file.secrets_key_file),
            backup_key_file: args.backup_key_file.or(file.backup_key_file),
            min_free_bytes: args
                .min_free_bytes
                .or(file.min_free_bytes)
                .unwrap_or(DEFAULT_MIN_FREE_BYTES),
            insecure,
            admins,
            audit_log: args.audit_log.or(file.audit_log),
            audit_log_max_bytes: args
                .audit_log_max_bytes
                .or(file.audit_log_max_bytes)
                .unwrap_or(100 << 20)
                .max(4096),
            audit_log_keep: args.audit_log_keep.or(file.audit_log_keep).unwrap_or(10),
            max_page,
            heartbeat: Duration::from_millis(heartbeat_ms),
            election_timeout: Duration::from_millis(election_ms),
            divergence_check_interval: Duration::from_millis(
                args.divergence_check_interval_ms
                    .or(file.divergence_check_interval_ms)
                    .unwrap_or(10_000)
                    .max(100),
            ),
            scrub_interval: Duration::from_secs(
                args.scrub_interval_s
                    .or(file.scrub_interval_s)
                    .unwrap_or(86_400),
            ),
            snapshot_every: args
                .snapshot_every
                .or(file.snapshot_every)
                .unwrap_or(10_000)
                .max(1),
            retry_cache_ttl: Duration::from_secs(
                args.retry_cache_ttl_s
                    .or(file.retry_cache_ttl_s)
                    .unwrap_or(600),
            ),
            snapshot_keep_logs: args
                .snapshot_keep_logs
                .or(file.snapshot_keep_logs)
                .unwrap_or(1000),
            list_seek_after: args
                .list_seek_after
                .or(file.list_seek_after)
                .unwrap_or(crate::listing::DEFAULT_SEEK_AFTER)
                .max(2),
            request_timeout: Duration::from_millis(
                args.request_timeout_ms
                    .or(file.request_timeout_ms)
                    .unwrap_or(10_000)
                    .max(1),
            ),
            max_staleness_ms: args
                .max_staleness_ms
                .or(file.max_staleness_ms)
                .unwrap_or(crate::service::DEFAULT_MAX_STALENESS_MS)
                .max(1),
            open_key_ttl: Duration::from_secs(
                args.open_key_ttl_s
                    .or(file.open_key_ttl_s)
                    .unwrap_or(7 * 24 * 3600)
                    .max(1),
            ),
            min_part_size: args
                .min_part_size
                .or(file.min_part_size)
                .unwrap_or(crate::apply::DEFAULT_MIN_PART_SIZE),
            max_response_bytes,
            fd_overrides: crate::descriptors::Overrides {
                db_max_open_files: args.db_max_open_files.or(file.db_max_open_files),
                grpc_connections: args.max_grpc_connections.or(file.max_grpc_connections),
                raft_connections: args.max_raft_connections.or(file.max_raft_connections),
                http_connections: args.max_http_connections.or(file.max_http_connections),
            },
            idle_timeout: Duration::from_secs(
                args.idle_timeout_s
                    .or(file.idle_timeout_s)
                    .unwrap_or(DEFAULT_IDLE_TIMEOUT_S)
                    .max(1),
            ),
            lifecycle: {
                let d = crate::tasks::lifecycle::Settings::default();
                crate::tasks::lifecycle::Settings {
                    day_ms: args
                        .lifecycle_day_ms
                        .or(file.lifecycle_day_ms)
                        .unwrap_or(d.day_ms)
                        .clamp(1, d.day_ms),
                    evaluations_per_s: args
                        .lifecycle_evaluations_per_s
                        .or(file.lifecycle_evaluations_per_s)
                        .unwrap_or(d.evaluations_per_s)
                        .max(1),
                    actions_per_s: args
                        .lifecycle_actions_per_s
                        .or(file.lifecycle_actions_per_s)
                        .unwrap_or(d.actions_per_s)
                        .max(1),
                    interval: args
                        .lifecycle_interval_ms
                        .or(file.lifecycle_interval_ms)
                        .map_or(d.interval, Duration::from_millis),
                }
            },
            backup_rate: args
                .backup_rate_mib_s
                .or(file.backup_rate_mib_s)
                .map_or(crate::backup::DEFAULT_RATE, |m| m.max(1) << 20),
            memory_budget,
            force_new_cluster: args.force_new_cluster,
            archive_log: args.archive_log.or(file.archive_log),
        })
    }
}

/// Default idle timeout of connections, in seconds.
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 60;

/// Parses `1=127.0.0.1:9872/127.0.0.1:9862,2=...`. The gRPC address is optional.
/// This machine's host name (a pod's name in Kubernetes).
fn hostname() -> Result<String, String> {
    if let Ok(h) = std::env::var("HOSTNAME")
        && !h.is_empty()
    {
        return Ok(h);
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .map_err(|e| format!("--node-id-from-hostname: cannot read the host name: {e}"))
}

/// The node id a StatefulSet pod's name stands for: its trailing ordinal
/// plus one (`om-0` → 1); a fully qualified name counts by its first label.
pub fn node_id_of_host(host: &str) -> Result<u64, String> {
    let label = host.split('.').next().unwrap_or_default();
    let ordinal = label
        .rsplit_once('-')
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            format!("--node-id-from-hostname: host name {host:?} does not end in -ORDINAL")
        })?;
    ordinal
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| format!("--node-id-from-hostname: ordinal of {host:?} is too large"))
}

pub fn parse_initial_cluster(s: &str) -> Result<Vec<InitialMember>, String> {
    let mut out: Vec<InitialMember> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addrs) = part
            .split_once('=')
            .ok_or_else(|| format!("initial cluster member {part:?} is not ID=ADDR"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("initial cluster member id {id:?} is not a number"))?;
        if id == 0 {
            return Err("node ids start at 1".to_string());
        }
        let (raft, grpc) = match addrs.split_once('/') {
            Some((r, g)) => (r.trim().to_string(), g.trim().to_string()),
            None => (addrs.trim().to_string(), String::new()),
        };
        if raft.is_empty() {
            return Err(format!("initial cluster member {id} has no address"));
        }
        if out.iter().any(|m| m.id == id) {
            return Err(format!("initial cluster lists id {id} twice"));
        }
        out.push(InitialMember {
            id,
            raft_addr: raft,
            grpc_addr: grpc,
        });
    }
    out.sort_by_key(|m| m.id);
    Ok(out)
}

#[cfg(test)]
mod tests;
